import CamRigCapture
import CamRigLocalRig
import CamRigObjectStore
import CamRigStorage
import CamRigTestSupport
import CamRigWire
import Crypto
import Foundation
import Testing

/// Captures into an S3-compatible store as an operator makes them: real agents put their photos and
/// recorded files in a real store (OpenStack Swift's s3api, started by scripts/object-store), `camrig`
/// writes the manifests, and an independent client (boto3) reads every object back.
@Suite("Captures in an object store", .serialized, .timeLimit(.minutes(6)))
struct ObjectStoreCaptureTests {
    /// Two agents of their own, a store, and a work folder; `camrig` reaches them all. (Set up once, then
    /// only read: shared with the task that runs an offload.)
    final class Rig: @unchecked Sendable {
        let pki: TestPKI
        var agents: [AgentProcess] = []
        let spools: [String]
        let work: String
        let server: ObjectStoreServer
        let out = "s3://rig-a/studio"

        init(cameras: Int = 2) async throws {
            let names = (1...cameras).map { "agent-\($0)" }
            pki = try TestPKI(agents: names)
            work = NSTemporaryDirectory() + "camrig-s3-\(UUID().uuidString)"
            spools = names.map { "\(NSTemporaryDirectory())camrig-s3-spool-\($0)-\(UUID().uuidString)" }
            server = try await ObjectStoreServer.start()
            for (index, name) in names.enumerated() {
                agents.append(
                    try await AgentProcess.start([
                        "--tls-dir", pki.path, "--identity", name, "--spool-dir", spools[index], "--synthetic", "1", "--synthetic-seed", "\(index + 1)",
                    ]))
            }
        }

        func environment(_ extra: [String: String] = [:]) -> [String: String] {
            ProcessInfo.processInfo.environment.merging(server.environment) { $1 }.merging(extra) { $1 }
        }

        var arguments: [String] {
            agents.flatMap { ["--agent", $0.address] } + ["--tls-dir", pki.path, "--out", out, "--state", work + "/state"]
        }

        func camrig(_ arguments: [String], environment extra: [String: String] = [:], timeout: Double = 120) async throws -> ToolRunner.Result {
            try await ToolRunner.run(Executables.url("camrig").path, arguments + self.arguments, environment: environment(extra), timeout: timeout)
        }

        /// Results agent `index` still holds in its spool.
        func spooled(_ index: Int) -> [String] {
            ((try? FileManager.default.contentsOfDirectory(atPath: spools[index] + "/results")) ?? []).filter { $0.hasSuffix(".result") }
        }

        /// Files agent `index` still holds of its recordings.
        func recorded(_ index: Int) -> [String] {
            (try? FileManager.default.contentsOfDirectory(atPath: spools[index] + "/recordings")) ?? []
        }

        func client() throws -> S3Client { try S3Client(try server.location(bucket: "rig-a")) }

        /// Runs `body` with a new rig, removed afterwards whatever happens (the store stopped and its folder gone).
        static func with(_ body: (Rig) async throws -> Void) async throws {
            let rig = try await Rig()
            do {
                try await body(rig)
            } catch {
                await rig.remove()
                throw error
            }
            await rig.remove()
        }

        func remove() async {
            for agent in agents { await agent.stop() }
            try? await server.remove()
            pki.remove()
            for spool in spools { try? FileManager.default.removeItem(atPath: spool) }
            try? FileManager.default.removeItem(atPath: work)
        }
    }

