import CamRigCapture
import CamRigStorage
import Crypto
import Foundation
import Testing

/// What the coordinator does with a recording's files: receives them resumably and checked, and reads
/// their frame tables into sync sets.
@Suite("Recorded files", .timeLimit(.minutes(1)))
struct RecordedFilesTests {
    static let table = """
        grid_index,frame,file,exposure_start_rig_ns,uncertainty_ns,sensor_timestamp_ns,sensor_timestamp_marks,flags
        0,0,0,1000,900,5000,start-of-exposure,
        1,,,1033,,,,gap
        2,1,0,1066,900,5066,start-of-exposure,
        2,2,1,1070,900,5070,start-of-exposure,duplicate
        3,3,1,1100,900,5100,start-of-exposure,

        """

    @Test("the frame table parses, keeps the first frame of an instant, and counts frames per segment")
    func parses() throws {
        let table = try RecordedFrameTable(parsing: Self.table)
        #expect(table.rows.count == 5)
        #expect(table.framesByIndex.keys.sorted() == [0, 2, 3])
        #expect(table.framesByIndex[2]?.frame == 1, "the duplicate is not the set's frame")
        #expect(table.framesPerSegment == [2, 2])
        #expect(throws: RecordedFrameTable.TableError.self) { try RecordedFrameTable(parsing: "grid_index\n") }
        #expect(throws: RecordedFrameTable.TableError.self) { try RecordedFrameTable(parsing: RecordedFrameTable.header + "\n1,2\n") }
    }

    @Test("every row writes and reads back as it was; a row of a flag the table has no word for, or a frame row without its frame, is refused")
    func rowsRoundTrip() throws {
        let table = try RecordedFrameTable(parsing: Self.table)
        #expect(try RecordedFrameTable(parsing: table.text) == table, "written by the one codec, read by it again")
        #expect(table.rows.map(\.flag) == [.frame, .gap, .frame, .duplicate, .frame])
        #expect(RecordedFrameTable.Row(line: "4,,,1133,,,,dropped") == nil, "no such flag")
        #expect(RecordedFrameTable.Row(line: "4,,,1133,,,,") == nil, "a frame row names its frame")
        #expect(RecordedFrameTable.Row(line: "4,7,0,1133,900,5133,start-of-exposure,gap") == nil, "a gap has no frame")
    }

    @Test("a table an agent stopped mid-write: the torn last line is left out and counted, every whole row kept")
    func recovers() {
        let torn = Self.table + "4,4,1,113"
        let table = RecordedFrameTable(recovering: torn)
        #expect(table.rows.count == 5 && table.skipped == 1)
        #expect(RecordedFrameTable(recovering: Self.table).skipped == 0)
        #expect(RecordedFrameTable(recovering: "").rows.isEmpty)
        #expect(RecordedTimecodes.text(for: table) == "# timecode format v2\n0.001000\n0.001066\n0.001070\n0.001100\n", "stored frames only")
    }

    @Test("sets: one per grid instant, complete where every camera has a frame, each frame placed in its segment")
    func sets() throws {
        let a = try RecordedFrameTable(parsing: Self.table)
        let b = try RecordedFrameTable(parsing: """
            grid_index,frame,file,exposure_start_rig_ns,uncertainty_ns,sensor_timestamp_ns,sensor_timestamp_marks,flags
            0,0,0,1010,900,7000,start-of-exposure,
            1,1,0,1043,900,7033,start-of-exposure,
            2,2,0,1070,900,7066,start-of-exposure,
            3,3,0,1105,900,7100,start-of-exposure,
            """)
        let recording = CaptureManifest.HostRecording(recordingId: "r", startNs: 1000, gridPeriodNs: 33.3, gridCount: 4, tracks: [])
        let sets = RecordedFrameTable.sets(tables: [(0, ["a.mkv", "a.001.mkv"], a), (1, ["b.mkv"], b)], cameraCount: 2, recording: recording)
        #expect(sets.map(\.complete) == [true, false, true, true])
        #expect(sets[1].missingCameras == [0])
        #expect(sets[0].skewNs == 10)
        let last = try #require(sets[3].frames.first { $0.camera == 0 })
        #expect(last.file == "a.001.mkv" && last.videoFrame == 1 && last.sequence == 3, "frame 3 is the second of the second segment")
        #expect(sets[2].frames.first { $0.camera == 0 }?.timestampNs == 1066)
    }

    func store() throws -> (CaptureStore, CaptureHandle, URL) {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("camrig-files-\(UUID().uuidString)")
        let store = try CaptureStore(root: root)
        let folder = root.appendingPathComponent("capture")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        return (store, CaptureHandle(id: "capture", kind: .recording, location: folder), root)
    }

    static func hex(_ bytes: [UInt8]) -> String { SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined() }

    @Test("a file received in pieces resumes where its copy ends and is named only once its checksum matches")
    func resumes() async throws {
        let (store, capture, root) = try store()
        defer { try? FileManager.default.removeItem(at: root) }
        let bytes = (0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        #expect(try await store.receivedBytes(of: "cam0.mkv", in: capture) == 0)
        try await store.receive(Array(bytes[..<60_000]), into: "cam0.mkv", at: 0, in: capture)
        #expect(try await store.receivedBytes(of: "cam0.mkv", in: capture) == 60_000)
        #expect(!FileManager.default.fileExists(atPath: capture.location.appendingPathComponent("cam0.mkv").path), "not named before it is whole")
        try await store.receive(Array(bytes[50_000...]), into: "cam0.mkv", at: 50_000, in: capture)
        try await store.completeFile("cam0.mkv", size: 100_000, sha256: Self.hex(bytes), in: capture)
        #expect(try Data(contentsOf: capture.location.appendingPathComponent("cam0.mkv")) == Data(bytes))
        #expect(try await store.readFile("cam0.mkv", in: capture) == bytes)
        #expect(try await store.receivedBytes(of: "cam0.mkv", in: capture) == 100_000)
    }

    @Test("a copy whose checksum does not match is deleted, and the error says so")
    func mismatch() async throws {
        let (store, capture, root) = try store()
        defer { try? FileManager.default.removeItem(at: root) }
        let bytes = [UInt8](repeating: 1, count: 4096)
        try await store.receive(bytes, into: "cam1.frames.csv", at: 0, in: capture)
        await #expect(throws: (any Error).self) {
            try await store.completeFile("cam1.frames.csv", size: 4096, sha256: Self.hex([UInt8](repeating: 2, count: 4096)), in: capture)
        }
        #expect(try await store.receivedBytes(of: "cam1.frames.csv", in: capture) == 0, "fetched again from the start")
        await #expect(throws: (any Error).self) { try await store.receive(bytes, into: "../escape", at: 0, in: capture) }
    }
}
