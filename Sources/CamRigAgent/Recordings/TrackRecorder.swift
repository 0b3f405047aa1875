import CamRigCapture
import CamRigClock
import CamRigDeviceModel
import CamRigDevices
import CamRigFiles
import CamRigImage
import CamRigMedia
import CamRigWire
import CamRigWireModel
import Crypto
import Dispatch
import Foundation
import NIOConcurrencyHelpers
import NIOCore

/// One camera's part of an on-host recording: takes the device's frames as a stream subscriber, places
/// each on the recording's grid, and writes it to the track's Matroska file with a row in its sidecars.
///
/// A thin shell over two pure machines: `TrackIntake` decides, under the lock, which frames the stream
/// hands over (at most `maxQueued` wait, about a second at 30 fps; a frame beyond that is not written,
/// and its grid index becomes a gap, counted, never a shift), and `TrackMachine` decides, on the track's
/// writer queue, where each goes and when the track closes. The queue is the one home of the track's
/// files and machine: encoding and writing block, so they run there, never on the stream's thread, an
/// event loop or the cooperative pool. Each track has its own so that one camera's encoder never holds
/// up another's.
final class TrackRecorder: FrameSink, @unchecked Sendable {
    struct Plan: Sendable {
        var deviceID: String
        var stem: String
        var codec: WireRecordingCodec
        var format: DeviceFormat
        var jpegQuality: Int32
        var grid: RecordingGrid
        var clock: RigClockMapping
        var frameDuration: FrameDuration
        var segmentBytes: Int64
        /// A new segment after this many frames too (0: no limit by length).
        var segmentFrames: Int64 = 0
        var folder: URL
        var metadata: [(String, String)]
    }

    /// What other threads read: counters for progress, the stream id, the outcome once finished.
    struct Snapshot: Sendable {
        var streamID = ""
        var frames: UInt64 = 0
        var gaps: UInt64 = 0
        var bytes: UInt64 = 0
        var error: String?
        var intake: TrackIntake
        var finished: WireRecordedTrack?
        /// When the stream last handed the track a frame of the recording (agent clock).
        var lastDelivery: Int64 = 0
    }

    let plan: Plan
    /// A recording's stream belongs to no client connection.
    let connection: UInt64 = 0
    private let snapshot: NIOLockedValueBox<Snapshot>
    private let queue: DispatchQueue
    /// Touched only on `queue`: the writer's machine and files.
    private var machine: TrackMachine
    private var files: TrackFiles?
    private let onFinish: @Sendable (WireRecordedTrack) -> Void

    /// Frames that may wait in the driver's own buffers; more are copied.
    static let lentFrames = 2

    init(plan: Plan, maxQueued: Int = 32, onFinish: @escaping @Sendable (WireRecordedTrack) -> Void) throws {
        self.plan = plan
        self.machine = TrackMachine(grid: plan.grid)
        self.snapshot = NIOLockedValueBox(Snapshot(intake: TrackIntake(maxQueued: maxQueued, lentFrames: Self.lentFrames)))
        self.onFinish = onFinish
        queue = DispatchQueue(label: "camrig.recording.\(plan.stem)", qos: .userInitiated)
        files = try TrackFiles(plan: plan)
    }

    var streamID: String { snapshot.withLockedValue { $0.streamID } }
    func assign(streamID: String) { snapshot.withLockedValue { $0.streamID = streamID } }
    var progress: Snapshot { snapshot.withLockedValue { $0 } }

    /// From the device's stream task: queues the frame for the track's queue, or lets it go (a gap).
    func deliver(_ frame: CapturedFrame) {
        // Frames well before the first instant are not the recording's: not even queued.
        if frame.exposureStart < plan.grid.start &- Int64(plan.grid.period) { return }
        let now = HostClock.monotonicNow()
        let admission = snapshot.withLockedValue { state -> TrackIntake.Admission in
            state.lastDelivery = now
            return state.intake.admit()
        }
        var kept = frame
        switch admission {
        case .refuse: return
        case .keep: break
        case .copy: kept.bytes = ByteBuffer(bytes: frame.bytes.readableBytesView)
        }
        let frame = kept
        queue.async {
            self.snapshot.withLockedValue { $0.intake.taken() }
            self.write(frame)
        }
    }

    /// The device's stream ended: the track closes with what it has; a stream that ended for another
    /// reason than a stop is the track's error.
    func end(reason: WireStreamEndReason, message: String) {
        queue.async {
            let error = reason == .stopped ? nil : "the camera's stream ended (\(reason)): \(message)"
            self.finish(error: error, trailing: self.machine.close())
        }
    }

