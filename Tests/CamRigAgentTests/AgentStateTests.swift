import CamRigClock
import CamRigDeviceModel
import CamRigDevices
import CamRigWire
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOPosix
import Testing

@testable import CamRigAgent

/// The agent's states driven directly, without sockets: who watches which device, what a lease's end
/// takes, a capture's frame selection, and the order of a connection's work.
@Suite("Agent states", .timeLimit(.minutes(1)))
struct AgentStateTests {
    /// Frames that `AgentStreams.State` can hold; `FramesSink` is one too.
    final class Watcher: FrameSink {
        let connection: UInt64
        private let id = NIOLockedValueBox("")
        var streamID: String { id.withLockedValue { $0 } }
        func assign(streamID: String) { id.withLockedValue { $0 = streamID } }
        init(connection: UInt64) { self.connection = connection }
        func deliver(_ frame: CapturedFrame) {}
        func end(reason: WireStreamEndReason, message: String) {}
    }

    @Test(
        "a device's stream starts with its first watcher and is stopped with its last; a later stream of the device is a new hub"
    )
    func streamsState() {
        var state = AgentStreams.State()
        let first = state.add(Watcher(connection: 1), streamID: "s1", deviceID: "cam")
        let second = state.add(Watcher(connection: 2), streamID: "s2", deviceID: "cam")
        #expect(first.isNew && !second.isNew && first.hub == second.hub)
        #expect(state.subscribers(deviceID: "cam", hub: first.hub).count == 2)
        #expect(state.subscribers { $0.connection == 2 }.count == 1)

        let task = Task<Void, Never> {}
        state.hubs["cam"]?.task = task
        guard let removed = state.remove(streamID: "s1") else {
            Issue.record("s1 was watching")
            return
        }
        #expect(removed.cancel == nil, "another watcher remains: the device keeps streaming")
        #expect(removed.subscriber.connection == 1)
        #expect(
            state.remove(streamID: "s2")?.cancel != nil, "the last watcher left: the device's stream is to be stopped")
        #expect(state.hubs.isEmpty)
        #expect(state.remove(streamID: "s2") == nil, "a stream is removed once")
        #expect(state.stopping["cam"]?.hub == first.hub, "the device winds down until the stopped stream's task ends")
        state.ended(deviceID: "cam", hub: first.hub + 1)
        #expect(state.stopping["cam"] != nil, "another stream's end does not count")
        state.ended(deviceID: "cam", hub: first.hub)
        #expect(state.stopping["cam"] == nil)

