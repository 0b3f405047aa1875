import CamRigCapture
import CamRigDeviceModel
import CamRigDevices
import CamRigStorage
import Foundation
import Testing

/// Capture folders, manifest.json and the SQLite catalog.
@Suite("Capture store and catalog", .timeLimit(.minutes(1)))
struct CaptureStoreTests {
    static func manifest(id: String, kind: String, created: String) -> CaptureManifest {
        let clock = CaptureManifest.ClockStatistics(offsetNs: 1_250_000.5, driftPpm: 35.2, errorBoundNs: 40_000, minimumRoundTripNs: 150_000, samples: 64)
        let frame = CaptureManifest.Frame(camera: 0, sequence: 7, file: "cam0/000007.png", timestampNs: 10_000, agentTimestampNs: 1_260_000, marks: "start_of_exposure", uncertaintyNs: 40_100, latenessNs: 3)
        let sets = [
            CaptureManifest.SyncSet(index: 0, complete: true, referenceTimeNs: 10_000, skewNs: 20_000, missingCameras: [], frames: [frame]),
            CaptureManifest.SyncSet(index: 1, complete: false, referenceTimeNs: 43_000, skewNs: 0, missingCameras: [1], frames: [frame]),
            CaptureManifest.SyncSet(index: 2, complete: true, referenceTimeNs: 76_000, skewNs: 60_000, missingCameras: [], frames: [frame]),
        ]
        return CaptureManifest(
            id: id, kind: kind, created: created, sessionId: "s-1", framesPerSecond: 30, frameDuration: .init(numerator: 1, denominator: 30),
            cameras: [CaptureManifest.Camera(index: 0, name: "agent-1/synthetic:SYN0001", agent: "agent-1", device: "synthetic:SYN0001", model: "m", format: "YUYV-640x480", pixelFormat: "YUYV", width: 640, height: 480, clock: clock, framesDelivered: 3, framesDropped: 1, framesUnmatched: 0)],
            sets: sets, unmatched: [], summary: CaptureManifest.Summary(sets: sets, framesDelivered: 3, droppedFrames: 1, unmatchedFrames: 0)
        )
    }

    @Test("the summary counts complete and incomplete sets and takes skew percentiles over complete sets")
    func summary() {
        let summary = Self.manifest(id: "x", kind: "recording", created: "2026").summary
        #expect(summary.sets == 3)
        #expect(summary.completeSets == 2)
        #expect(summary.incompleteSets == 1)
        #expect(summary.skewMaxNs == 60_000)
        #expect(summary.skewP50Ns == 60_000 || summary.skewP50Ns == 20_000)
    }

    @Test("a finished capture's manifest reads back equal, and the catalog lists it newest first and finds it by prefix")
    func roundTrip() async throws {
        let root = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("camrig-store-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let store = try CaptureStore(root: root, rig: "north")
        let (firstID, firstDirectory) = try await store.makeCaptureDirectory(kind: "photo", date: Date(timeIntervalSince1970: 1_700_000_000))
        let (secondID, secondDirectory) = try await store.makeCaptureDirectory(kind: "photo", date: Date(timeIntervalSince1970: 1_700_000_000))
        #expect(firstID != secondID, "two captures in one second share a folder")
        let first = Self.manifest(id: firstID, kind: "photo", created: "2026-11-22T06:00:00Z")
        let second = Self.manifest(id: secondID, kind: "recording", created: "2026-11-22T07:00:00Z")
        try await store.finish(first, in: firstDirectory)
        try await store.finish(second, in: secondDirectory)

        let entries = try await store.catalog.list()
        #expect(entries.map(\.id) == [secondID, firstID])
        #expect(entries[0].sets == 3 && entries[0].incompleteSets == 1 && entries[0].droppedFrames == 1)
        #expect(entries.allSatisfy { $0.rig == "north" && $0.store == store.location && store.holds($0) })
        #expect(try store.manifest(of: entries[1]) == first)
        #expect(try await store.catalog.entry(String(secondID.dropLast())) == entries[0])
        #expect(try await store.catalog.entry("no-such-capture") == nil)
        await store.disconnect()

        // Reopening finds the same catalog; a re-recorded capture replaces its row.
        let reopened = try CaptureStore(root: root, rig: "north")
        var changed = second
        changed.summary.droppedFrames = 5
        try await reopened.finish(changed, in: secondDirectory)
        #expect(try await reopened.catalog.list().count == 2)
        #expect(try await reopened.catalog.entry(secondID)?.droppedFrames == 5)
        await reopened.disconnect()
    }

    @Test("a capture another rig's store lists is not read from this directory: the error says whose and where it is")
    func foreignCapture() async throws {
        let root = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("camrig-store-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let store = try CaptureStore(root: root, rig: "north")
        let manifest = Self.manifest(id: "20261126-053000-photo", kind: "photo", created: "2026-11-26T05:30:00Z")
        let foreign = CaptureCatalog.Entry(manifest: manifest, directory: manifest.id, rig: "south", store: "/srv/south/captures")
        try await store.catalog.record(foreign)
        #expect(!store.holds(foreign))
        let error = #expect(throws: StorageError.self) { try store.manifest(of: foreign) }
        #expect(error?.description.contains("rig south's, stored in /srv/south/captures") == true)
        await store.disconnect()
    }

    @Test("frames are written as PNG (raw formats) or as they came (JPEG), with no partial file left behind")
    func frames() throws {
        let root = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("camrig-frames-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        let grey = [UInt8](repeating: 90, count: 64 * 48)
        let png = try grey.withUnsafeBytes { try CaptureStore.writeFrame($0, pixelFormat: .grey, dimensions: Dimensions(width: 64, height: 48), bytesPerLine: 64, named: "cam0/000001", in: root) }
        #expect(png == "cam0/000001.png")
        let data = try Data(contentsOf: root.appendingPathComponent(png))
        #expect(Array(data.prefix(8)) == [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
        let jpeg: [UInt8] = [0xFF, 0xD8, 0xFF, 0xD9]
        let jpg = try jpeg.withUnsafeBytes { try CaptureStore.writeFrame($0, pixelFormat: .mjpeg, dimensions: Dimensions(width: 8, height: 8), bytesPerLine: 0, named: "cam1/000001", in: root) }
        #expect(try Data(contentsOf: root.appendingPathComponent(jpg)) == Data(jpeg))
        let leftovers = try FileManager.default.subpathsOfDirectory(atPath: root.path).filter { $0.hasSuffix(".partial") }
        #expect(leftovers.isEmpty)
    }
}
