import CamRigCapture
import CamRigClock
import CamRigCoordinator
import CamRigDevices
import CamRigLocalRig
import CamRigSecurity
import CamRigStorage
import CamRigTestSupport
import CamRigWire
import Foundation
import Logging
import NIOConcurrencyHelpers
import Testing

/// Nothing lost across a rejoin: results an agent still holds are collected into their capture, and a
/// coordinator killed mid-capture leaves a capture that `camrig captures recover` completes.
@Suite("Results collected after a rejoin or a coordinator crash", .serialized, .timeLimit(.minutes(4)))
struct RecoveryTests {
    /// A captures directory that fails to store the photos of cameras whose file name contains
    /// `failing` (as a full disk would), and is otherwise a `CaptureStore`.
    struct FlakyStore: CaptureSink {
        let store: CaptureStore
        let failing: NIOLockedValueBox<String?>

        func begin(_ kind: CaptureKind) async throws -> CaptureHandle { try await store.begin(kind) }
        func write(_ bytes: some FrameBytes, layout: FrameLayout, named stem: String, in capture: CaptureHandle) async throws -> String {
            if let failing = failing.withLockedValue({ $0 }), stem.contains(failing) {
                throw StorageError("no space left on device (simulated) for \(stem)")
            }
            return try await store.write(bytes, layout: layout, named: stem, in: capture)
        }
        func spill(_ bytes: some FrameBytes, layout: FrameLayout, named stem: String, in capture: CaptureHandle) async throws -> SpilledFrame {
            try await store.spill(bytes, layout: layout, named: stem, in: capture)
        }
        func convert(_ frame: SpilledFrame, in capture: CaptureHandle) async throws -> String { try await store.convert(frame, in: capture) }
        func finish(_ manifest: CaptureManifest, in capture: CaptureHandle) async throws { try await store.finish(manifest, in: capture) }
        func started(_ manifest: CaptureManifest, in capture: CaptureHandle) async throws { try await store.started(manifest, in: capture) }
        func journal(_ entry: JournalEntry, in capture: CaptureHandle) async throws { try await store.journal(entry, in: capture) }
        func unfinished() async throws -> [UnfinishedCapture] { try await store.unfinished() }
        func reread(_ capture: CaptureHandle) async throws -> UnfinishedCapture? { try await store.reread(capture) }
        func thumbnail(of bytes: UnsafeRawBufferPointer, layout: FrameLayout, width: Int) -> Result<ContactSheet.Thumbnail, ContactSheet.ThumbnailRefusal> {
            store.thumbnail(of: bytes, layout: layout, width: width)
        }
        func claim(_ capture: CaptureHandle) async -> CaptureClaim? { await store.claim(capture) }
        func abandon(_ capture: CaptureHandle) async { await store.abandon(capture) }
    }

    /// How many results the agent holds in its spool, of every session.
    static func spooled(_ agent: AgentProcess, pki: TestPKI) async throws -> Int {
        let client = try await AgentClient.connect(
            to: AgentEndpoint(host: agent.host, port: agent.port),
            security: .tls(try MutualTLS.client(directory: pki.directory, identityName: "coordinator")))
        defer { Task { await client.close() } }
        var count = 0
        for try await frame in client.stream(.fetchResults(WireFetchResults())) {
            if case .photoResult = frame.envelope.body { count += 1 }
        }
        return count
    }

    /// `collected` of `camrig captures recover --json`.
    static func collectedCount(_ json: String) -> Int {
        ((try? JSONSerialization.jsonObject(with: Data(json.utf8))) as? [String: Any])?["collected"] as? Int ?? 0
    }

    /// `camrig-agent` arguments for `name` with one synthetic camera, and its spool in `spool` when given
    /// (so that a restarted agent finds what it held).
    static func agent(_ name: String, _ pki: TestPKI, spool: String? = nil) -> [String] {
        ["--tls-dir", pki.path, "--identity", name, "--synthetic", "1"] + (spool.map { ["--spool-dir", $0] } ?? [])
    }

    static func session(_ pool: AgentPool) async throws -> RigSession {
        let (devices, _) = await RigDiscovery.devices(in: pool)
        let session = RigSession(pool: pool, logger: Logger(label: "test"))
        for device in devices { try await session.addInput(device) }
        await session.beginConfiguration()
        await session.setPreset(.inputPriority)
        try await session.commitConfiguration()
        return session
    }

