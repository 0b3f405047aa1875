import CamRigDeviceModel
import CamRigLocalRig
import CamRigCapture
import CamRigClock
import CamRigCoordinator
import CamRigDevices
import CamRigStorage
import CamRigTestSupport
import Foundation
import Logging
import Testing

/// Faults on a multi-host network: agents in their own network namespaces, cut off, behind a lossy
/// link, or with a clock that steps. Skipped, with the reason, where namespaces cannot be made.
@Suite("Network faults on the multi-host harness", .serialized, .timeLimit(.minutes(5)))
struct NetworkFaultTests {
    /// Runs `body` on a rig of `specs`, shut down afterwards whatever happens (its agents stopped and its
    /// namespaces removed before the next test makes its own).
    static func withRig(_ specs: [NetworkedRig.AgentSpec], _ body: (NetworkedRig) async throws -> Void) async throws {
        if let reason = HostNetwork.unavailableReason { try Test.cancel("multi-host harness unavailable: \(reason)") }
        let rig = try await NetworkedRig.start(agents: specs, agentExecutable: Executables.url("camrig-agent"), seed: 7)
        do {
            try await body(rig)
        } catch {
            await rig.close()
            throw error
        }
        await rig.close()
    }

    static func readyPool(_ rig: NetworkedRig, probeInterval: Duration = .milliseconds(100)) async throws -> AgentPool {
        var timing = RemoteAgent.Timing()
        timing.probeInterval = probeInterval
        let pool = AgentPool(endpoints: rig.endpoints, security: try rig.clientSecurity(), timing: timing, logger: Logger(label: "test"))
        pool.start()
        let notReady = await pool.waitUntilReady(clockSamples: 16, timeout: .seconds(30))
        #expect(notReady.isEmpty, "not ready: \(notReady.map(\.name))\n\(rig.logs())")
        return pool
    }

    static func session(_ pool: AgentPool, fps: UInt32 = 15) async throws -> RigSession {
        let (devices, failures) = await RigDiscovery.devices(in: pool)
        #expect(failures.isEmpty)
        let session = RigSession(pool: pool, logger: Logger(label: "test"))
        for device in devices { try await session.addInput(device) }
        await session.beginConfiguration()
        await session.setFrameRate(.init(dimensions: Dimensions(width: 640, height: 480), frameDuration: FrameDuration(framesPerSecond: fps)))
        try await session.commitConfiguration()
        return session
    }

