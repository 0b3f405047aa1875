import CamRigCapture
import CamRigDeviceModel
import CamRigDevices
import CamRigImage
import CamRigStorage
import Foundation
import Testing

/// `CaptureStore` as the coordinator's capture sink: a directory per capture, image files, spilled
/// frames converted after a recording, and the manifest in the catalog.
@Suite("Capture store as a sink", .timeLimit(.minutes(1)))
struct CaptureStoreSinkTests {
    static let pngSignature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]

    static func manifest(id: String, kind: CaptureKind, file: String) -> CaptureManifest {
        let frame = CaptureManifest.Frame(
            camera: 0, sequence: 1, file: file, timestampNs: 1, agentTimestampNs: 2, marks: "dequeue", uncertaintyNs: 3)
        let set = CaptureManifest.SyncSet(
            index: 0, complete: true, referenceTimeNs: 1, skewNs: 0, missingCameras: [], frames: [frame])
        return CaptureManifest(
            id: id, kind: kind.rawValue, created: "2026-01-01T00:00:00Z", sessionId: "s-1", cameras: [], sets: [set],
            unmatched: [],
            summary: CaptureManifest.Summary(sets: [set], framesDelivered: 1, droppedFrames: 0, unmatchedFrames: 0)
        )
    }

    @Test("a photo capture: its directory, a PNG per frame written concurrently, and the manifest in the catalog")
    func photo() async throws {
        let root = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent(
            "camrig-sink-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let store = try CaptureStore(root: root)
        let capture = try await store.begin(.photo)
        #expect(capture.kind == .photo && capture.id.hasSuffix("-photo"))
        #expect(capture.location.deletingLastPathComponent().standardizedFileURL.path == root.standardizedFileURL.path)

        let layout = FrameLayout(pixelFormat: .grey, dimensions: Dimensions(width: 32, height: 24), bytesPerLine: 32)
        let files = try await withThrowingTaskGroup(of: String.self) { group in
            for camera in 0..<4 {
                group.addTask {
                    try await store.write(
                        [UInt8](repeating: UInt8(camera * 40), count: 32 * 24), layout: layout, named: "cam\(camera)-x",
                        in: capture)
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }.sorted()
        }
        #expect(files == ["cam0-x.png", "cam1-x.png", "cam2-x.png", "cam3-x.png"])
        for file in files {
            #expect(
                Array(try Data(contentsOf: capture.location.appendingPathComponent(file)).prefix(8))
                    == Self.pngSignature)
        }

        try await store.finish(Self.manifest(id: capture.id, kind: .photo, file: files[0]), in: capture)
        let entry = try #require(try await store.catalog.entry(capture.id))
        #expect(entry.directory == capture.location.lastPathComponent)
        #expect(try store.manifest(of: entry).sets[0].frames[0].file == "cam0-x.png")
    }

    @Test("a spilled frame keeps its bytes until converted, then only the image is left")
    func spillAndConvert() async throws {
        let root = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent(
            "camrig-sink-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let store = try CaptureStore(root: root)
        let capture = try await store.begin(.recording)
        // YUYV, 4x2: two pixel pairs per row.
        let yuyv: [UInt8] = Array(repeating: [235, 128, 235, 128], count: 4).flatMap { $0 }
        let layout = FrameLayout(pixelFormat: .yuyv, dimensions: Dimensions(width: 4, height: 2), bytesPerLine: 8)
        let spilled = try await store.spill(yuyv, layout: layout, named: "cam0-x/000007", in: capture)
        #expect(spilled.file == "cam0-x/000007.raw")
        #expect(try Data(contentsOf: capture.location.appendingPathComponent(spilled.file)) == Data(yuyv))

        let image = try await store.convert(spilled, in: capture)
        #expect(image == "cam0-x/000007.png")
        #expect(
            Array(try Data(contentsOf: capture.location.appendingPathComponent(image)).prefix(8)) == Self.pngSignature)
        let left = try FileManager.default.contentsOfDirectory(
            atPath: capture.location.appendingPathComponent("cam0-x").path)
        #expect(left == ["000007.png"])
    }

    @Test("a frame that cannot be encoded is refused, and its spilled bytes stay")
    func unconvertibleFrameStays() async throws {
        let root = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent(
            "camrig-sink-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let store = try CaptureStore(root: root)
        let capture = try await store.begin(.recording)
        let layout = FrameLayout(pixelFormat: .grey, dimensions: Dimensions(width: 64, height: 64), bytesPerLine: 64)
        let spilled = try await store.spill(
            [UInt8](repeating: 0, count: 10), layout: layout, named: "cam0-x/000001", in: capture)
        await #expect(throws: FrameImageWriterError.self) { _ = try await store.convert(spilled, in: capture) }
        #expect(FileManager.default.fileExists(atPath: capture.location.appendingPathComponent(spilled.file).path))
    }

    @Test("names that would leave the capture directory are refused")
    func namesStayInside() async throws {
        let root = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent(
            "camrig-sink-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let store = try CaptureStore(root: root)
        let capture = try await store.begin(.photo)
        let layout = FrameLayout(pixelFormat: .mjpeg, dimensions: Dimensions(width: 8, height: 8), bytesPerLine: 0)
        for name in ["../escape", "/etc/x", "cam0//x", ""] {
            await #expect(throws: StorageError.self, "\(name)") {
                _ = try await store.write([0xFF, 0xD8], layout: layout, named: name, in: capture)
            }
        }
    }

    @Test("the journal keeps every whole record, even one appended after a record torn by a crash")
    func journalAfterTornRecord() async throws {
        let root = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("camrig-journal-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let store = try CaptureStore(root: root)
        let capture = try await store.begin(.photo)
        let frame = CaptureManifest.Frame(camera: 0, sequence: 7, file: "cam0.png", timestampNs: 1, agentTimestampNs: 2, marks: "dequeue", uncertaintyNs: 3)
        try await store.journal(JournalEntry(resultId: "r-1", agent: "agent-1", frame: frame), in: capture)
        // A crash in the middle of the next append leaves half a record without its line end.
        let handle = try FileHandle(forWritingTo: capture.location.appendingPathComponent(CaptureStore.journalFile))
        handle.seekToEndOfFile()
        handle.write(Data("{\"agent\":\"agent-2\",\"fra".utf8))
        try handle.close()
        var second = frame
        second.camera = 1
        try await store.journal(JournalEntry(resultId: "r-2", agent: "agent-3", frame: second), in: capture)
        let entries = store.journal(in: capture.location)
        #expect(entries.map(\.resultId) == ["r-1", "r-2"])
        #expect(entries.last?.frame.camera == 1)
    }

    @Test("a capture begun is listed in_progress and unfinished until finished; a folder left without a catalog entry is found")
    func unfinishedCaptures() async throws {
        let root = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("camrig-unfinished-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let store = try CaptureStore(root: root)
        let capture = try await store.begin(.photo)
        var manifest = Self.manifest(id: capture.id, kind: .photo, file: "cam0.png")
        manifest.state = .inProgress
        try await store.started(manifest, in: capture)
        #expect(try await store.catalog.list().first?.state == "in_progress")
        #expect(await store.claim(capture) == nil, "the writer holds the capture")
        #expect(try await store.unfinished().map(\.handle.id) == [capture.id])
        manifest.state = .complete
        try await store.finish(manifest, in: capture)
        #expect(try await store.unfinished().isEmpty)
        let claim = try #require(await store.claim(capture), "a finished capture can be claimed")
        claim.release()

        // A folder whose manifest was written but whose catalog entry was not (a crash in between).
        let orphan = try await store.begin(.photo)
        var left = Self.manifest(id: orphan.id, kind: .photo, file: "cam0.png")
        left.state = .inProgress
        try CaptureStore.manifestJSON(left).write(to: orphan.location.appendingPathComponent("manifest.json"))
        #expect(try await store.unfinished().map(\.handle.id) == [orphan.id])
        #expect(try await store.catalog.entry(orphan.id)?.state == "in_progress", "listed in the catalog once found")
    }
}
