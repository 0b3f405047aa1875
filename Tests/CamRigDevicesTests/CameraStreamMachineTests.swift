import CamRigDeviceModel
import CamRigDevices
import Foundation
import Testing

@Suite("A camera's streaming life, as libcamera's camera states", .timeLimit(.minutes(1)))
struct CameraStreamMachineTests {
    @Test("a camera streams only once configured, and one stream at a time")
    func startNeedsAConfiguredIdleCamera() {
        var machine = CameraStreamMachine()
        var gate = machine.start()
        #expect(gate == .refuse(.notConfigured))
        #expect(machine.mayConfigure() == .proceed)
        machine.configured()
        gate = machine.start()
        #expect(gate == .proceed)
        let run = machine.run
        #expect(machine.state == .running(run: 1))
        gate = machine.start()
        #expect(gate == .refuse(.streaming))
        #expect(machine.mayConfigure() == .refuse(.streaming), "the format cannot change under a running stream")
        #expect(machine.run == run)
    }

    @Test("a stop only asks: configuring or starting waits until the stream's thread has ended")
    func stoppingIsWaitedFor() {
        var machine = CameraStreamMachine()
        machine.configured()
        _ = machine.start()
        let stopped = machine.stop()
        #expect(stopped == 1)
        #expect(machine.state == .stopping(run: 1))
        #expect(!machine.isRunning(1), "the thread sees the stop")
        let again = machine.stop()
        #expect(again == nil, "a second stop changes nothing")
        var gate = machine.start()
        #expect(gate == .waitForStop)
        #expect(machine.mayConfigure() == .waitForStop)
        let ended = machine.ended(run: 1)
        #expect(ended)
        #expect(machine.state == .configured)
        gate = machine.start()
        #expect(gate == .proceed)
        #expect(machine.state == .running(run: 2), "every stream has a run of its own")
    }

    @Test("an old stream's late end never ends the new one")
    func staleEndIsIgnored() {
        var machine = CameraStreamMachine()
        machine.configured()
        _ = machine.start()
        _ = machine.stop()
        machine.ended(run: 1)
        _ = machine.start()
        let lateEnd = machine.ended(run: 1)
        #expect(!lateEnd)
        #expect(machine.state == .running(run: 2))
        #expect(!machine.isRunning(1))
        #expect(machine.isRunning(2))
    }

    @Test("a stream that ends by itself (a device error) leaves the camera configured")
    func failedStreamEnds() {
        var machine = CameraStreamMachine()
        machine.configured()
        _ = machine.start()
        let ended = machine.ended(run: 1)
        #expect(ended)
        #expect(machine.state == .configured)
        _ = machine.start()
        machine.startFailed(run: 2)
        #expect(machine.state == .configured, "a start that failed before its thread began leaves nothing running")
    }

    @Test("a camera that goes away ends its stream and refuses everything after")
    func disconnection() {
        var machine = CameraStreamMachine()
        machine.configured()
        _ = machine.start()
        let ending = machine.disconnect()
        #expect(ending == 1)
        #expect(!machine.isRunning(1))
        #expect(machine.isDisconnected)
        let ended = machine.ended(run: 1)
        #expect(!ended, "its thread's end leaves it disconnected")
        let gate = machine.start()
        #expect(gate == .refuse(.disconnected))
        #expect(machine.mayConfigure() == .refuse(.disconnected))
        machine.configured()
        #expect(machine.isDisconnected)
    }

    @Test("a start waits for the stopping stream's thread, then streams")
    func ownerWaitsForTheStop() throws {
        let stream = CameraStream(device: "test:camera", stopWait: 30)
        stream.configured()
        let first = try stream.start()
        #expect(stream.stop())
        let thread = Thread {
            Thread.sleep(forTimeInterval: 0.1)
            stream.ended(first)
        }
        thread.start()
        let second = try stream.start()
        #expect(second != first)
        #expect(stream.state == .running(run: second))
    }

    @Test("a stream that does not stop in time is answered with an error naming the camera")
    func ownerGivesUp() throws {
        let stream = CameraStream(device: "test:camera", stopWait: 0.2)
        stream.configured()
        _ = try stream.start()
        stream.stop()
        let error = try #require(throws: DeviceError.self) { try stream.waitUntilIdle() }
        #expect(error.code == .busy)
        #expect(error.deviceID == "test:camera")
        #expect(error.message.contains("still stopping"))
        #expect(throws: DeviceError.self) { _ = try stream.start() }
    }

    @Test("a streaming thread pacing its frames is woken at once by a stop")
    func pacingWaitIsWoken() throws {
        let stream = CameraStream(device: "test:camera")
        stream.configured()
        let run = try stream.start()
        #expect(stream.wait(whileRunning: run, nanoseconds: 1_000_000), "a short wait while running returns true")
        let stopper = Thread {
            Thread.sleep(forTimeInterval: 0.1)
            stream.stop()
        }
        stopper.start()
        // Ten minutes unless the stop wakes it; the suite's one-minute limit fails the test otherwise.
        #expect(!stream.wait(whileRunning: run, nanoseconds: 600_000_000_000))
    }
}
