import CamRigCapture
import CamRigDeviceModel
import CamRigDevices
import CamRigMedia
import CamRigWire
import Foundation
import NIOCore
import Testing

@testable import CamRigAgent

/// Where an on-host recording puts each frame, what its sidecars say, and which codec a camera gets.
@Suite("On-host recording: grid, sidecars, codecs", .timeLimit(.minutes(1)))
struct RecordingGridTests {
    /// A 30 fps grid from t = 1 s, ten instants.
    func grid() -> RecordingGrid { RecordingGrid(start: 1_000_000_000, period: 33_333_333.3, count: 10) }

    @Test("frames land on the nearest grid instant; a skipped instant is a gap, not a shift")
    func gapsAreNotShifts() {
        var grid = grid()
        #expect(grid.place(exposureStart: 1_000_000_000 - 20_000_000) == .before, "more than half a period early")
        #expect(grid.place(exposureStart: 1_000_000_000 - 10_000_000) == .frame(index: 0, gaps: 0..<0, duplicate: false), "within half a period of the first instant")
        #expect(grid.place(exposureStart: grid.instant(1) + 900_000) == .frame(index: 1, gaps: 1..<1, duplicate: false))
        // Instants 2 and 3 never got a frame.
        #expect(grid.place(exposureStart: grid.instant(4) - 400_000) == .frame(index: 4, gaps: 2..<4, duplicate: false))
        #expect(grid.frames == 3 && grid.gaps == 2)
        #expect(grid.firstIndex == 0 && grid.lastIndex == 4)
    }

    @Test("a second frame on one instant is stored and flagged a duplicate; frames past the end close the track")
    func duplicatesAndEnd() {
        var grid = grid()
        _ = grid.place(exposureStart: grid.instant(0))
        #expect(grid.place(exposureStart: grid.instant(0) + 2_000_000) == .frame(index: 0, gaps: 1..<1, duplicate: true))
        #expect(grid.duplicates == 1 && grid.frames == 2)
        #expect(grid.place(exposureStart: grid.instant(10)) == .after)
        #expect(grid.finish() == 1..<10, "the instants left are gaps")
        #expect(grid.gaps == 9 && grid.isComplete)
    }

    @Test("a stop ends the grid after the instant it came at; instants already passed stay")
    func stop() {
        var grid = grid()
        _ = grid.place(exposureStart: grid.instant(0))
        _ = grid.place(exposureStart: grid.instant(1))
        grid.end(before: 3)
        #expect(grid.count == 3)
        #expect(grid.place(exposureStart: grid.instant(3)) == .after)
        grid.end(before: 0)
        #expect(grid.count == 2, "never before what was recorded")
    }

    @Test("the frame table has a row per grid index; timecodes are milliseconds with every nanosecond")
    func sidecarRows() throws {
        let frame = RecordedFrameTable.Row(
            gridIndex: 7, frame: 5, segment: 0, rigTimeNs: 12_345_678_901, uncertaintyNs: 950, sensorTimestampNs: 12_345_000_000,
            marks: "start-of-exposure", duplicate: false)
        #expect(frame.line == "7,5,0,12345678901,950,12345000000,start-of-exposure,\n")
        let gap = RecordedFrameTable.Row(missing: 8, rigTimeNs: 12_379_012_234, flag: .gap)
        #expect(gap.line == "8,,,12379012234,,,,gap\n")
        #expect(RecordedTimecodes.line(rigTimeNs: 12_345_678_901) == "12345.678901\n")
        #expect(RecordedTimecodes.line(rigTimeNs: 1_000_000_005) == "1000.000005\n")
        #expect(RecordedFrameTable.header.split(separator: ",").count == 8)
        // What the agent writes, the coordinator reads back as it was.
        let table = try RecordedFrameTable(parsing: RecordedFrameTable(rows: [frame, gap]).text)
        #expect(table.rows == [frame, gap])
    }

    @Test("the rig clock mapping applies the agent's offset and rate, and its bound grows away from the reference")
    func clockMapping() {
        let mapping = RigClockMapping(agentReference: 10_000, rigReference: 2_000, rigPerAgent: 1 - 50e-6, uncertainty: 800, uncertaintyGrowthPPM: 2)
        #expect(mapping.rigTime(ofAgent: 10_000) == 2_000)
        #expect(mapping.rigTime(ofAgent: 1_000_010_000) == 2_000 + 1_000_000_000 - 50_000)
        #expect(mapping.uncertainty(atAgent: 1_000_010_000, stamp: 100) == 800 + 2_000 + 100)
    }