        let later = state.add(Watcher(connection: 3), streamID: "s3", deviceID: "cam")
        #expect(later.isNew && later.hub != first.hub)
        #expect(
            state.subscribers(deviceID: "cam", hub: first.hub).isEmpty,
            "the old stream's task finds no subscribers of the new one")
    }

    @Test(
        "a capture's frames: from an instant on, or the one exposed nearest it, whichever side; an end before them is a failure"
    )
    func frameSelection() async throws {
        func frame(_ exposureStart: Int64) -> CapturedFrame {
            CapturedFrame(
                deviceID: "cam", sequence: UInt64(exposureStart), timestamp: exposureStart,
                timestampMarks: .startOfExposure,
                format: DeviceFormat(
                    pixelFormat: .grey, dimensions: Dimensions(width: 1, height: 1), frameRateRanges: []),
                bytes: .init(),
                metadata: CaptureMetadata(settings: CameraSettings()))
        }
        let from = FramesSink(.from(100, count: 2))
        for start in [90, 100, 133, 166] as [Int64] { from.deliver(frame(start)) }
        // Delivered before anyone waits: the frames are kept for the waiter.
        let taken = try await withCheckedThrowingContinuation { from.wait($0) }
        #expect(taken.map(\.exposureStart) == [100, 133])

        let nearest = FramesSink(.nearest(100))
        let waiting = Task { try await withCheckedThrowingContinuation { nearest.wait($0) } }
        nearest.deliver(frame(90))
        nearest.deliver(frame(120))
        #expect(
            try await waiting.value.map(\.exposureStart) == [90], "10 before the instant is nearer than 20 after it")

        let ended = FramesSink(.from(0, count: 1))
        ended.end(reason: .deviceDisconnected, message: "unplugged")
        ended.deliver(frame(5))
        await #expect(throws: WireProtocolError.self) { try await withCheckedThrowingContinuation { ended.wait($0) } }
    }

    @Test(
        "a lease's end is carried out outside the service's lock: the handler is told once and may call back into the service"
    )
    func leaseEndOutsideTheLock() throws {
        let clock = ManualClock()
        let devices = AgentDevices(
            discovery: DeviceDiscovery(providers: [SyntheticDeviceProvider(count: 1)]), agentID: "host-1",
            leaseClock: clock,
            logger: Logger(label: "test"))
        let client = ServerConnectionStateMachine.Client(role: .coordinator, name: "coordinator")
        let told = NIOLockedValueBox<[String]>([])
        devices.onLeaseEnded { deviceID, vanished in
            // Re-entering the service here would deadlock were the handler run under its lock.
            var listed = false
            if case .deviceList = devices.answer(.listDevices(WireListDevices()), client: client, connection: 9) {
                listed = true
            }
            told.withLockedValue { $0.append("\(deviceID) vanished=\(vanished) listed=\(listed)") }
        }
        var lock = WireLock()
        lock.deviceID = "synthetic:SYN0001"
        lock.durationMs = 1_000
        guard case .lease = devices.queue.sync(execute: { devices.answer(.lock(lock), client: client, connection: 1) })
        else {
            Issue.record("lock was refused")
            return
        }
        devices.expireLeases()
        devices.queue.sync {}
        #expect(told.withLockedValue { $0 }.isEmpty, "a live lease does not end")
        clock.advance(by: .seconds(1))
        devices.expireLeases()
        devices.queue.sync {}
        #expect(told.withLockedValue { $0 } == ["synthetic:SYN0001 vanished=false listed=true"])
        devices.expireLeases()
        devices.connectionClosed(1)
        devices.queue.sync {}
        #expect(told.withLockedValue { $0 }.count == 1, "an ended lease ends once")
    }

    @Test("a connection's work is done one item at a time, in the order it was enqueued")
    func connectionWorkOrder() async {
        let work = ConnectionWork()
        let done = NIOLockedValueBox<[Int]>([])
        let running = NIOLockedValueBox(0)
        await withCheckedContinuation { (finished: CheckedContinuation<Void, Never>) in
            for index in 0..<50 {
                work.enqueue {
                    let overlapping = running.withLockedValue { count -> Bool in
                        count += 1
                        return count > 1
                    }
                    #expect(!overlapping)
                    await Task.yield()
                    running.withLockedValue { $0 -= 1 }
                    done.withLockedValue { $0.append(index) }
                    if index == 49 { finished.resume() }
                }
            }
        }
        #expect(done.withLockedValue { $0 } == Array(0..<50))
    }
}

/// `AgentCapture` over a synthetic camera, without a connection: photos taken and stored, and a
/// shutdown that waits for them.
@Suite("Agent capture without a connection", .timeLimit(.minutes(1)))
struct AgentCaptureTests {
    @Test("drain waits for a photo already taken to be stored, and returns at once when none is in flight")
    func drainWaitsForStoring() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "camrig-drain-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let logger = Logger(label: "test")
        let devices = AgentDevices(
            discovery: DeviceDiscovery(providers: [SyntheticDeviceProvider(count: 1)]), agentID: "host-1",
            logger: logger)
        let streams = AgentStreams(devices: devices, logger: logger)
        let spool = try ResultSpool(directory: directory, capacityBytes: 64 << 20)
        let capture = AgentCapture(
            streams: streams, phaseLocks: AgentPhaseLocks(streams: streams, logger: logger), spool: spool,
            spoolThread: NIOThreadPool.singleton,
            agentID: "host-1", logger: logger)
        await capture.drain(timeout: .seconds(30))

        let answers = NIOLockedValueBox<[WireEnvelope.OneOf_Body]>([])
        var photo = WireCapturePhoto()
        photo.deviceID = "synthetic:SYN0001"
        photo.sessionID = "drain"
        photo.settings.qualityPrioritization = .quality
        capture.capturePhoto(photo, requestID: 1) { answer in answers.withLockedValue { $0.append(answer) } }
        await capture.drain(timeout: .seconds(30))
        let answered = answers.withLockedValue { $0 }
        guard answered.count == 1, case .triggerFired(let fired) = answered[0] else {
            Issue.record("drain returned before the photo was answered: \(answered)")
            return
        }
        #expect(fired.resultIds.count == 1)
        #expect(spool.pending(session: "drain").map(\.resultID) == fired.resultIds, "stored before it was answered")
        capture.shutdown()
    }
}