    /// Records no grid index after the one nearest `agentTime` (a stop); the track closes at its next frame.
    func stop(at agentTime: Int64) {
        queue.async { self.finish(error: nil, trailing: self.machine.stop(at: agentTime)) }
    }

    /// Closes the track now (the recording was stopped or its time is up); idempotent.
    func close(error: String? = nil) {
        queue.async { self.finish(error: error, trailing: self.machine.close()) }
    }

    private func write(_ frame: CapturedFrame) {
        switch machine.frame(exposureStart: frame.exposureStart) {
        case .ignore:
            return
        case .close(let trailing):
            finish(error: nil, trailing: trailing)
        case .write(let index, let gaps, let duplicate, let thenClose):
            guard let files else { return }
            do {
                for gap in gaps { try files.gap(index: gap, rigTime: plan.clock.rigTime(ofAgent: plan.grid.instant(gap))) }
                let rigTime = plan.clock.rigTime(ofAgent: frame.exposureStart)
                try files.frame(
                    frame, index: index, rigTime: rigTime,
                    uncertainty: plan.clock.uncertainty(atAgent: frame.exposureStart, stamp: frame.exposureStartUncertainty),
                    duplicate: duplicate)
                let grid = machine.grid
                snapshot.withLockedValue {
                    $0.frames = UInt64(grid.frames)
                    $0.gaps = UInt64(grid.gaps)
                    $0.bytes = UInt64(files.bytes)
                }
                if let thenClose { finish(error: nil, trailing: thenClose) }
            } catch {
                // The machine may have closed already (this was the last instant's frame): its gaps are these.
                finish(error: "\(error)", trailing: thenClose ?? machine.close())
            }
        }
    }

    /// The machine closed the track (`trailing` are the indexes it left as gaps); nil: it did not close now.
    private func finish(error: String?, trailing: Range<Int64>?) {
        guard let trailing, let files else { return }
        self.files = nil
        snapshot.withLockedValue { $0.intake.close() }
        var failure = error
        let grid = machine.grid
        var track = WireRecordedTrack()
        track.deviceID = plan.deviceID
        track.fileStem = plan.stem
        track.codec = plan.codec
        track.format = WireFormat(plan.format)
        do {
            for gap in trailing { try files.gap(index: gap, rigTime: plan.clock.rigTime(ofAgent: plan.grid.instant(gap))) }
            try files.close()
        } catch {
            failure = failure ?? "\(error)"
        }
        track.files = files.recordedFiles()
        track.frames = UInt64(grid.frames)
        track.gaps = UInt64(grid.gaps)
        track.duplicates = UInt64(grid.duplicates)
        track.firstGridIndex = grid.firstIndex ?? -1
        track.lastGridIndex = grid.lastIndex ?? -1
        track.state = failure == nil ? .complete : .failed
        track.error = failure ?? ""
        do {
            try TrackSummary(track, grid: plan.grid, clock: plan.clock, cutShort: false).write(to: plan.folder)
        } catch {
            track.state = .failed
            track.error = track.error.isEmpty ? "cannot write the track's summary: \(error)" : track.error
        }
        snapshot.withLockedValue {
            $0.frames = track.frames
            $0.gaps = track.gaps
            $0.error = failure
            $0.finished = track
        }
        onFinish(track)
    }
}

/// A track's files while it is being recorded: the video segments, the frame table and the timecodes.
/// Used on the track's queue only.
final class TrackFiles {
    private let plan: TrackRecorder.Plan
    private var writer: MediaWriter?
    private var segment = 0
    private var segmentNames: [String] = []
    private var closedBytes: Int64 = 0
    private var framesWritten: Int64 = 0
    private var framesInSegment: Int64 = 0
    private let table: FileHandle
    private let timecodes: FileHandle
    private var pendingTable = ""
    private var pendingTimecodes = ""
    private var lastSync: Int64?
    /// The last block's time, in rig-clock nanoseconds.
    private var lastBlockTime: Int64?

    static func segmentName(stem: String, segment: Int) -> String {
        segment == 0 ? "\(stem).mkv" : "\(stem).\(String(format: "%03d", segment)).mkv"
    }

    init(plan: TrackRecorder.Plan) throws {
        self.plan = plan
        table = try Self.create(plan.folder.appendingPathComponent("\(plan.stem).frames.csv"), header: RecordedFrameTable.header + "\n")
        timecodes = try Self.create(plan.folder.appendingPathComponent("\(plan.stem).timecodes.txt"), header: RecordedTimecodes.header)
        writer = try openSegment()
    }