    static func format(_ pixelFormat: PixelFormat) -> DeviceFormat {
        DeviceFormat(pixelFormat: pixelFormat, dimensions: Dimensions(width: 640, height: 480), frameRateRanges: [])
    }

    @Test("unspecified: compressed cameras are copied, Bayer kept losslessly, other raw formats made MJPEG; impossible choices say what to choose")
    func codecs() throws {
        #expect(try AgentRecordings.resolve(.unspecified, format: Self.format(.mjpeg)).get() == .copy)
        #expect(try AgentRecordings.resolve(.unspecified, format: Self.format(.yuyv)).get() == .mjpeg)
        #expect(try AgentRecordings.resolve(.unspecified, format: Self.format(.bayerRGGB8)).get() == .ffv1)
        #expect(try AgentRecordings.resolve(.mjpeg, format: Self.format(.mjpeg)).get() == .copy, "a camera's JPEGs are MJPEG already")
        #expect(try AgentRecordings.resolve(.raw, format: Self.format(.bayerRGGB8)).get() == .raw)
        #expect(throws: CodecRefusal.self) { try AgentRecordings.resolve(.copy, format: Self.format(.yuyv)).get() }
        #expect(throws: CodecRefusal.self) { try AgentRecordings.resolve(.ffv1, format: Self.format(.mjpeg)).get() }
        #expect(throws: CodecRefusal.self) { try AgentRecordings.resolve(.mjpeg, format: Self.format(.bayerRGGB8)).get() }
    }

    @Test("an uncompressed 1080p30 camera needs more room raw than as MJPEG")
    func estimates() {
        let yuyv = DeviceFormat(pixelFormat: .yuyv, dimensions: Dimensions(width: 1920, height: 1080), frameRateRanges: [])
        let rate = FrameDuration(framesPerSecond: 30)!
        let raw = AgentRecordings.bytesPerSecond(.raw, format: yuyv, frameDuration: rate)
        #expect(raw >= 1920 * 2 * 1080 * 30)
        #expect(AgentRecordings.bytesPerSecond(.mjpeg, format: yuyv, frameDuration: rate) < raw / 2)
    }

    @Test("names that would leave the recordings folder are refused")
    func names() {
        #expect(AgentRecordings.isSafeName("20261125-203148-recording"))
        #expect(AgentRecordings.isSafeName("cam0-agent-1_synthetic_SYN0001.mkv"))
        for bad in ["", "../x", "a/b", ".hidden", "é", String(repeating: "a", count: 129)] { #expect(!AgentRecordings.isSafeName(bad), "\(bad)") }
    }
}

/// One camera's track written through the agent's own path (frame table, timecodes, segments), with no
/// process and no network: frames handed in as a stream would, then the files read back.
@Suite("On-host recording: a track's files", .timeLimit(.minutes(1)))
struct TrackFilesTests {
    static func frame(_ index: Int, at time: Int64, format: DeviceFormat) -> CapturedFrame {
        var bytes = ByteBufferAllocator().buffer(capacity: Int(format.bytesPerLine * format.dimensions.height))
        bytes.writeRepeatingByte(UInt8(truncatingIfNeeded: index * 10), count: Int(format.bytesPerLine * format.dimensions.height))
        return CapturedFrame(
            deviceID: "cam", sequence: UInt64(index), timestamp: time, timestampMarks: .startOfExposure, format: format, bytes: bytes,
            metadata: CaptureMetadata(settings: CameraSettings()))
    }

