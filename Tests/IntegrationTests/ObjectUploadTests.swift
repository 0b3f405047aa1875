import CamRigObjectStore
import CamRigTestSupport
import Crypto
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import Testing

/// Uploads against a real S3 API (OpenStack Swift's s3api, started by scripts/object-store).
@Suite("Object uploads to a real store", .serialized, .timeLimit(.minutes(3)))
struct ObjectUploadTests {
    static func randomBytes(_ count: Int, seed: UInt64) -> [UInt8] {
        var generator = SplitMix(seed: seed)
        return (0..<count).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
    }

    static func sha256(_ bytes: some Sequence<UInt8>) -> String { SignatureV4.hex(SHA256.hash(data: Array(bytes))) }

    @Test("small objects in one PUT and large ones in parts come back byte for byte, checked, with no upload left behind")
    func roundTrip() async throws {
        try await ObjectStoreServer.with { server in
            let client = try S3Client(try server.location(bucket: "round-trip"))
            defer { Task { await client.shutdown() } }
            try await client.createBucket()
            try await client.createBucket()  // a second time is no error: the bucket is ours
            let small = Self.randomBytes(300_000, seed: 1)
            let large = Self.randomBytes(12 << 20, seed: 2)
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("camrig-upload-\(UUID().uuidString)")
            try Data(large).write(to: file)
            defer { try? FileManager.default.removeItem(at: file) }

            let one = try await ObjectUpload(key: "c/small.png", source: .bytes(ByteBuffer(bytes: small))).run(with: client)
            let parts = try await ObjectUpload(key: "c/large.mkv", source: .file(file.path), partSize: 5 << 20).run(with: client)
            #expect(one.size == 300_000 && one.sha256 == Self.sha256(small) && !one.etag.contains("-"))
            #expect(parts.size == UInt64(large.count) && parts.sha256 == Self.sha256(large) && parts.etag.hasSuffix("-3"))
            #expect(Array(try await client.get("c/small.png").readableBytesView) == small)
            #expect(Array(try await client.get("c/large.mkv").readableBytesView) == large)
            // What the store holds is what was uploaded: size, SHA-256 metadata and entity tag.
            try await client.check(one)
            try await client.check(parts)
            var wrong = parts
            wrong.sha256 = one.sha256
            await #expect(throws: ObjectStoreError.self) { try await client.check(wrong) }
            // A source that no longer hashes to what it should (a recorded file changed on its disk) makes no object.
            let changed = await #expect(throws: ObjectStoreError.self) {
                _ = try await ObjectUpload(key: "c/changed.mkv", source: .file(file.path), partSize: 5 << 20, sha256: one.sha256).run(with: client)
            }
            #expect(changed?.kind == .mismatch)
            #expect(try await client.listMultipartUploads(prefix: "c/").isEmpty)
            #expect(Set(try await client.list(prefix: "c/").map(\.key)) == ["c/small.png", "c/large.mkv"])
        }
    }

    @Test("an upload cut off by the store stopping resumes after its restart with the parts it lacks, and leaves one whole object")
    func resumeAfterOutage() async throws {
        try await ObjectStoreServer.with { server in
            let client = try S3Client(try server.location(bucket: "resume"), timeout: .seconds(10))
            defer { Task { await client.shutdown() } }
            try await client.createBucket()
            let bytes = Self.randomBytes(16 << 20, seed: 3)
            let state = FileManager.default.temporaryDirectory.appendingPathComponent("camrig-upload-state-\(UUID().uuidString).json")
            defer { try? FileManager.default.removeItem(at: state) }
            let sent = NIOLockedValueBox<[Int]>([])
            var upload = ObjectUpload(key: "rec/cam0.mkv", source: .bytes(ByteBuffer(bytes: bytes)), partSize: 5 << 20, stateFile: state, concurrency: 1)
            upload.partStored = { number in
                sent.withLockedValue { $0.append(number) }
                // The store goes away after the second part.
                if number == 2 { try? server.stopBlocking() }
            }
            await #expect(throws: ObjectStoreError.self) { _ = try await upload.run(with: client) }
            #expect(sent.withLockedValue { $0 } == [1, 2])
            #expect(FileManager.default.fileExists(atPath: state.path), "the upload's id is kept for the next run")

            _ = try await ObjectStoreServer.start(in: server.directory)
            sent.withLockedValue { $0 = [] }
            let stored = try await upload.run(with: client)
            #expect(sent.withLockedValue { $0 } == [3, 4], "only the parts the store lacked were sent again")
            #expect(stored.sha256 == Self.sha256(bytes) && stored.etag.hasSuffix("-4"))
            #expect(Array(try await client.get("rec/cam0.mkv").readableBytesView) == bytes)
            #expect(try await client.listMultipartUploads(prefix: "rec/").isEmpty, "nothing half-uploaded is left")
            #expect(try await client.list(prefix: "rec/").map(\.key) == ["rec/cam0.mkv"])
            #expect(!FileManager.default.fileExists(atPath: state.path))
            // Run again (its answer lost, say): the object is found whole, nothing is sent.
            sent.withLockedValue { $0 = [] }
            #expect(try await upload.run(with: client) == stored)
            #expect(sent.withLockedValue { $0 }.isEmpty)
        }
    }

    @Test("wrong credentials and a store that does not answer are refused with what to check, never the secret")
    func refusals() async throws {
        try await ObjectStoreServer.with { server in
            let wrong = try S3Client(try server.location(bucket: "refused", secret: "not-the-secret-123"))
            defer { Task { await wrong.shutdown() } }
            let refusal = await #expect(throws: ObjectStoreError.self) {
                _ = try await wrong.put("x", body: ByteBuffer(string: "x"))
            }
            #expect(refusal?.kind == .accessDenied && refusal?.code == "SignatureDoesNotMatch")
            #expect(refusal?.description.contains("AWS_SECRET_ACCESS_KEY") == true)
            #expect(refusal?.description.contains("not-the-secret-123") == false)

            var unknown = server.environment
            unknown["AWS_ACCESS_KEY_ID"] = "nobody:nobody"
            let stranger = try S3Client(try ObjectStoreLocation.parse("s3://refused", environment: unknown))
            defer { Task { await stranger.shutdown() } }
            let unknownRefusal = await #expect(throws: ObjectStoreError.self) { try await stranger.createBucket() }
            // Swift's s3api answers an unknown key as a wrong signature (SignatureDoesNotMatch), AWS with InvalidAccessKeyId.
            #expect(unknownRefusal?.kind == .accessDenied && unknownRefusal?.description.contains("AWS_ACCESS_KEY_ID") == true)

            try await server.stop()
            let gone = try S3Client(try server.location(bucket: "refused"), timeout: .seconds(5))
            defer { Task { await gone.shutdown() } }
            let unreachable = await #expect(throws: ObjectStoreError.self) { try await gone.createBucket() }
            #expect(unreachable?.kind == .unreachable && unreachable?.description.contains(server.environment["AWS_ENDPOINT_URL"]!) == true)
        }
    }
}

/// A small deterministic generator for test bytes.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