    private static func create(_ url: URL, header: String) throws -> FileHandle {
        guard FileManager.default.createFile(atPath: url.path, contents: Data(header.utf8)) else {
            throw MediaFileError("cannot create \(url.path)")
        }
        let handle = try FileHandle(forWritingTo: url)
        try handle.seekToEnd()
        return handle
    }

    /// The format frames of `format` are written in: 4:2:0 planar frames packed as YUYV (the writer takes
    /// packed rows), others as they come.
    static func writtenFormat(_ format: DeviceFormat) -> DeviceFormat {
        guard format.pixelFormat.isPlanarYUV420 else { return format }
        return DeviceFormat(pixelFormat: .yuyv, dimensions: format.dimensions, frameRateRanges: format.frameRateRanges)
    }

    private func openSegment() throws -> MediaWriter {
        let name = Self.segmentName(stem: plan.stem, segment: segment)
        let written = Self.writtenFormat(plan.format)
        var options = MediaWriter.Options(
            codec: Self.mediaCodec(plan.codec, format: plan.format),
            pixelFormat: plan.codec == .mjpeg && written.pixelFormat != .mjpeg ? PixelFormat.mjpeg.rawValue : written.pixelFormat.rawValue,
            width: Int(written.dimensions.width), height: Int(written.dimensions.height),
            bytesPerLine: Int(written.bytesPerLine),
            rate: (Int32(plan.frameDuration.denominator), Int32(plan.frameDuration.numerator)))
        options.metadata = plan.metadata + [("CAMRIG_SEGMENT", "\(segment)")]
        let writer = try MediaWriter(path: plan.folder.appendingPathComponent(name).path, options: options)
        segmentNames.append(name)
        return writer
    }

    static func mediaCodec(_ codec: WireRecordingCodec, format: DeviceFormat) -> MediaCodec {
        switch codec {
        case .ffv1: .ffv1
        case .h264: .h264
        case .raw: .raw
        default: .mjpeg  // COPY and MJPEG: JPEG images (the camera's, or made here)
        }
    }

    var bytes: Int64 { closedBytes + (writer?.bytesWritten ?? 0) }

    static func fileSize(_ path: String) -> Int64 {
        ((try? FileManager.default.attributesOfItem(atPath: path)[.size]) as? NSNumber)?.int64Value ?? 0
    }

    func frame(_ frame: CapturedFrame, index: Int64, rigTime: Int64, uncertainty: Int64, duplicate: Bool) throws {
        guard var writer else { throw MediaFileError("the track's files are closed") }
        if writer.bytesWritten >= plan.segmentBytes || (plan.segmentFrames > 0 && framesInSegment >= plan.segmentFrames) {
            try writer.close()
            closedBytes += Self.fileSize(writer.path)
            segment += 1
            framesInSegment = 0
            writer = try openSegment()
            self.writer = writer
        }
        // Matroska's blocks count milliseconds and must increase: a frame exposed within a millisecond of
        // the one before (or before it: a duplicate after jitter) is stored a millisecond after it; the
        // frame table keeps its exact time.
        let blockTime = lastBlockTime.map { max(rigTime, $0 + 1_000_000) } ?? rigTime
        lastBlockTime = blockTime
        guard let frame = PhotoProcessing.packed(frame) else {
            throw MediaFileError("a \(frame.format.pixelFormat) frame of \(frame.deviceID) is shorter than its format")
        }
        if plan.codec == .mjpeg && frame.format.pixelFormat != .mjpeg {
            let jpeg = try PhotoEncoder.jpeg(frame, quality: plan.jpegQuality)
            try jpeg.withUnsafeReadableBytes { try writer.write($0, at: blockTime) }
        } else {
            try frame.bytes.withUnsafeReadableBytes { try writer.write($0, at: blockTime) }
        }
        pendingTable += RecordedFrameTable.Row(
            gridIndex: Int(index), frame: Int(framesWritten), segment: segment, rigTimeNs: rigTime, uncertaintyNs: uncertainty,
            sensorTimestampNs: frame.timestamp, marks: frame.timestampMarks.rawValue, duplicate: duplicate
        ).line
        pendingTimecodes += RecordedTimecodes.line(rigTimeNs: rigTime)
        framesWritten += 1
        framesInSegment += 1
        try flushSidecars(at: rigTime)
    }

    func gap(index: Int64, rigTime: Int64) throws {
        pendingTable += RecordedFrameTable.Row(missing: Int(index), rigTimeNs: rigTime, flag: .gap).line
    }