    /// Each camera's frames are delivered or reported dropped: the sequence span is covered. A camera with
    /// no frame in any set or among the unmatched fails: there is nothing to account for.
    static func expectAccounted(
        _ camera: CaptureManifest.Camera,
        in manifest: CaptureManifest,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let sequences = (manifest.sets.flatMap(\.frames) + manifest.unmatched).filter { $0.camera == camera.index }.map(\.sequence)
        guard let first = sequences.min(), let last = sequences.max() else {
            Issue.record(
                """
                camera \(camera.name) has no frame in the manifest's sets or unmatched frames \
                (delivered \(camera.framesDelivered), dropped \(camera.framesDropped))
                """,
                sourceLocation: sourceLocation
            )
            return
        }
        #expect(
            Int(last - first + 1) <= camera.framesDelivered + camera.framesDropped,
            """
            camera \(camera.name): span \(first)…\(last), \
            delivered \(camera.framesDelivered), dropped \(camera.framesDropped)
            """,
            sourceLocation: sourceLocation
        )
    }

    @Test("a host cut off mid-recording: its sets are incomplete and say so, the other hosts record every frame, and it rejoins the rig")
    func hostCutOff() async throws {
        try await Self.withRig([.init(), .init(), .init()]) { rig in
            let out = rig.work.appendingPathComponent("captures")
            let pool = try await Self.readyPool(rig)
            let session = try await Self.session(pool)
            let victim = try #require(rig.member(named: "agent-2"))

            let cutter = Task {
                // Cut once the recording is well under way: over a second of frames (3 cameras at 15 fps) spilled.
                _ = try await eventually(timeout: .seconds(10)) { fileCount(under: out, withExtension: "raw") >= 50 }
                try rig.cut(victim)
                // The outage itself lasts a second and a half.
                try await Task.sleep(for: .milliseconds(1500))
                try rig.restore(victim)
            }
            let report = try await session.record(duration: .seconds(4), into: try CaptureStore(root: out))
            try await cutter.value
            let manifest = report.manifest

            let others = manifest.cameras.filter { $0.agent != "agent-2" }
            let cut = try #require(manifest.cameras.first { $0.agent == "agent-2" })
            // 4 s at 15 fps: the hosts that stayed on the network deliver every frame, and every one is in a set.
            for camera in others {
                #expect(camera.framesDelivered >= 58, "\(camera.name) delivered \(camera.framesDelivered)")
                #expect(camera.framesDropped == 0 && camera.framesUnmatched == 0 && camera.error == nil)
            }
            // The cut host misses at least the second and a half it was away; those sets say which camera is missing.
            let incomplete = manifest.sets.filter { !$0.complete }
            #expect(incomplete.count >= 15)
            #expect(incomplete.allSatisfy { $0.missingCameras == [cut.index] }, "\(incomplete.map(\.missingCameras))")
            #expect(manifest.summary.incompleteSets == incomplete.count)
            #expect(cut.framesDelivered < others[0].framesDelivered)
            // What it did deliver is accounted for: matched, unmatched with a reason, or reported dropped; or its camera says why it stopped.
            if cut.error == nil { Self.expectAccounted(cut, in: manifest) }
            for camera in others { Self.expectAccounted(camera, in: manifest) }

            // Back on the network, the host is connected again and takes part in the next capture.
            let agent = try #require(pool.agent(named: "agent-2"))
            #expect(await agent.waitUntilConnected(timeout: .seconds(30)))
            #expect(await agent.waitForClock(samples: 8, timeout: .seconds(30)))
            let photo = try await session.capturePhoto(into: try CaptureStore(root: out))
            #expect(photo.manifest.sets.first?.complete == true, "\(photo.manifest.cameras.map { $0.error ?? "" })")
            await session.stop()
            await pool.stop()
        }
    }

    @Test("5% packet loss to and from one host: its clock is estimated as well as a clean host's, over UDP still; photos and recordings complete")
    func lossyHost() async throws {
        let lossy = PathConditions(toHost: LinkProfile(loss: 0.05), fromHost: LinkProfile(loss: 0.05))
        let clean = PathConditions()
        try await Self.withRig([
            .init(clockOffsetMicroseconds: 2_500, clockDriftPPM: 20, conditions: clean),
            .init(clockOffsetMicroseconds: -4_000, clockDriftPPM: -15, conditions: lossy),
        ]) { rig in
            let pool = try await Self.readyPool(rig, probeInterval: .milliseconds(50))
            // Four seconds of probes: a tenth of the lossy host's round trips are lost, and a busy machine
            // delays others, so both hosts get time to find their quick ones.
            // Probes until both hosts have a full window of samples: a tenth of the lossy host's round trips are
            // lost, and a busy machine delays others, so both hosts get time to find their quick ones.
            let sampled = try await eventually(timeout: .seconds(30), pollingEvery: .milliseconds(100)) {
                pool.agents.allSatisfy { ((try? $0.clockEstimate())?.sampleCount ?? 0) >= 64 }
            }
            #expect(sampled, "samples: \(pool.agents.map { (try? $0.clockEstimate())?.sampleCount ?? 0 })")
            // Loss costs samples, not accuracy: the lossy host's estimate is no worse than the clean one's,
            // within the rig's 100 µs. Each host's path carries a bias of its own from user-space transmit
            // stamps (up to ~130 µs seen in fresh-clone debug runs under load, on the clean host as well;
            // issue 14 removes it), so the lossy host is held to the clean host's error plus 100 µs, and
            // each to a loose absolute sanity limit.
            let errors = try zip(pool.agents, rig.members).map { agent, member in member.offsetError(of: try agent.clockEstimate()) }
            #expect(abs(errors[1]) < abs(errors[0]) + 100_000, "clean host off by \(errors[0] / 1000) µs, lossy host by \(errors[1] / 1000) µs")
            #expect(errors.allSatisfy { abs($0) < 500_000 }, "estimates off by \(errors.map { $0 / 1000 }) µs")
            #expect(pool.agents[1].snapshot.clockTransport != .tls, "the lossy host's clock probes fell back to TLS")
            let session = try await Self.session(pool)
            let out = rig.work.appendingPathComponent("captures")
            let photo = try await session.capturePhoto(into: try CaptureStore(root: out))
            #expect(photo.manifest.sets.first?.complete == true, "\(photo.manifest.cameras.map { $0.error ?? "" })")
            let recording = try await session.record(duration: .seconds(2), into: try CaptureStore(root: out))
            let manifest = recording.manifest
            // Lost segments are retransmitted: every frame arrives, late at worst; none is lost unreported.
            for camera in manifest.cameras {
                #expect(camera.framesDelivered >= 28, "\(camera.name) delivered \(camera.framesDelivered)")
                #expect(camera.error == nil)
                Self.expectAccounted(camera, in: manifest)
            }
            #expect(manifest.sets.filter(\.complete).count >= 25, "complete sets: \(manifest.sets.filter(\.complete).count)")
            await session.stop()
            await pool.stop()
        }
    }

    @Test("a host whose clock steps by 5 ms: the jump is detected, the estimate follows it, and photos stay synchronized")
    func clockStep() async throws {
        try await Self.withRig([
            .init(clockOffsetMicroseconds: 1_000),
            .init(clockOffsetMicroseconds: -2_000, extraArguments: ["--simulate-clock-step-us=5000", "--simulate-clock-step-after", "4"]),
        ]) { rig in
            let pool = try await Self.readyPool(rig, probeInterval: .milliseconds(50))
            let session = try await Self.session(pool)
            let out = rig.work.appendingPathComponent("captures")
            let jumper = try #require(pool.agent(named: "agent-2"))

            // Wait out the step (4 s after the agent started) and the estimator's recovery.
            let detected = try await eventually(timeout: .seconds(20), pollingEvery: .milliseconds(100)) {
                jumper.snapshot.clockJumps >= 1
            }
            #expect(detected, "the step was not detected within 20 s")
            // The truth after the step: −2 ms + 5 ms; the estimator refits on samples taken after it.
            var error = Double.infinity
            _ = try await eventually(timeout: .seconds(10), pollingEvery: .milliseconds(100)) {
                error = try jumper.clockEstimate().offset(atCoordinator: HostClock.monotonicNow()) - 3_000_000
                return abs(error) < 100_000
            }
            #expect(abs(error) < 100_000, "after the step the estimate is off by \(error / 1000) µs")

            let photo = try await session.capturePhoto(into: try CaptureStore(root: out))
            let set = try #require(photo.manifest.sets.first)
            #expect(set.complete)
            // True skew: each photo's agent timestamp mapped back through its host's actual clock.
            let clocks = rig.members.map(\.clock)
            var second = clocks[1]
            second.stepNanoseconds = 5_000_000
            second.stepAtMonotonic = .min
            let truth = [clocks[0], second]
            #expect(set.frames.count == 2)
            let span = photo.manifest.trueSpan(of: set) { truth[$0.agent == "agent-1" ? 0 : 1] }
            #expect(span < 1_000_000, "true skew \(Double(span) / 1000) µs")
            await session.stop()
            await pool.stop()
        }
    }
}