    @Test("gaps, a duplicate stamped before its neighbour, and segments: every frame stored, the table in grid order, each file readable")
    func writesTrack() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("camrig-track-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let format = DeviceFormat(pixelFormat: .grey, dimensions: Dimensions(width: 64, height: 48), frameRateRanges: [], bytesPerLine: 64)
        let period = 33_333_333.0
        let grid = RecordingGrid(start: 10_000_000_000, period: period, count: 12)
        let plan = TrackRecorder.Plan(
            deviceID: "cam", stem: "cam0-test", codec: .raw, format: format, jpegQuality: 90, grid: grid,
            clock: RigClockMapping(agentReference: 0, rigReference: 5, rigPerAgent: 1, uncertainty: 100, uncertaintyGrowthPPM: 0),
            frameDuration: FrameDuration(framesPerSecond: 30)!, segmentBytes: 12_000, folder: folder, metadata: [])
        let (ended, finish) = AsyncStream.makeStream(of: WireRecordedTrack.self)
        let recorder = try TrackRecorder(plan: plan) { finish.yield($0) }
        // Instants 0, 1, 2, then 5 (3 and 4 never came), a duplicate of 5 stamped 0.2 ms before it, then 6…11.
        var times = [0, 1, 2, 5].map { grid.instant($0) }
        times.append(grid.instant(5) - 200_000)
        times += (6...11).map { grid.instant($0) + 1_000 }
        for (index, time) in times.enumerated() { recorder.deliver(Self.frame(index, at: time, format: format)) }
        recorder.deliver(Self.frame(99, at: grid.instant(12), format: format))  // after the end: closes the track
        var iterator = ended.makeAsyncIterator()
        let track = try #require(await iterator.next())
        #expect(track.state == .complete, "\(track.error)")
        #expect(track.frames == 11 && track.gaps == 2 && track.duplicates == 1)
        #expect(track.firstGridIndex == 0 && track.lastGridIndex == 11)
        let videos = track.files.map(\.name).filter { $0.hasSuffix(".mkv") }
        #expect(videos.count > 1, "3 KB frames and 12 KB segments make several files: \(videos)")
        let perFile = try videos.map { try MediaFile.frameCount(folder.appendingPathComponent($0).path) }
        #expect(perFile.reduce(0, +) == 11, "every frame is in a video: \(perFile)")
        let csv = try String(contentsOf: folder.appendingPathComponent("cam0-test.frames.csv"), encoding: .utf8)
        let rows = csv.split(separator: "\n").dropFirst().map { $0.split(separator: ",", omittingEmptySubsequences: false) }
        #expect(rows.map { Int($0[0])! } == [0, 1, 2, 3, 4, 5, 5, 6, 7, 8, 9, 10, 11], "one row per instant, the duplicate beside its instant")
        #expect(rows.filter { $0[7] == "gap" }.map { Int($0[0])! } == [3, 4])
        #expect(rows.filter { $0[7] == "duplicate" }.count == 1)
        #expect(rows[0][3] == "\(grid.instant(0) + 5)", "rig-clock times through the mapping")
        // The frame numbers run across the segments, and each segment's first frame follows the last one's.
        let segmentsOfFrames = rows.compactMap { row in Int(row[2]).map { ($0, Int(row[1])!) } }
        #expect(segmentsOfFrames.map(\.1) == Array(0..<11))
        #expect(Dictionary(grouping: segmentsOfFrames, by: \.0).mapValues(\.count).sorted { $0.key < $1.key }.map(\.value) == perFile)
        let timecodes = try String(contentsOf: folder.appendingPathComponent("cam0-test.timecodes.txt"), encoding: .utf8)
        #expect(timecodes.split(separator: "\n").count == 12, "the header and one line per stored frame")
    }

    @Test("segments by length: a new file every N frames, whatever their size")
    func segmentsByLength() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("camrig-track-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let format = DeviceFormat(pixelFormat: .grey, dimensions: Dimensions(width: 64, height: 48), frameRateRanges: [], bytesPerLine: 64)
        let grid = RecordingGrid(start: 1_000_000_000, period: 33_333_333.0, count: 11)
        var plan = TrackRecorder.Plan(
            deviceID: "cam", stem: "cam0-long", codec: .raw, format: format, jpegQuality: 90, grid: grid, clock: .identity,
            frameDuration: FrameDuration(framesPerSecond: 30)!, segmentBytes: 1 << 30, folder: folder, metadata: [])
        plan.segmentFrames = 4
        let (ended, finish) = AsyncStream.makeStream(of: WireRecordedTrack.self)
        let recorder = try TrackRecorder(plan: plan) { finish.yield($0) }
        for index in 0..<11 { recorder.deliver(Self.frame(index, at: grid.instant(Int64(index)), format: format)) }
        var iterator = ended.makeAsyncIterator()
        let track = try #require(await iterator.next())
        let videos = track.files.map(\.name).filter { $0.hasSuffix(".mkv") }
        #expect(videos == ["cam0-long.mkv", "cam0-long.001.mkv", "cam0-long.002.mkv"])
        #expect(try videos.map { try MediaFile.frameCount(folder.appendingPathComponent($0).path) } == [4, 4, 3])
    }
}
