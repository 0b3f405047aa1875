import CamRigCapture
import CamRigObjectStore
import CamRigStorage
import CamRigTestSupport
import Foundation
import NIOCore
import Testing

/// `camrig serve --out s3://…`: the service captures into a real S3-compatible store (OpenStack Swift's
/// s3api, started by scripts/object-store) and serves the capture back from it through its API.
@Suite("Coordinator service with its captures in an object store", .serialized, .timeLimit(.minutes(4)))
struct ServiceObjectStoreTests {
    @Test("a photo taken through the service lands in the store; the API lists it there and serves its summary, manifest and contact sheet from it")
    func photoInTheStore() async throws {
        try await ObjectStoreServer.with { server in
            let state = FileManager.default.temporaryDirectory.appendingPathComponent("camrig-serve-state-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: state) }
            let out = "s3://rig-s/captures"
            let served = try await ServedRig(agents: 1, ["--out", out, "--state", state.path], environment: server.environment)

            #expect(
                try await eventually(timeout: .seconds(30), pollingEvery: .milliseconds(200)) {
                    ((try await served.json("/api/v1/session") as? [String: Any])?["cameras"] as? Int) == 1
                }, "no session: \(served.log().suffix(2000))")
            let photo = try await served.curl("/api/v1/captures/photo", ["-H", "Content-Type: application/json", "-X", "POST", "--data", #"{"quality": "speed"}"#])
            #expect(photo.status == 202, "\(photo.output)")
            var capture: String?
            var failure: String?
            #expect(
                try await eventually(timeout: .seconds(60), pollingEvery: .milliseconds(200)) {
                    let jobs = try await served.json("/api/v1/jobs") as? [[String: Any]]
                    capture = jobs?.first?["capture_id"] as? String
                    failure = jobs?.first?["state"] as? String == "failed" ? "\(jobs?.first ?? [:])" : nil
                    return capture != nil || failure != nil
                })
            let id = try #require(capture, "the photo did not finish: \(failure ?? "")\n\(served.log().suffix(2000))")

            let listed = try #require(try await served.json("/api/v1/captures") as? [[String: Any]])
            let entry = try #require(listed.first { $0["id"] as? String == id }, "\(listed)")
            #expect(entry["store"] as? String == out, "\(entry)")
            let summary = try #require(try await served.json("/api/v1/captures/\(id)") as? [String: Any])
            #expect(summary["directory"] as? String == "\(out)/\(id)", "\(summary)")
            let manifest = try #require(try await served.json("/api/v1/captures/\(id)/manifest") as? [String: Any])
            #expect(manifest["id"] as? String == id && manifest["state"] as? String == "complete", "\(manifest)")

            // The contact sheet as the store holds it, byte for byte.
            let sheet = try await served.download("/api/v1/captures/\(id)/files/contact-sheet.png")
            #expect(sheet.status == 200 && sheet.type == "image/png", "\(sheet.status) \(sheet.type)")
            let client = try S3Client(try server.location(bucket: "rig-s"))
            let stored = try await client.get("captures/\(id)/contact-sheet.png")
            #expect(sheet.body.starts(with: [0x89, 0x50, 0x4E, 0x47]) && sheet.body == Data(stored.readableBytesView))
            // A file larger than what the service holds of it at once (a recording's video, say): streamed in
            // ranged reads, whole and in order.
            var large = ByteBuffer()
            var generator = SystemRandomNumberGenerator()
            for _ in 0..<(19 << 20) / 8 { large.writeInteger(generator.next() as UInt64) }
            large.writeString("the end")
            _ = try await client.put("captures/\(id)/cam0-video.mkv", body: large)
            await client.shutdown()
            let video = try await served.download("/api/v1/captures/\(id)/files/cam0-video.mkv")
            #expect(video.status == 200 && video.type == "video/x-matroska", "\(video.status) \(video.type)")
            #expect(video.body.count == large.readableBytes && video.body == Data(large.readableBytesView), "\(video.body.count) of \(large.readableBytes) bytes")
            let missing = try await served.curl("/api/v1/captures/\(id)/files/no-such-file.png")
            #expect(missing.status == 404 && missing.output.contains(id) && missing.output.contains("no-such-file.png"), "\(missing.output)")

            #expect(await served.stop() != nil, "camrig serve did not stop within 20 s of SIGTERM")
        }
    }

    @Test("a recording's sets are viewed from its videos in the store: each camera's frame of a set as the same video read from a folder gives it; a video missing from the store is a 404 naming it")
    func recordingSetsFromTheStore() async throws {
        try await ObjectStoreServer.with { server in
            let state = FileManager.default.temporaryDirectory.appendingPathComponent("camrig-serve-state-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: state) }
            let served = try await ServedRig(agents: 2, ["--out", "s3://rig-v/captures", "--state", state.path], environment: server.environment)
            #expect(
                try await eventually(timeout: .seconds(30), pollingEvery: .milliseconds(200)) {
                    ((try await served.json("/api/v1/session") as? [String: Any])?["cameras"] as? Int) == 2
                }, "no session: \(served.log().suffix(2000))")
            let started = try await served.curl("/api/v1/captures/recording", ["-H", "Content-Type: application/json", "-X", "POST", "--data", #"{"duration": 1.5, "fps": 30, "codec": "ffv1"}"#])
            #expect(started.status == 202, "\(started.output)")
            var job: [String: Any] = [:]
            #expect(
                try await eventually(timeout: .seconds(90), pollingEvery: .milliseconds(200)) {
                    job = (try await served.json("/api/v1/jobs") as? [[String: Any]])?.first ?? [:]
                    return job["capture_id"] != nil || job["state"] as? String == "failed"
                })
            let id = try #require(job["capture_id"] as? String, "the recording did not finish: \(job)\n\(served.log().suffix(2000))")

            // The set checked is late in the recording, so the frame is read past the video's first pieces.
            let client = try S3Client(try server.location(bucket: "rig-v"))
            let bytes = try await client.get("captures/\(id)/manifest.json")
            let decoder = JSONDecoder()
            decoder.keyDecodingStrategy = .convertFromSnakeCase
            let manifest = try decoder.decode(CaptureManifest.self, from: Data(bytes.readableBytesView))
            #expect(manifest.hostRecording?.isOffloaded == true, "the recording's files are not all in the store")
            let both = manifest.sets.indices.filter { index in Set(manifest.sets[index].frames.filter { !$0.file.isEmpty }.map(\.camera)).count == 2 }
            let set = try #require(both.last, "no set has a frame of both cameras: \(manifest.sets.count) sets")

            // The same videos in a folder, read by path, give the same frames byte for byte.
            let folder = state.appendingPathComponent("copy")
            for file in manifest.hostRecording?.tracks.flatMap(\.files) ?? [] {
                let target = folder.appendingPathComponent(file.name)
                try FileManager.default.createDirectory(at: target.deletingLastPathComponent(), withIntermediateDirectories: true)
                try Data(try await client.get("captures/\(id)/\(file.name)").readableBytesView).write(to: target)
            }
            for camera in 0..<2 {
                let viewed = try await served.download("/api/v1/captures/\(id)/sets/\(set)/cameras/\(camera)")
                #expect(viewed.status == 200 && viewed.type == "image/jpeg", "set \(set), camera \(camera): \(viewed.status) \(String(decoding: viewed.body, as: UTF8.self).prefix(500))")
                let local = try #require(try RecordingExport.setImage(of: manifest, in: folder, set: set, camera: camera))
                #expect(viewed.body == Data(local), "set \(set), camera \(camera): the frame from the store differs from the frame from the folder")
            }

            // A video gone from the store: a 404 naming the capture and the file.
            let gone = try #require(manifest.sets[set].frames.first { $0.camera == 0 }?.file)
            try await client.delete("captures/\(id)/\(gone)")
            await client.shutdown()
            let missing = try await served.curl("/api/v1/captures/\(id)/sets/\(set)/cameras/0")
            #expect(missing.status == 404 && missing.output.contains(id) && missing.output.contains(gone), "\(missing.output)")
            #expect(await served.stop() != nil, "camrig serve did not stop within 20 s of SIGTERM")
        }
    }
}

extension ServedRig {
    /// A GET with the token, its body kept as bytes: the status, the content type and the body.
    func download(_ path: String) async throws -> (status: Int, type: String, body: Data) {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("camrig-download-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: file) }
        let result = try await Executables.runTool(
            "/usr/bin/curl",
            [
                "-sS", "--http1.1", "--max-time", "20", "--cacert", ca, "-H", "Authorization: Bearer \(token)", "-o", file.path, "-w", "%{http_code} %{content_type}",
                base + path,
            ], timeout: 30)
        #expect(result.status == 0, "curl \(path): \(result.stderr)")
        let fields = result.stdout.split(separator: " ", maxSplits: 1).map(String.init)
        return (Int(fields.first ?? "") ?? 0, fields.count > 1 ? fields[1] : "", (try? Data(contentsOf: file)) ?? Data())
    }
}
