import CamRigClock
import CamRigCoordinator
import CamRigSecurity
import CamRigTestSupport
import CamRigWire
import Foundation
import NIOConcurrencyHelpers
import Testing

/// Events pushed to subscribed clients by a real agent process.
@Suite("Events", .timeLimit(.minutes(3)))
struct EventTests {
    /// Collects events until `count` arrived or `seconds` passed; fewer than `count` is a failure.
    func events(
        _ client: AgentClient, kinds: [WireEventKind], count: Int, within seconds: Double, after action: @Sendable () async throws -> Void
    ) async throws -> [WireEvent] {
        var subscribe = WireSubscribe()
        subscribe.kinds = kinds
        let stream = client.stream(.subscribe(subscribe))
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
        let (pki, agent) = try await AgentProcess.secured(["--synthetic", "1"])
        defer {
            agent.terminate()
            pki.remove()
        }
        let watcher = try await agent.connect(pki, as: "viewer-1")
        let coordinator = try await agent.connect(pki)
        let received = try await events(watcher, kinds: [.leaseLost, .triggerLate], count: 2, within: 5) {
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
        let agent = try await AgentProcess.start(["--tls-dir", pki.path, "--v4l2", node])
        defer { agent.terminate() }
        let client = try await agent.connect(pki, as: "viewer-1")
        let received = try await events(client, kinds: [.deviceConnected, .deviceDisconnected], count: 2, within: 6) {
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

    @Test("a watched pool hears what it would otherwise poll for: leases and configuration, phase locks every second and their end, the spool as it fills and empties")
    func stateEvents() async throws {
        let pki = try TestPKI(agents: ["agent-1"])
        defer { pki.remove() }
        let agent = try await AgentProcess.start(["--tls-dir", pki.path, "--identity", "agent-1", "--synthetic", "1"])
        defer { agent.terminate() }
        let pool = try LibcameraTests.pool([agent], pki: pki)
        let heard = PoolEventBox()
        // Watched before the pool starts (LibcameraTests.session starts it), so the first connection is heard.
        let watched = pool.watch()
        let listener = Task { for await event in watched { heard.append(event) } }
        defer { listener.cancel() }
        let session = try await LibcameraTests.session(pool, fps: 15)
        let camera = "synthetic:SYN0001"

        // The session's lease and configuration, each pushed with the description as it is now.
        #expect(try await eventually(timeout: .seconds(5), pollingEvery: .milliseconds(50)) {
            heard.events(.deviceChanged).contains { $0.device.uniqueID == camera && $0.device.hasLease && $0.device.lease.holder == "coordinator" }
        }, "no DEVICE_CHANGED with the session's lease: \(heard.kinds)")
        guard case .connected(let name, let capabilities)? = heard.all.first else {
            Issue.record("the first thing heard is not the connection: \(heard.kinds)")
            return
        }
        #expect(name == "agent-1" && capabilities.contains(WireProtocol.Capability.stateEvents))

        // A phase lock's status every second while held.
        _ = try await session.lockPhase()
        let settled = await session.waitForPhaseLock(timeout: .seconds(20))
        try #require(settled.allSatisfy { $0.status.state == .locked }, "the camera did not lock: \(settled.map(\.status))")
        let before = heard.events(.phaseStatus).count
        try await Task.sleep(for: .seconds(3))
        let statuses = heard.events(.phaseStatus).dropFirst(before)
        #expect((2...5).contains(statuses.count), "\(statuses.count) PHASE_STATUS events in 3 s")
        #expect(statuses.allSatisfy { $0.phase.deviceID == camera && $0.phase.state == .locked })
        // Sent a second apart, each stamped when it was sent (agent clock).
        let times = statuses.map(\.time.nanoseconds)
        let gaps = zip(times.dropFirst(), times).map { Double($0 - $1) / 1e9 }
        #expect(gaps.allSatisfy { (0.5...2.5).contains($0) }, "seconds between PHASE_STATUS events: \(gaps)")

        // The session ends: its phase lock is reported ended once, its lease gone from the description.
        await session.stop()
        #expect(try await eventually(timeout: .seconds(5), pollingEvery: .milliseconds(50)) {
            heard.events(.phaseStatus).last?.phase.state == .unlocked
                && heard.events(.deviceChanged).last.map { !$0.device.hasLease } == true
        }, "\(heard.events(.phaseStatus).last?.phase.state as Any), \(heard.events(.deviceChanged).last?.device.lease.holder as Any)")

        // A photo left in the spool fills it; fetched and acknowledged, it empties it again.
        let client = try await agent.connect(pki)
        var photo = WireCapturePhoto()
        photo.deviceID = camera
        photo.sessionID = "events"
        _ = try await client.request(.capturePhoto(photo))
        #expect(try await eventually(timeout: .seconds(5), pollingEvery: .milliseconds(50)) {
            heard.events(.spoolStatus).last.map { $0.spool.results == 1 && $0.spool.usedBytes > 0 && $0.spool.capacityBytes > 0 } == true
        }, "spool figures heard: \(heard.events(.spoolStatus).map(\.spool.results))")
        let results = try await client.spooledResults(session: "events")
        try await client.acknowledge(results.map(\.0.resultID))
        #expect(try await eventually(timeout: .seconds(5), pollingEvery: .milliseconds(50)) {
            heard.events(.spoolStatus).last.map { $0.spool.results == 0 && $0.spool.usedBytes == 0 } == true
        }, "spool figures heard: \(heard.events(.spoolStatus).map(\.spool.results))")
        await client.close()

        await pool.stop()
        #expect(try await eventually(timeout: .seconds(5), pollingEvery: .milliseconds(50)) {
            heard.all.contains { if case .disconnected(agent: "agent-1") = $0 { true } else { false } }
        }, "the disconnection was not heard: \(heard.kinds)")
    }
}

/// What a watched pool heard, in order.
final class PoolEventBox: Sendable {
    private let box = NIOLockedValueBox<[AgentPool.Event]>([])
    func append(_ event: AgentPool.Event) { box.withLockedValue { $0.append(event) } }
    var all: [AgentPool.Event] { box.withLockedValue { $0 } }
    /// The agents' events of `kind`.
    func events(_ kind: WireEventKind) -> [WireEvent] {
        all.compactMap { if case .event(_, let event) = $0, event.kind == kind { event } else { nil } }
    }
    var kinds: [String] {
        all.map {
            switch $0 {
            case .connected: "connected"
            case .disconnected: "disconnected"
            case .unheard: "unheard"
            case .event(_, let event): "\(event.kind)"
            }
        }
    }
}

final class EventBox: @unchecked Sendable {
    private let lock = NSLock()
    private var events: [WireEvent] = []
    func append(_ event: WireEvent) { lock.lock(); events.append(event); lock.unlock() }
    var count: Int { lock.lock(); defer { lock.unlock() }; return events.count }
    var all: [WireEvent] { lock.lock(); defer { lock.unlock() }; return events }
}
