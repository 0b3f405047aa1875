import CamRigClockSocket
import CamRigCoordinator
import CamRigDeviceModel
import CamRigDevices
import CamRigSecurity
import CamRigStorage
import CamRigTestSupport
import CamRigWire
import NIOCore
import Foundation
import Logging
import Testing

/// Multi-camera sessions across real agent processes over TLS.
@Suite("Rig sessions across agents", .timeLimit(.minutes(5)))
struct SessionTests {
    /// A started pool over these agents, every one connected with a clock estimate.
    static func readyPool(_ agents: [AgentProcess], pki: TestPKI) async throws -> AgentPool {
        let pool = AgentPool(
            endpoints: agents.map { AgentEndpoint(host: $0.host, port: $0.port) },
            security: .tls(try MutualTLS.client(directory: pki.directory, identityName: "coordinator")),
            logger: Logger(label: "test")
        )
        pool.start()
        let notReady = await pool.waitUntilReady(clockSamples: 8, timeout: .seconds(20))
        #expect(notReady.isEmpty, "not ready: \(notReady.map(\.name))")
        return pool
    }

    static func object(_ json: String) throws -> [String: Any] {
        try #require(JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
    }

    @Test("camrig demo: clocks estimated against the injected truth, every frame accounted for, photo skew under 1 ms, catalog matching the report")
    func demo() async throws {
        let out = NSTemporaryDirectory() + "camrig-demo-test-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: out) }
        let result = try await Executables.run("camrig", ["demo", "--agents", "2", "--fps", "15", "--duration", "1", "--out", out, "--json"], timeout: 240)
        #expect(result.status == 0, "\(result.stderr)")
        let report = try Self.object(result.stdout)
        let agents = try #require(report["agents"] as? [[String: Any]])
        #expect(agents.count == 2)
        for agent in agents {
            let injected = try #require(agent["injected_offset_us"] as? Double)
            let estimated = try #require(agent["estimated_offset_us"] as? Double)
            let bound = try #require(agent["error_bound_us"] as? Double)
            // Injected offsets are milliseconds apart; the UDP clock channel finds each within 100 µs.
            #expect(abs(injected) > 1000)
            #expect(abs(estimated - injected) < 100, "agent \(agent["agent"] ?? "?"): injected \(injected) µs, estimated \(estimated) µs")
            #expect(bound > 0)
        }
        let captures = try #require(report["captures"] as? [[String: Any]])
        let photo = try #require(captures.first { $0["kind"] as? String == "photo" })
        let recording = try #require(captures.first { $0["kind"] as? String == "recording" })
        #expect(photo["complete_sets"] as? Int == 1)
        #expect(try #require(photo["max_skew_us"] as? Double) < 1000)
        #expect(try #require(recording["sets"] as? Int) >= 10)

        // The recording's manifest: every delivered frame is in exactly one set or listed unmatched, and
        // between a camera's first and last frame every sequence number was delivered or reported dropped.
        let directory = try #require(recording["directory"] as? String)
        let manifest = try Self.object(String(contentsOfFile: directory + "/manifest.json", encoding: .utf8))
        let cameras = try #require(manifest["cameras"] as? [[String: Any]])
        let sets = try #require(manifest["sets"] as? [[String: Any]])
        let unmatched = try #require(manifest["unmatched"] as? [[String: Any]])
        let frames = sets.flatMap { ($0["frames"] as? [[String: Any]]) ?? [] } + unmatched
        for camera in cameras {
            let index = try #require(camera["index"] as? Int)
            let own = frames.filter { $0["camera"] as? Int == index }
            let sequences = own.compactMap { $0["sequence"] as? Int }
            #expect(Set(sequences).count == sequences.count, "a frame of camera \(index) appears twice")
            #expect(own.count == camera["frames_delivered"] as? Int)
            let span = (sequences.max() ?? 0) - (sequences.min() ?? 0) + 1
            #expect(span <= own.count + (camera["frames_dropped"] as? Int ?? 0))
            for frame in own {
                // The demo records on the hosts: each frame is a place in its camera's video.
                let file = try #require(frame["file"] as? String)
                #expect(file.hasSuffix(".mkv") && frame["video_frame"] is Int, "\(frame)")
                #expect(FileManager.default.fileExists(atPath: directory + "/" + file), "\(file) missing")
            }
        }
        // Complete sets of aligned cameras are tight: far under one frame period (66 ms at 15 fps).
        for set in sets where set["complete"] as? Bool == true {
            #expect(try #require(set["skew_ns"] as? Int) < 5_000_000)
        }

        let listed = try await Executables.run("camrig", ["captures", "list", "--out", out, "--json"])
        #expect(listed.status == 0, "\(listed.stderr)")
        let entries = try #require(try Self.object(listed.stdout)["captures"] as? [[String: Any]])
        #expect(Set(entries.compactMap { $0["id"] as? String }) == Set(captures.compactMap { $0["id"] as? String }))
        let catalogRecording = try #require(entries.first { $0["kind"] as? String == "recording" })
        #expect(catalogRecording["sets"] as? Int == recording["sets"] as? Int)
        #expect(catalogRecording["dropped_frames"] as? Int == recording["dropped_frames"] as? Int)
        #expect(catalogRecording["incomplete_sets"] as? Int == recording["incomplete_sets"] as? Int)

        let shown = try await Executables.run("camrig", ["captures", "show", try #require(recording["id"] as? String), "--out", out, "--json"])
        #expect(shown.status == 0, "\(shown.stderr)")
        #expect(try Self.object(shown.stdout)["id"] as? String == recording["id"] as? String)
    }

    @Test("a commit one agent refuses leaves every other agent exactly as it was, and the error names the agent and device")
    func commitRefused() async throws {
        let pki = try TestPKI(agents: ["agent-1", "agent-2"])
        defer { pki.remove() }
        let first = try await AgentProcess.start(["--tls-dir", pki.path, "--identity", "agent-1", "--synthetic", "1"])
        defer { first.terminate() }
        let second = try await AgentProcess.start(["--tls-dir", pki.path, "--identity", "agent-2", "--synthetic", "1"])
        defer { second.terminate() }

        // Someone else holds agent-2's camera.
        let other = try await second.connect(pki)
        var lock = WireLock()
        lock.deviceID = "synthetic:SYN0001"
        lock.durationMs = 60_000
        guard case .lease(let held) = try await other.request(.lock(lock)).frame.envelope.body else {
            Issue.record("the other client got no lease")
            return
        }

        var describe = WireDescribeDevice()
        describe.deviceID = "synthetic:SYN0001"
        let observer = try await first.connect(pki)
        guard case .deviceDescription(let before) = try await observer.request(.describeDevice(describe)).frame.envelope.body else {
            Issue.record("no description")
            return
        }

        let pool = try await SessionTests.readyPool([first, second], pki: pki)
        let (devices, failures) = await RigDiscovery.devices(in: pool)
        #expect(failures.isEmpty)
        #expect(devices.count == 2)
        let session = RigSession(pool: pool, logger: Logger(label: "test"))
        for device in devices { try await session.addInput(device) }
        await session.beginConfiguration()
        // A rate and size other than the cameras' current ones, so that an applied change would show.
        await session.setFrameRate(.init(dimensions: Dimensions(width: 1280, height: 720), frameDuration: FrameDuration(framesPerSecond: 15)))
        do {
            try await session.commitConfiguration()
            Issue.record("the commit succeeded although agent-2's camera is leased by another client")
        } catch let error as RigSession.CommitError {
            #expect(error.description.contains("agent-2/synthetic:SYN0001"))
            #expect(error.description.contains("LEASE_HELD"))
            #expect(error.failures.map(\.device) == ["agent-2/synthetic:SYN0001"])
        }
        guard case .deviceDescription(let after) = try await observer.request(.describeDevice(describe)).frame.envelope.body else {
            Issue.record("no description")
            return
        }
        #expect(after.state == before.state)
        #expect(!after.hasLease, "agent-1's lease from the failed commit was not released")

        // Once the other client lets go, the same commit goes through on both.
        var unlock = WireUnlock()
        unlock.leaseID = held.lease.leaseID
        _ = try await other.request(.unlock(unlock))
        try await session.commitConfiguration()
        guard case .deviceDescription(let committed) = try await observer.request(.describeDevice(describe)).frame.envelope.body else {
            Issue.record("no description")
            return
        }
        #expect(committed.state.activeFormatID.hasSuffix("1280x720"))
        #expect(committed.state.activeMinFrameDuration.denominator == 15)
        await session.stop()
        await pool.stop()
        await other.close()
        await observer.close()
    }
}

/// The agent pool as operators see it through `camrig agents`.
@Suite("Agent pool", .timeLimit(.minutes(3)))
struct AgentPoolTests {
    @Test("one agent down: the others are reported connected with clock estimates, the down one with its reason, exit status 2")
    func oneDown() async throws {
        let pki = try TestPKI(agents: ["agent-1"])
        defer { pki.remove() }
        let agent = try await AgentProcess.start(["--tls-dir", pki.path, "--identity", "agent-1"])
        defer { agent.terminate() }
        // A port nothing listens on: the agent process just started and stopped on it.
        let gone = try await AgentProcess.start(["--tls-dir", pki.path, "--identity", "agent-1"])
        let deadPort = gone.port
        await gone.stop()
        let rig = NSTemporaryDirectory() + "camrig-rig-\(UUID().uuidString).yaml"
        defer { try? FileManager.default.removeItem(atPath: rig) }
        try "tls_dir: \(pki.path)\nagents:\n  - 127.0.0.1:\(agent.port)\n  - 127.0.0.1:\(deadPort)\n".write(toFile: rig, atomically: true, encoding: .utf8)

        let result = try await Executables.run("camrig", ["agents", "--rig", rig, "--connect-timeout", "3", "--json"], timeout: 60)
        #expect(result.status == 2, "\(result.stderr)")
        let agents = try #require(try SessionTests.object(result.stdout)["agents"] as? [[String: Any]])
        #expect(agents.count == 2)
        let up = try #require(agents.first { $0["address"] as? String == "127.0.0.1:\(agent.port)" })
        #expect(up["status"] as? String == "connected")
        #expect(up["agent"] as? String == "agent-1")
        #expect(try #require(up["samples"] as? Int) >= 8)
        #expect(up["offset_us"] is Double)
        let down = try #require(agents.first { $0["address"] as? String == "127.0.0.1:\(deadPort)" })
        #expect(down["status"] as? String == "down")
        #expect((down["reason"] as? String ?? "").contains("cannot connect"))
        #expect(down["last_seen"] == nil)

        let text = try await Executables.run("camrig", ["agents", "--rig", rig, "--connect-timeout", "3"], timeout: 60)
        #expect(text.stdout.contains("127.0.0.1:\(deadPort): cannot connect"))
    }
}

extension AgentPoolTests {
    @Test("an agent that crashes is reported down, and the pool reconnects by itself when it comes back on the same address")
    func reconnects() async throws {
        let pki = try TestPKI(agents: ["agent-1"])
        defer { pki.remove() }
        let agent = try await AgentProcess.start(["--tls-dir", pki.path, "--identity", "agent-1"])
        let port = agent.port
        var timing = RemoteAgent.Timing()
        timing.maximumBackoff = .milliseconds(500)
        let pool = AgentPool(
            endpoints: [AgentEndpoint(host: "127.0.0.1", port: port)],
            security: .tls(try MutualTLS.client(directory: pki.directory, identityName: "coordinator")),
            timing: timing,
            logger: Logger(label: "test")
        )
        pool.start()
        let remote = pool.agents[0]
        #expect(await remote.waitUntilConnected(timeout: .seconds(10)))
        await agent.crash()
        let sawDown = try await eventually(timeout: .seconds(5), pollingEvery: .milliseconds(25)) {
            if case .down = remote.snapshot.status { true } else { false }
        }
        #expect(sawDown, "the crashed agent was not reported down within 5 s")
        #expect(throws: AgentClientError.self) { try remote.client() }

        let restarted = try await AgentProcess.start(["--tls-dir", pki.path, "--identity", "agent-1", "--listen", "127.0.0.1:\(port)"])
        defer { restarted.terminate() }
        #expect(await remote.waitUntilConnected(timeout: .seconds(15)))
        #expect(remote.snapshot.connectAttempts >= 2)
        #expect(try await remote.client().ping() > .zero)
        await pool.stop()
        #expect(remote.snapshot.status == .stopped)
    }
}

/// Recordings when part of the rig fails.
@Suite("Recording with failures", .timeLimit(.minutes(3)))
struct RecordingFailureTests {
    @Test("an agent killed mid-recording: its camera's later sets are incomplete and say so, the other camera records on, nothing hangs")
    func agentKilled() async throws {
        let pki = try TestPKI(agents: ["agent-1", "agent-2"])
        defer { pki.remove() }
        let first = try await AgentProcess.start(["--tls-dir", pki.path, "--identity", "agent-1", "--synthetic", "1"])
        defer { first.terminate() }
        let second = try await AgentProcess.start(["--tls-dir", pki.path, "--identity", "agent-2", "--synthetic", "1"])
        defer { second.terminate() }
        let out = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("camrig-rec-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: out) }

        let logger = Logger(label: "test")
        let pool = try await SessionTests.readyPool([first, second], pki: pki)
        let (devices, _) = await RigDiscovery.devices(in: pool)
        let session = RigSession(pool: pool, logger: logger)
        for device in devices { try await session.addInput(device) }
        await session.beginConfiguration()
        await session.setFrameRate(.init(dimensions: Dimensions(width: 640, height: 480), frameDuration: FrameDuration(framesPerSecond: 15)))
        try await session.commitConfiguration()

        let killer = Task {
            // Killed once the recording is under way: about a second of frames (2 cameras at 15 fps) spilled.
            _ = try await eventually(timeout: .seconds(10)) { fileCount(under: out, withExtension: "raw") >= 25 }
            await second.crash()
        }
        let report = try await session.record(duration: .seconds(3), into: try CamRigStorage.CaptureStore(root: out))
        try await killer.value
        await session.stop()
        await pool.stop()

        let manifest = report.manifest
        let survivor = try #require(manifest.cameras.first { $0.agent == "agent-1" })
        let victim = try #require(manifest.cameras.first { $0.agent == "agent-2" })
        // 3 s at 15 fps: the surviving camera delivers (nearly) all its frames, the killed one about a second's worth.
        #expect(survivor.framesDelivered >= 40)
        #expect(victim.framesDelivered > 0 && victim.framesDelivered < survivor.framesDelivered)
        #expect(survivor.error == nil)
        #expect(victim.error != nil)
        let incomplete = manifest.sets.filter { !$0.complete }
        #expect(incomplete.count >= survivor.framesDelivered - victim.framesDelivered - 1)
        #expect(incomplete.allSatisfy { $0.missingCameras == [victim.index] || $0.missingCameras == [survivor.index] })
        #expect(manifest.summary.incompleteSets == incomplete.count)
        // Every delivered frame is in exactly one set.
        let inSets = manifest.sets.flatMap(\.frames).count + manifest.unmatched.count
        #expect(inSets == survivor.framesDelivered + victim.framesDelivered)
    }
}

/// Clock probes over the authenticated UDP channel.
@Suite("UDP clock channel", .timeLimit(.minutes(3)))
struct ClockChannelTests {
    static func pool(_ agent: AgentProcess, pki: TestPKI, udp: Bool = true) -> AgentPool {
        var timing = RemoteAgent.Timing()
        timing.probeInterval = .milliseconds(20)
        timing.preferUDPClockChannel = udp
        return AgentPool(
            endpoints: [AgentEndpoint(host: agent.host, port: agent.port)],
            security: .tls(try! MutualTLS.client(directory: pki.directory, identityName: "coordinator")),
            timing: timing,
            logger: Logger(label: "test")
        )
    }

    @Test("probes use the UDP channel with the kernel's stamps on both ends, find a simulated 2.5 ms offset within 100 µs, and the bound covers the error")
    func udpEstimate() async throws {
        let pki = try TestPKI(agents: ["agent-1"])
        defer { pki.remove() }
        let agent = try await AgentProcess.start(["--tls-dir", pki.path, "--identity", "agent-1", "--synthetic", "1", "--simulate-clock-offset-us=2500"])
        defer { agent.terminate() }
        let pool = Self.pool(agent, pki: pki)
        pool.start()
        // Two seconds of probes: enough for the lowest-round-trip filter to set aside probes delayed by a
        // busy machine.
        #expect(await pool.waitUntilReady(clockSamples: 100, timeout: .seconds(20)).isEmpty)
        let snapshot = pool.agents[0].snapshot
        await pool.stop()
        #expect(snapshot.clockTransport == .udpKernelAll)
        let estimate = try #require(snapshot.clock)
        // The limit is the rig's requirement. With user-space transmit stamps (t1 and t3 read before the
        // probe was authenticated and sent) loopback estimates leaned +50…130 µs in debug builds.
        #expect(abs(estimate.offsetNanoseconds - 2_500_000) < 100_000, "estimated \(estimate.offsetNanoseconds) ns")
        #expect(estimate.errorBoundNanoseconds >= abs(estimate.offsetNanoseconds - 2_500_000), "error \(estimate.offsetNanoseconds - 2_500_000) ns, bound \(estimate.errorBoundNanoseconds) ns")
    }

    @Test(
        "camrig sync status right after an agent starts waits until its estimate is settled: past the first burst of probes, drift known, a simulated 2.5 ms offset within the reported bound; without the wait it says the estimate is still settling"
    )
    func settledFromTheFirstSecond() async throws {
        let pki = try TestPKI(agents: ["agent-1"])
        defer { pki.remove() }
        let agent = try await AgentProcess.start(["--tls-dir", pki.path, "--identity", "agent-1", "--simulate-clock-offset-us=2500"])
        defer { agent.terminate() }
        func status(_ extra: [String]) async throws -> [String: Any] {
            let result = try await Executables.run(
                "camrig", ["sync", "status", "--agent", agent.address, "--tls-dir", pki.path, "--seconds", "0", "--json"] + extra, timeout: 60)
            #expect(result.status == 0, "\(result.stderr)")
            let agents = try #require(try SessionTests.object(result.stdout)["agents"] as? [[String: Any]])
            return try #require(agents.first)
        }

        let settled = try await status([])
        #expect(settled["clock_settled"] as? Bool == true)
        // The first estimate rests on a burst of 16 probes 10 ms apart; settling took more.
        #expect(try #require(settled["samples"] as? Int) > 16)
        let offset = try #require(settled["offset_us"] as? Double)
        let bound = try #require(settled["error_bound_us"] as? Double)
        #expect(abs(offset - 2500) <= bound, "offset \(offset) µs, bound \(bound) µs")
        let drift = try #require(settled["drift_ppm"] as? Double)
        let driftUncertainty = try #require(settled["drift_uncertainty_ppm"] as? Double)
        #expect(abs(drift) <= driftUncertainty, "drift \(drift) ± \(driftUncertainty) ppm, truly 0")
        #expect(driftUncertainty < 20)

        let hasty = try await status(["--settle-timeout", "0"])
        #expect(hasty["clock_settled"] as? Bool == false)
        #expect(try #require(hasty["samples"] as? Int) <= 16)
    }

    @Test("garbage and forged datagrams get no answer and do not disturb the channel or the agent")
    func garbage() async throws {
        let pki = try TestPKI(agents: ["agent-1"])
        defer { pki.remove() }
        let agent = try await AgentProcess.start(["--tls-dir", pki.path, "--identity", "agent-1"])
        defer { agent.terminate() }
        let attacker = try TimestampingUDPSocket(host: "127.0.0.1", port: 0, receiveTimeout: .milliseconds(200))
        var target = sockaddr_storage()
        let length = try SocketAddress(ipAddress: "127.0.0.1", port: agent.port).withSockAddr { pointer, size in
            withUnsafeMutableBytes(of: &target) { $0.copyMemory(from: UnsafeRawBufferPointer(start: pointer, count: size)) }
            return socklen_t(size)
        }
        var random = SeededRandom(seed: 7)
        for round in 0..<600 {
            let size = Int(random.next() % 100)
            var bytes = (0..<size).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            if round % 2 == 0 && size >= 48 {
                // Well-formed headers with made-up keys and MACs.
                bytes.replaceSubrange(0..<6, with: Array("CRCK".utf8) + [1, 1])
            }
            attacker.send(bytes, to: target, length: length)
        }
        #expect(attacker.receive() == nil, "the agent answered a forged probe")

        let pool = Self.pool(agent, pki: pki)
        pool.start()
        #expect(await pool.waitUntilReady(clockSamples: 16, timeout: .seconds(20)).isEmpty)
        #expect(pool.agents[0].snapshot.clockTransport == .udpKernelAll)
        #expect(try await pool.agents[0].client().ping() > .zero)
        await pool.stop()
        #expect(agent.log().contains("dropped clock datagrams"))
    }

    @Test("a coordinator that declines UDP probes over the TLS connection")
    func tlsFallback() async throws {
        let pki = try TestPKI(agents: ["agent-1"])
        defer { pki.remove() }
        let agent = try await AgentProcess.start(["--tls-dir", pki.path, "--identity", "agent-1"])
        defer { agent.terminate() }
        let pool = Self.pool(agent, pki: pki, udp: false)
        pool.start()
        #expect(await pool.waitUntilReady(clockSamples: 8, timeout: .seconds(20)).isEmpty)
        #expect(pool.agents[0].snapshot.clockTransport == .tls)
        await pool.stop()
    }
}
