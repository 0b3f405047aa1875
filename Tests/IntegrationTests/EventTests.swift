import CamRigClock
import CamRigCoordinator
import CamRigSecurity
import CamRigTestSupport
import CamRigWire
import Foundation
import Testing

/// Events pushed to subscribed clients by a real agent process.
@Suite("Events", .timeLimit(.minutes(3)))
struct EventTests {
    /// Collects events until `count` arrived or `seconds` passed; fewer than `count` is a failure.
    func events(_ client: AgentClient, count: Int, within seconds: Double, after action: @Sendable () async throws -> Void) async throws -> [WireEvent] {
        let stream = client.stream(.subscribe(WireSubscribe()))
        var iterator = stream.makeAsyncIterator()
        let subscribed = try await iterator.next()
        guard case .ok = subscribed?.envelope.body else {
            let got = subscribed?.envelope.messageName ?? "the end of the stream"
            Issue.record("expected ok in reply to subscribe, got \(got)")
            return []
        }
        try await action()
        let collected = EventBox()
        let reader = Task {
            while let message = try await iterator.next() {
                if case .event(let event) = message.envelope.body { collected.append(event) }
                if collected.count >= count { return }
            }
        }
        let arrived = try await eventually(timeout: .seconds(seconds), pollingEvery: .milliseconds(50)) {
            collected.count >= count
        }
        reader.cancel()
        #expect(arrived, "\(collected.count) of \(count) events arrived within \(seconds) s")
        return collected.all
    }

    @Test("a lease that is not renewed is reported lost; a late trigger is reported")
    func leaseLostAndLateTrigger() async throws {
        let (pki, agent) = try AgentProcess.secured(["--synthetic", "1"])
        defer {
            agent.stop()
            pki.remove()
        }
        let watcher = try await agent.connect(pki, as: "viewer-1")
        let coordinator = try await agent.connect(pki)
        let received = try await events(watcher, count: 2, within: 5) {
            var lock = WireLock()
            lock.deviceID = "synthetic:SYN0001"
            lock.durationMs = 1_000
            _ = try await coordinator.request(.lock(lock))
            var trigger = WireScheduleTrigger()
            trigger.triggerID = "too-late"
            trigger.action = .capturePhoto
            trigger.deviceIds = ["synthetic:SYN0001"]
            trigger.fireAtNs = HostClock.monotonicNow() - 5_000_000
            _ = try? await coordinator.request(.scheduleTrigger(trigger))
        }
        let late = received.first { $0.kind == .triggerLate }
        #expect(late?.triggerID == "too-late")
        let lost = received.first { $0.kind == .leaseLost }
        #expect(lost?.lease.holder == "coordinator")
        #expect(lost?.deviceID == "synthetic:SYN0001")
        #expect(received.allSatisfy { $0.time.clock == .agentMonotonic && $0.time.nanoseconds > 0 })
        await watcher.close()
        await coordinator.close()
    }

    @Test(
        "devices plugged and unplugged while the agent runs are announced",
        .enabled(if: FileManager.default.fileExists(atPath: "/usr/lib/x86_64-linux-gnu/libv4l/plugins/libcamrig-v4l2-emulator.so"), "the emulated V4L2 device is not installed")
    )
    func hotPlug() async throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        let directory = ProcessInfo.processInfo.environment["CAMRIG_V4L2_EMULATOR_DIR"] ?? "/dev/shm/camrig-v4l2"
        let node = directory + "/video61"
        for suffix in ["", ".state", ".lock", ".unplugged"] { try? FileManager.default.removeItem(atPath: node + suffix) }
        defer { for suffix in ["", ".state", ".lock", ".unplugged"] { try? FileManager.default.removeItem(atPath: node + suffix) } }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let agent = try AgentProcess(["--tls-dir", pki.path, "--v4l2", node])
        defer { agent.stop() }
        let client = try await agent.connect(pki, as: "viewer-1")
        let received = try await events(client, count: 2, within: 6) {
            _ = FileManager.default.createFile(atPath: node, contents: nil)
            // Unplugged once the agent lists it (it scans for new devices every second or so).
            let listed = try await eventually(timeout: .seconds(5), pollingEvery: .milliseconds(100)) {
                guard case .deviceList(let list) = try await client.request(.listDevices(WireListDevices())).frame.envelope.body else { return false }
                return list.devices.contains { $0.uniqueID == "v4l2:camrig-emu:platform:camrig-emu-61" }
            }
            #expect(listed, "the plugged device was not listed within 5 s")
            _ = FileManager.default.createFile(atPath: node + ".unplugged", contents: nil)
        }
        #expect(received.map(\.kind) == [.deviceConnected, .deviceDisconnected])
        #expect(received.first?.device.uniqueID == "v4l2:camrig-emu:platform:camrig-emu-61")
        await client.close()
    }
}

final class EventBox: @unchecked Sendable {
    private let lock = NSLock()
    private var events: [WireEvent] = []
    func append(_ event: WireEvent) { lock.lock(); events.append(event); lock.unlock() }
    var count: Int { lock.lock(); defer { lock.unlock() }; return events.count }
    var all: [WireEvent] { lock.lock(); defer { lock.unlock() }; return events }
}