    static func json(_ text: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any], "not JSON: \(text)")
    }

    /// The manifest of capture `id`, read from the store.
    static func manifest(_ id: String, client: S3Client) async throws -> CaptureManifest {
        let bytes = try await client.get("studio/\(id)/manifest.json")
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        return try decoder.decode(CaptureManifest.self, from: Data(bytes.readableBytesView))
    }

    /// SHA-256 and size of each key, as boto3 downloads them: a client that shares no code with CamRig.
    static func boto3(_ keys: [String], environment: [String: String]) async throws -> [String: (sha256: String, size: Int, head: String)] {
        let script = """
            import boto3, hashlib, json, os, sys
            from botocore.config import Config
            s3 = boto3.client('s3', endpoint_url=os.environ['AWS_ENDPOINT_URL'], config=Config(s3={'addressing_style': 'path'}, signature_version='s3v4'))
            out = {}
            for key in sys.argv[1:]:
                body = s3.get_object(Bucket='rig-a', Key=key)['Body'].read()
                out[key] = [hashlib.sha256(body).hexdigest(), len(body), body[:8].hex()]
            print(json.dumps(out))
            """
        let result = try await ToolRunner.run("/usr/bin/env", ["python3", "-c", script] + keys, environment: environment, timeout: 120)
        #expect(result.status == 0, "boto3: \(result.stderr)")
        let fields = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: [Any]])
        return fields.mapValues { ($0[0] as? String ?? "", $0[1] as? Int ?? -1, $0[2] as? String ?? "") }
    }

    @Test("photos go from the agents straight to the store; boto3 reads each back with the SHA-256 the manifest gives; the agents keep nothing")
    func photosInTheStore() async throws {
        try await Rig.with { rig in
            let result = try await rig.camrig(["capture", "--photo", "--json"])
            #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
            let summary = try Self.json(result.stdout)
            let id = try #require(summary["id"] as? String, "\(result.stdout)")
            let client = try rig.client()
            defer { Task { await client.shutdown() } }
            let manifest = try await Self.manifest(id, client: client)
            #expect(manifest.state == .complete, "\(manifest.state.map(\.rawValue) ?? "?")")
            let frames = try #require(manifest.sets.first?.frames)
            #expect(frames.count == 2)
            let keys = frames.map { "studio/\(id)/\($0.file)" }
            let read = try await Self.boto3(keys + ["studio/\(id)/contact-sheet.png"], environment: rig.environment())
            for frame in frames {
                let object = try #require(read["studio/\(id)/\(frame.file)"])
                #expect(frame.file.hasSuffix(".png") && object.head == "89504e470d0a1a0a", "\(frame.file) is a PNG: \(object.head)")
                #expect(object.sha256 == frame.sha256, "\(frame.file): the store holds what the agent put, byte for byte")
            }
            #expect(read["studio/\(id)/contact-sheet.png"]?.head == "89504e470d0a1a0a")
            // Nothing else lies under the capture but its manifest, its journal and its contact sheet.
            let listed = Set(try await client.list(prefix: "studio/\(id)/").map(\.key))
            #expect(listed.subtracting(keys).allSatisfy { $0.hasSuffix("manifest.json") || $0.contains("/journal/") || $0.hasSuffix("contact-sheet.png") }, "\(listed)")
            #expect(rig.spooled(0).isEmpty && rig.spooled(1).isEmpty, "acknowledged results are deleted from the agents' spools")
            // The agents' logs name the store, never its secret.
            let secret = try #require(rig.server.environment["AWS_SECRET_ACCESS_KEY"])
            #expect(!result.stderr.contains(secret) && !rig.agents.contains { $0.log().contains(secret) })

            // The catalog lists it where it is.
            let listing = try await ToolRunner.run(
                Executables.url("camrig").path, ["captures", "list", "--json", "--out", rig.out, "--state", rig.work + "/state"], environment: rig.environment(), timeout: 60)
            #expect(listing.status == 0 && listing.stdout.contains(id) && listing.stdout.contains(rig.out), "\(listing.stdout)\n\(listing.stderr)")
        }
    }

    @Test("an on-host recording goes to the store in parts; the store stopped during the offload loses nothing and duplicates nothing once it is back")
    func recordingThroughAnOutage() async throws {
        try await Rig.with { rig in
            // Raw frames: 27 MB a camera, files of several parts each (8 MiB parts).
            let recorded = try await rig.camrig(
                ["record", "--duration", "1.5", "--fps", "30", "--size", "640x480", "--codec", "raw", "--no-offload", "--json"])
            #expect(recorded.status == 0, "\(recorded.stdout)\n\(recorded.stderr)")
            let id = try #require(try Self.json(recorded.stdout)["id"] as? String)
            #expect(!rig.recorded(0).isEmpty && !rig.recorded(1).isEmpty)

            // The store goes away as the offload runs.
            let client = try rig.client()
            defer { Task { await client.shutdown() } }
            async let offload = rig.camrig(["captures", "offload", id, "--json"], timeout: 120)
            for _ in 0..<200 {
                if !(try await client.listMultipartUploads(prefix: "studio/\(id)/")).isEmpty { break }
                try await Task.sleep(for: .milliseconds(20))
            }
            try await rig.server.stop()
            let cut = try await offload
            let afterCut = try await rig.camrig(["captures", "offload", id, "--json"], timeout: 60)
            #expect(afterCut.status != 0, "an offload with the store down fails: \(afterCut.stdout)")
            #expect(afterCut.stderr.contains(rig.server.environment["AWS_ENDPOINT_URL"]!), "it names the store: \(afterCut.stderr)")
            #expect(!rig.recorded(0).isEmpty || !rig.recorded(1).isEmpty || cut.status == 0, "what was not stored stays on the hosts")

            _ = try await ObjectStoreServer.start(in: rig.server.directory)
            let resumed = try await rig.camrig(["captures", "offload", id, "--json"], timeout: 120)
            #expect(resumed.status == 0, "\(resumed.stdout)\n\(resumed.stderr)")
            let manifest = try await Self.manifest(id, client: client)
            let recording = try #require(manifest.hostRecording)
            // Every file is in the store; the sets' own state (a raw frame the host's disk was late for is a gap)
            // is the recording's, not the offload's.
            #expect(manifest.state != .offloading && recording.tracks.allSatisfy { $0.files.allSatisfy(\.offloaded) }, "\(manifest.state.map(\.rawValue) ?? "?")")
            #expect(recording.tracks.allSatisfy { $0.state == .complete }, "\(recording.tracks.map(\.state))")
            let files = recording.tracks.flatMap(\.files)
            #expect(files.contains { $0.size > 8 << 20 }, "some files took several parts: \(files.map(\.size))")
            let read = try await Self.boto3(files.map { "studio/\(id)/\($0.name)" }, environment: rig.environment())
            for file in files {
                let object = try #require(read["studio/\(id)/\(file.name)"])
                #expect(object.sha256 == file.sha256 && object.size == Int(file.size), "\(file.name) as its host recorded it")
            }
            let listed = try await client.list(prefix: "studio/\(id)/").map(\.key)
            #expect(Set(listed) == Set(files.map { "studio/\(id)/\($0.name)" } + ["studio/\(id)/manifest.json"]), "one object per file, nothing else: \(listed)")
            #expect(try await client.listMultipartUploads(prefix: "studio/\(id)/").isEmpty, "no upload left half-done")
            #expect(rig.recorded(0).isEmpty && rig.recorded(1).isEmpty, "the hosts deleted their files once stored")
            // ffprobe reads a video as it came out of the store.
            let video = try #require(files.first { $0.name.hasSuffix(".mkv") })
            let local = URL(fileURLWithPath: rig.work + "/" + video.name)
            try Data(try await client.get("studio/\(id)/\(video.name)").readableBytesView).write(to: local)
            let probe = try await ToolRunner.run("/usr/bin/ffprobe", ["-v", "error", "-count_frames", "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", local.path])
            #expect(probe.status == 0 && Int(probe.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0 > 0, "\(probe.stdout) \(probe.stderr)")

            // Exported straight from the store: one video per camera, each as many frames as the others.
            let exported = rig.work + "/exported"
            let export = try await ToolRunner.run(
                Executables.url("camrig").path, ["captures", "export", id, "--videos", exported, "--out", rig.out, "--state", rig.work + "/state", "--json"],
                environment: rig.environment(), timeout: 120)
            #expect(export.status == 0, "\(export.stdout)\n\(export.stderr)")
            let videos = ((try? FileManager.default.contentsOfDirectory(atPath: exported)) ?? []).filter { $0.hasSuffix(".mkv") }
            #expect(videos.count == 2, "\(videos)")
            var counts: [Int] = []
            for name in videos {
                let frames = try await ToolRunner.run(
                    "/usr/bin/ffprobe", ["-v", "error", "-count_frames", "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", exported + "/" + name])
                counts.append(Int(frames.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0)
            }
            #expect(counts.count == 2 && counts[0] > 0 && counts[0] == counts[1], "\(counts)")
            let left = (try? FileManager.default.contentsOfDirectory(atPath: rig.work + "/state/exports")) ?? []
            #expect(left.isEmpty, "the files fetched for the export are removed: \(left)")
        }
    }

    @Test("the store stopped during a recording's offload: record fails saying what to run, no host deletes a file the manifest does not list, and once the store is back offload completes with every set, files acknowledged before being recorded included")
    func storeStoppedBeforeTheManifest() async throws {
        try await Rig.with { rig in
            let client = try rig.client()
            defer { Task { await client.shutdown() } }
            // Paced so that each host's first video is in the store well before its agent answers for it.
            async let recordCommand = rig.camrig(
                ["record", "--duration", "1", "--fps", "15", "--size", "640x480", "--codec", "mjpeg", "--offload-rate", "1", "--json"], timeout: 90)
            var stored: [String] = []
            for _ in 0..<1500 {
                stored = ((try? await client.list(prefix: "studio/")) ?? []).map(\.key).filter { $0.hasSuffix(".mkv") }
                if !stored.isEmpty { break }
                try await Task.sleep(for: .milliseconds(10))
            }
            try #require(!stored.isEmpty, "no video reached the store")
            try await rig.server.stop()
            let recorded = try await recordCommand
            #expect(recorded.status != 0, "a manifest that cannot be written fails the recording: \(recorded.stdout)\n\(recorded.stderr)")
            #expect(recorded.stderr.contains("camrig captures offload"), "it says what to run: \(recorded.stderr)")
            #expect(!rig.recorded(0).isEmpty && !rig.recorded(1).isEmpty, "no host deleted a file the manifest does not list as stored")

            _ = try await ObjectStoreServer.start(in: rig.server.directory)
            let manifests = try await client.list(prefix: "studio/").map(\.key).filter { $0.hasSuffix("/manifest.json") }
            let id = try #require(manifests.first?.split(separator: "/").dropFirst().first.map(String.init), "\(manifests)")
            let before = try await Self.manifest(id, client: client)
            #expect(before.state == .offloading)
            let listed = try #require(before.hostRecording)

            // What an older coordinator did before its manifest write failed: agent-1's files put in the store and
            // acknowledged, so agent-1 deletes them, while the manifest still lists them as on the host.
            var target = WireObjectStoreTarget()
            let location = try rig.server.location(bucket: "rig-a", prefix: "studio/\(id)")
            target.endpoint = location.endpoint
            target.region = location.region
            target.bucket = location.bucket
            target.prefix = location.prefix
            target.pathStyle = location.pathStyle
            target.accessKeyID = location.credentials.accessKeyID
            target.secretAccessKey = location.credentials.secretAccessKey
            let agent = try await rig.agents[0].connect(rig.pki)
            let names = listed.tracks.filter { $0.agent == "agent-1" }.flatMap(\.files).filter { !$0.offloaded }.map(\.name)
            #expect(!names.isEmpty)
            for name in names {
                var upload = WireUploadRecordingFile()
                upload.recordingID = listed.recordingId
                upload.name = name
                upload.store = target
                _ = try await agent.request(.uploadRecordingFile(upload))
            }
            var acknowledge = WireAcknowledgeRecording()
            acknowledge.recordingID = listed.recordingId
            acknowledge.names = names
            _ = try await agent.request(.acknowledgeRecording(acknowledge))
            await agent.close()
            #expect(rig.recorded(0).isEmpty, "agent-1 holds none of its files")

            let resumed = try await rig.camrig(["captures", "offload", id, "--json"], timeout: 60)
            #expect(resumed.status == 0, "\(resumed.stdout)\n\(resumed.stderr)")
            let manifest = try await Self.manifest(id, client: client)
            let recording = try #require(manifest.hostRecording)
            #expect(manifest.state != .offloading, "\(manifest.state.map(\.rawValue) ?? "?")")
            let settled = recording.tracks.allSatisfy { track in track.state == .complete && track.files.allSatisfy { $0.isSettled && $0.lost == nil } }
            #expect(settled, "every file recorded as stored and acknowledged: \(recording.tracks)")
            #expect(manifest.sets.count == recording.gridCount && manifest.summary.sets == recording.gridCount, "every set: \(manifest.sets.count) of \(recording.gridCount)")
            #expect(manifest.sets.contains { $0.complete }, "\(manifest.summary)")
            #expect(rig.recorded(0).isEmpty && rig.recorded(1).isEmpty, "the hosts deleted their files once recorded as stored")
            #expect(try await client.listMultipartUploads(prefix: "studio/\(id)/").isEmpty, "no upload left open")
            for file in recording.tracks.flatMap(\.files) {
                let found = try await client.head("studio/\(id)/\(file.name)")
                let head = try #require(found, "\(file.name) is in the store")
                #expect(head.size == file.size && head.sha256 == file.sha256, "\(file.name) as its host recorded it")
            }
        }
    }

    @Test("wrong credentials: the coordinator's refused before anything fires; the agents' refused with the store's reason, their photos kept until recover stores them")
    func wrongCredentials() async throws {
        try await Rig.with { rig in
            let refused = try await rig.camrig(["capture", "--photo"], environment: ["AWS_SECRET_ACCESS_KEY": "wrong-secret-4242"])
            #expect(refused.status != 0)
            #expect(refused.stderr.contains("AWS_SECRET_ACCESS_KEY") && refused.stderr.contains(rig.server.environment["AWS_ENDPOINT_URL"]!), "\(refused.stderr)")
            #expect(!refused.stderr.contains("wrong-secret-4242"), "no secret in an error")
            #expect(rig.spooled(0).isEmpty && rig.spooled(1).isEmpty, "nothing was fired")

            // The agents get keys of their own, and these are wrong: the photos stay on the agents.
            let agentKeys = ["CAMRIG_AGENT_AWS_ACCESS_KEY_ID": rig.server.environment["AWS_ACCESS_KEY_ID"]!, "CAMRIG_AGENT_AWS_SECRET_ACCESS_KEY": "wrong-agent-secret-77"]
            let stuck = try await rig.camrig(["capture", "--photo", "--json"], environment: agentKeys)
            #expect(stuck.status != 0, "no photo could be stored: \(stuck.stdout)")
            #expect(stuck.stderr.contains("SignatureDoesNotMatch") && stuck.stderr.contains("agent-1"), "\(stuck.stderr)")
            #expect(!stuck.stderr.contains("wrong-agent-secret-77") && !rig.agents.contains { $0.log().contains("wrong-agent-secret-77") })
            #expect(rig.spooled(0).count == 1 && rig.spooled(1).count == 1, "each agent keeps its photo: \(rig.spooled(0)) \(rig.spooled(1))")

            // With the right keys, recover stores them and completes the capture.
            let recovered = try await rig.camrig(["captures", "recover", "--json"])
            #expect(recovered.status == 0, "\(recovered.stdout)\n\(recovered.stderr)")
            #expect(rig.spooled(0).isEmpty && rig.spooled(1).isEmpty)
            let client = try rig.client()
            defer { Task { await client.shutdown() } }
            let entries = try await client.list(prefix: "studio/")
            let manifests = entries.filter { $0.key.hasSuffix("/manifest.json") }
            #expect(manifests.count == 1, "the refused capture left no capture behind: \(manifests.map(\.key))")
            let id = try #require(manifests.first?.key.split(separator: "/").dropFirst().first.map(String.init))
            let manifest = try await Self.manifest(id, client: client)
            #expect(manifest.state == .complete && manifest.sets.first?.frames.count == 2, "\(manifest.state.map(\.rawValue) ?? "?")")
        }
    }
}
