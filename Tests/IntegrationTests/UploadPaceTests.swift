import CamRigObjectStore
import CamRigTestSupport
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import Testing

/// An upload's rate, kept on a virtual clock: what leaves and when, never how long a test took.
@Suite("Paced uploads", .serialized, .timeLimit(.minutes(3)))
struct UploadPaceTests {
    @Test("each piece leaves once the bytes before it fit the rate; the upload ends once all of them do")
    func pace() {
        var pace = UploadPace(bytesPerSecond: 5_000_000)
        #expect(pace.send(8 << 20) == .zero, "the first piece leaves at once")
        #expect(pace.send(8 << 20) == .nanoseconds(1_677_721_600))
        #expect(pace.send(1_000_000) == .nanoseconds(3_355_443_200))
        #expect(pace.allSent == .nanoseconds(3_555_443_200))
        var unpaced = UploadPace(bytesPerSecond: 0)
        #expect(unpaced.send(1 << 30) == .zero && unpaced.allSent == .zero)
    }

    /// A clock that moves only when the upload sleeps.
    final class VirtualClock: Sendable {
        private let elapsed = NIOLockedValueBox(Duration.zero)
        var now: Duration { elapsed.withLockedValue { $0 } }
        var pacing: UploadPacing {
            UploadPacing(now: { self.now }, sleep: { delay in self.elapsed.withLockedValue { $0 += delay } })
        }
    }

    @Test("a 21 MB file at 5 MB/s against a real store: at no instant have more bytes left than the rate allows, and the upload takes the file's time at that rate")
    func rateObeyed() async throws {
        try await ObjectStoreServer.with { server in
            let client = try S3Client(try server.location(bucket: "paced"))
            defer { Task { await client.shutdown() } }
            try await client.createBucket()
            let bytes = ObjectUploadTests.randomBytes(21 << 20, seed: 7)
            let clock = VirtualClock()
            // (virtual instant, bytes stored by then) as parts complete.
            let reports = NIOLockedValueBox<[(Duration, UInt64)]>([])
            let rate: UInt64 = 5_000_000
            let partSize = 5 << 20
            var upload = ObjectUpload(key: "rec/paced.mkv", source: .bytes(ByteBuffer(bytes: bytes)), partSize: partSize, concurrency: 1)
            upload.maxBytesPerSecond = rate
            upload.pacing = clock.pacing
            let stored = try await upload.run(with: client) { sent in reports.withLockedValue { $0.append((clock.now, sent)) } }
            #expect(stored.size == UInt64(bytes.count))
            let seen = reports.withLockedValue { $0 }
            #expect(seen.count == 5, "one report a part: \(seen)")
            for (instant, sent) in seen {
                // Each part leaves once those before it fit the rate: by `instant`, at most rate × instant plus the part in flight.
                let allowed = Double(rate) * Double(instant.components.seconds) + Double(rate) * Double(instant.components.attoseconds) / 1e18
                #expect(Double(sent) <= allowed + Double(partSize), "\(sent) bytes by \(instant)")
            }
            let expected = Double(bytes.count) / Double(rate)
            let took = Double(clock.now.components.seconds) + Double(clock.now.components.attoseconds) / 1e18
            #expect(took >= expected - 1e-6 && took < expected + 0.01, "the upload took \(took) s of virtual time for \(bytes.count) bytes at \(rate) B/s")
        }
    }

    @Test("an upload found whole in the store aborts the multipart upload its state file noted, and one the store lists for the key")
    func leftoversAborted() async throws {
        try await ObjectStoreServer.with { server in
            let client = try S3Client(try server.location(bucket: "leftover"))
            defer { Task { await client.shutdown() } }
            try await client.createBucket()
            let bytes = ObjectUploadTests.randomBytes(11 << 20, seed: 8)
            let state = FileManager.default.temporaryDirectory.appendingPathComponent("camrig-leftover-\(UUID().uuidString).json")
            defer { try? FileManager.default.removeItem(at: state) }
            let upload = ObjectUpload(key: "rec/whole.mkv", source: .bytes(ByteBuffer(bytes: bytes)), partSize: 5 << 20, stateFile: state)
            let stored = try await upload.run(with: client)
            // Two uploads of the key left open: one noted beside the file (by a run with other parts, so of no
            // use to this one), one begun by a run that stopped before noting it.
            let noted = try await client.createMultipartUpload("rec/whole.mkv", sha256: stored.sha256)
            let unnoted = try await client.createMultipartUpload("rec/whole.mkv", sha256: stored.sha256)
            let other = try await client.createMultipartUpload("rec/whole.mkv.other", sha256: stored.sha256)
            let note = #"{"key":"rec/whole.mkv","uploadID":"\#(noted)","partSize":\#(6 << 20),"size":\#(bytes.count),"sha256":"\#(stored.sha256)"}"#
            try Data(note.utf8).write(to: state)
            #expect(Set(try await client.listMultipartUploads(prefix: "rec/").map(\.uploadID)) == [noted, unnoted, other])

            #expect(try await upload.run(with: client) == stored, "found whole: nothing sent")
            let open = try await client.listMultipartUploads(prefix: "rec/")
            #expect(open.map(\.uploadID) == [other], "only another key's upload is left: \(open)")
            #expect(!FileManager.default.fileExists(atPath: state.path))
            try await client.abortMultipartUpload("rec/whole.mkv.other", uploadID: other)
        }
    }
}