    @Test("a photo its coordinator could not store stays with the agent, through kill -9, and is collected into its capture when the agent is back")
    func collectedAfterRestart() async throws {
        let pki = try TestPKI(agents: ["agent-1", "agent-2"])
        defer { pki.remove() }
        let spool = NSTemporaryDirectory() + "camrig-spool-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: spool) }
        let first = try await AgentProcess.start(Self.agent("agent-1", pki))
        defer { first.terminate() }
        var second = try await AgentProcess.start(Self.agent("agent-2", pki, spool: spool))
        let out = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("camrig-recover-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: out) }
        let store = try CaptureStore(root: out)
        let sink = FlakyStore(store: store, failing: NIOLockedValueBox("agent-2"))

        let pool = try await SessionTests.readyPool([first, second], pki: pki)
        let session = try await Self.session(pool)
        let report = try await session.capturePhoto(into: sink)
        await session.stop()
        await pool.stop()

        let manifest = report.manifest
        #expect(manifest.state == .incomplete)
        let missing = try #require(manifest.missing)
        #expect(missing.count == 1)
        #expect(missing.first?.agent == "agent-2" && missing.first?.collectable == true)
        #expect(missing.first?.reason.contains("no space left") == true)
        #expect(manifest.sets.first?.frames.count == 1)
        #expect(try await store.catalog.list().first?.state == "incomplete")
        #expect(try await store.catalog.list().first?.missing == 1)

        // The agent is killed and comes back with its spool; a new coordinator connects to both.
        await second.crash()
        second = try await AgentProcess.start(Self.agent("agent-2", pki, spool: spool))
        defer { second.terminate(removing: [URL(fileURLWithPath: spool)]) }
        sink.failing.withLockedValue { $0 = nil }
        let again = try await SessionTests.readyPool([first, second], pki: pki)
        let collected = try await MissingResultCollector(pool: again, sink: sink, logger: Logger(label: "test")).collect()
        #expect(collected.collected == 1 && collected.waiting == 0 && collected.lost == 0)
        #expect(collected.captures.first?.collected.first?.hasPrefix("agent-2/") == true)

        let entry = try #require(try await store.catalog.entry(manifest.id))
        #expect(entry.state == "complete" && entry.missing == 0)
        let finished = try store.manifest(of: entry)
        let set = try #require(finished.sets.first)
        #expect(set.complete && set.frames.count == 2 && set.missingCameras.isEmpty)
        #expect(finished.cameras.allSatisfy { $0.error == nil && $0.framesDelivered == 1 })
        for frame in set.frames {
            #expect(FileManager.default.fileExists(atPath: out.appendingPathComponent(manifest.id).appendingPathComponent(frame.file).path))
        }
        // Both photos were exposed at the one trigger instant, the late-collected one included.
        #expect(set.skewNs < 5_000_000, "skew \(set.skewNs) ns")
        #expect(try await Self.spooled(second, pki: pki) == 0, "the collected photo was deleted from the agent's spool")
        let nothingMore = try await MissingResultCollector(pool: again, sink: sink, logger: Logger(label: "test")).collect()
        #expect(nothingMore.captures.isEmpty)
        await again.stop()
    }

    @Test("an agent down when the trigger went out: its photo is listed missing, and once it is back and holds nothing, lost with the reason")
    func agentDownIsAccountedLost() async throws {
        let pki = try TestPKI(agents: ["agent-1", "agent-2"])
        defer { pki.remove() }
        let spool = NSTemporaryDirectory() + "camrig-spool-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: spool) }
        let first = try await AgentProcess.start(Self.agent("agent-1", pki))
        defer { first.terminate() }
        var second = try await AgentProcess.start(Self.agent("agent-2", pki, spool: spool))
        let out = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("camrig-recover-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: out) }
        let store = try CaptureStore(root: out)

        let pool = try await SessionTests.readyPool([first, second], pki: pki)
        let session = try await Self.session(pool)
        await second.crash()
        let report = try await session.capturePhoto(into: store)
        await session.stop()
        await pool.stop()
        let missing = try #require(report.manifest.missing?.first)
        #expect(report.manifest.state == .incomplete && missing.agent == "agent-2" && missing.collectable)

        second = try await AgentProcess.start(Self.agent("agent-2", pki, spool: spool))
        defer { second.terminate(removing: [URL(fileURLWithPath: spool)]) }
        let again = try await SessionTests.readyPool([first, second], pki: pki)
        let collector = MissingResultCollector(pool: again, sink: store, logger: Logger(label: "test"))
        // Until 3 s after the trigger instant an agent may still be about to store its photo: not lost yet.
        let early = try await collector.collect()
        if let fireAt = report.manifest.fireAtNs, HostClock.monotonicNow() - fireAt < 2_500_000_000 {
            #expect(early.lost == 0 && early.waiting == 1)
        }
        // Once that window has passed, the photo is counted lost.
        var collected = try await collector.collect()
        _ = try await eventually(timeout: .seconds(10), pollingEvery: .milliseconds(250)) {
            collected = try await collector.collect()
            return collected.waiting == 0
        }
        await again.stop()
        #expect(collected.collected == 0 && collected.waiting == 0 && collected.lost == 1)
        let manifest = try store.manifest(of: try #require(try await store.catalog.entry(report.manifest.id)))
        let lost = try #require(manifest.missing?.first)
        #expect(!lost.collectable)
        #expect(lost.reason.contains("agent-2 holds no result of trigger"), "\(lost.reason)")
        #expect(lost.reason.contains("at the capture: trigger failed"), "the reason keeps what happened at the capture: \(lost.reason)")
        #expect(manifest.state == .incomplete)
        #expect(manifest.cameras.first { $0.agent == "agent-2" }?.error?.contains("holds no result") == true)
    }

    @Test("camrig capture killed with -9 at points through a capture: the catalog opens, and captures recover accounts for every camera, collecting what the agents hold")
    func coordinatorKilled() async throws {
        let pki = try TestPKI(agents: ["agent-1", "agent-2"])
        defer { pki.remove() }
        let first = try await AgentProcess.start(Self.agent("agent-1", pki))
        defer { first.terminate() }
        let second = try await AgentProcess.start(Self.agent("agent-2", pki))
        defer { second.terminate() }
        var collectedAny = false
        // The manifest is on disk before the triggers go out: killed at once, the agents may never fire;
        // killed later, they have fired and hold photos the coordinator had not gathered.
        for delay in [0, 10, 25, 40, 60, 80] {
            let out = NSTemporaryDirectory() + "camrig-killed-\(UUID().uuidString)"
            defer { try? FileManager.default.removeItem(atPath: out) }
            let rig = ["--agent", first.address, "--agent", second.address, "--tls-dir", pki.path, "--out", out]
            // Kept for the message should the capture never get as far as its manifest.
            let errors = out + ".stderr"
            _ = FileManager.default.createFile(atPath: errors, contents: nil)
            defer { try? FileManager.default.removeItem(atPath: errors) }
            let errorLog = try #require(FileHandle(forWritingAtPath: errors))
            let capture = try ChildProcess.spawn(
                Executables.url("camrig").path, ["capture", "--photo"] + rig, stdout: .null, stderr: .descriptor(errorLog.fileDescriptor))
            try errorLog.close()
            let started = try await eventually(timeout: .seconds(30), pollingEvery: .milliseconds(1)) {
                let folders = (try? FileManager.default.contentsOfDirectory(atPath: out))?.filter { $0.hasSuffix("-photo") } ?? []
                return folders.contains { FileManager.default.fileExists(atPath: "\(out)/\($0)/manifest.json") }
            }
            try await Task.sleep(for: .milliseconds(delay))
            capture.send(SIGKILL)
            await capture.exit()
            #expect(started, "no manifest within 30 s; camrig capture said: \((try? String(contentsOfFile: errors, encoding: .utf8)) ?? "")")

            let listed = try await Executables.run("camrig", ["captures", "list", "--out", out, "--json"])
            #expect(listed.status == 0, "the catalog opens after the kill: \(listed.stderr)")
            var recovered = try await Executables.run("camrig", ["captures", "recover", "--json"] + rig, timeout: 120)
            if recovered.status == 2 {
                // Killed before its triggers went out: nothing is lost until the agents could no longer
                // be about to fire (10 s after the capture began); then recover says so.
                let waiting = try JSONSerialization.jsonObject(with: Data(recovered.stdout.utf8)) as? [String: Any]
                #expect((waiting?["waiting"] as? Int ?? 0) > 0)
                collectedAny = collectedAny || Self.collectedCount(recovered.stdout) > 0
                _ = try await eventually(timeout: .seconds(30), pollingEvery: .seconds(1)) {
                    recovered = try await ToolRunner.run(Executables.url("camrig").path, ["captures", "recover", "--json"] + rig, timeout: 120)
                    return recovered.status != 2
                }
            }
            #expect(recovered.status == 0, "\(recovered.stdout)\n\(recovered.stderr)")
            collectedAny = collectedAny || Self.collectedCount(recovered.stdout) > 0

            // Every camera is accounted for: its photo in the set with its file, or lost with a reason.
            let store = try CaptureStore(root: URL(fileURLWithPath: out))
            let entry = try #require(try await store.catalog.list().first)
            let manifest = try store.manifest(of: entry)
            #expect(manifest.state != .inProgress)
            let set = try #require(manifest.sets.first)
            let lost = manifest.missing ?? []
            #expect(set.frames.count + lost.count == 2, "delay \(delay) ms: \(recovered.stdout)")
            #expect(lost.allSatisfy { !$0.collectable && $0.reason.contains("holds no result") }, "delay \(delay) ms: \(lost)\n\(recovered.stdout)")
            // The capture was under way when its coordinator died: recovery says so, by cause and in words.
            #expect(
                lost.allSatisfy { $0.cause == .notHeld && $0.reason.hasSuffix("at the capture: the coordinator stopped before gathering it") },
                "delay \(delay) ms: \(lost)")
            #expect(entry.state == (lost.isEmpty ? "complete" : "incomplete"))
            for frame in set.frames {
                #expect(FileManager.default.fileExists(atPath: "\(out)/\(entry.directory)/\(frame.file)"))
            }
            #expect(try await Self.spooled(first, pki: pki) == 0, "delay \(delay) ms: nothing left behind in agent-1's spool")
            #expect(try await Self.spooled(second, pki: pki) == 0, "delay \(delay) ms: nothing left behind in agent-2's spool")
            if collectedAny && delay >= 20 { break }
        }
        #expect(collectedAny, "at least one kill landed after the agents fired, and their photos were collected")
    }
}