    /// Hands the sidecars' new rows to the OS after every frame (a crash of the agent keeps them), and to
    /// the disk every second of frames (as the video file does).
    private func flushSidecars(at rigTime: Int64) throws {
        try table.write(contentsOf: Data(pendingTable.utf8))
        try timecodes.write(contentsOf: Data(pendingTimecodes.utf8))
        pendingTable = ""
        pendingTimecodes = ""
        if let lastSync, rigTime - lastSync < 1_000_000_000 { return }
        lastSync = rigTime
        try table.synchronize()
        try timecodes.synchronize()
    }

    func close() throws {
        defer {
            try? table.close()
            try? timecodes.close()
        }
        if let writer {
            try writer.close()
            closedBytes += Self.fileSize(writer.path)
            self.writer = nil
        }
        try table.write(contentsOf: Data(pendingTable.utf8))
        try timecodes.write(contentsOf: Data(pendingTimecodes.utf8))
        pendingTable = ""
        pendingTimecodes = ""
        try table.synchronize()
        try timecodes.synchronize()
    }

    /// The track's files with their sizes and checksums (the videos, then the sidecars).
    func recordedFiles() -> [WireRecordedFile] {
        TrackSummary.files(in: plan.folder, names: segmentNames + ["\(plan.stem).frames.csv", "\(plan.stem).timecodes.txt"])
    }
}

/// `STEM.json`, written when a track closes (or is closed by the next start after a crash): what the
/// track holds, for people and for the agent after a restart.
struct TrackSummary: Codable, Sendable {
    var deviceID: String
    var stem: String
    var codec: String
    var state: String
    var frames: UInt64
    var gaps: UInt64
    var duplicates: UInt64
    var firstGridIndex: Int64
    var lastGridIndex: Int64
    var gridStartAgentNs: Int64
    var gridPeriodAgentNs: Double
    var gridCount: Int64
    var clock: Clock
    var files: [File]
    var error: String?
    var cutShort: Bool
    var format: String
    var width: UInt32
    var height: UInt32

    struct Clock: Codable, Sendable {
        var agentReferenceNs: Int64
        var rigReferenceNs: Int64
        var rigPerAgent: Double
        var uncertaintyNs: Double
        var uncertaintyGrowthPpm: Double
    }

    struct File: Codable, Sendable {
        var name: String
        var size: UInt64
        var sha256: String
    }

    init(_ track: WireRecordedTrack, grid: RecordingGrid, clock: RigClockMapping, cutShort: Bool) {
        deviceID = track.deviceID
        stem = track.fileStem
        codec = track.codec.name
        state = cutShort ? WireRecordingState.cutShort.name : track.state.name
        frames = track.frames
        gaps = track.gaps
        duplicates = track.duplicates
        firstGridIndex = track.firstGridIndex
        lastGridIndex = track.lastGridIndex
        gridStartAgentNs = grid.start
        gridPeriodAgentNs = grid.period
        gridCount = grid.count
        self.clock = Clock(
            agentReferenceNs: clock.agentReference, rigReferenceNs: clock.rigReference, rigPerAgent: clock.rigPerAgent,
            uncertaintyNs: clock.uncertainty, uncertaintyGrowthPpm: clock.uncertaintyGrowthPPM)
        files = track.files.map { File(name: $0.name, size: $0.size, sha256: $0.sha256.map { String(format: "%02x", $0) }.joined()) }
        error = track.error.isEmpty ? nil : track.error
        self.cutShort = cutShort
        format = PixelFormat(rawValue: track.format.pixelFormat).fourCC
        width = track.format.dimensions.width
        height = track.format.dimensions.height
    }

    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        return encoder
    }()

    func write(to folder: URL) throws {
        try DurableFile.write(try Self.encoder.encode(self), to: folder.appendingPathComponent("\(stem).json"))
    }

    /// Sizes and SHA-256 of `names` in `folder` (files that do not exist are left out).
    static func files(in folder: URL, names: [String]) -> [WireRecordedFile] {
        names.compactMap { name in
            let url = folder.appendingPathComponent(name)
            guard let digest = try? sha256(of: url) else { return nil }
            var file = WireRecordedFile()
            file.name = name
            file.size = digest.size
            file.sha256 = Data(digest.hash)
            return file
        }
    }

    static func sha256(of url: URL) throws -> (hash: [UInt8], size: UInt64) {
        let handle = try FileHandle(forReadingFrom: url)
        defer { try? handle.close() }
        var hasher = SHA256()
        var size: UInt64 = 0
        while let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty {
            hasher.update(data: chunk)
            size += UInt64(chunk.count)
        }
        return (Array(hasher.finalize()), size)
    }
}
