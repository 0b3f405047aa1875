import CMediaFile
import Foundation

/// How a recording's frames are stored in its Matroska file.
public enum MediaCodec: String, Sendable, CaseIterable, Codable {
    /// Complete JPEG images (the camera's MJPEG, or JPEGs made on the host), stored as they are.
    case mjpeg
    /// H.264 access units from the camera, stored as they are.
    case h264Packets = "h264-packets"
    /// Raw frames encoded losslessly (FFV1, intra only).
    case ffv1
    /// Raw frames encoded with H.264 (the host's V4L2 memory-to-memory encoder, or libx264).
    case h264
    /// Raw frames stored byte for byte.
    case raw

    var c: camrig_media_codec {
        switch self {
        case .mjpeg: CAMRIG_MEDIA_MJPEG
        case .h264Packets: CAMRIG_MEDIA_H264_PACKETS
        case .ffv1: CAMRIG_MEDIA_FFV1
        case .h264: CAMRIG_MEDIA_H264
        case .raw: CAMRIG_MEDIA_RAW
        }
    }

    init?(_ codec: camrig_media_codec) {
        switch codec {
        case CAMRIG_MEDIA_MJPEG: self = .mjpeg
        case CAMRIG_MEDIA_H264_PACKETS: self = .h264Packets
        case CAMRIG_MEDIA_FFV1: self = .ffv1
        case CAMRIG_MEDIA_H264: self = .h264
        case CAMRIG_MEDIA_RAW: self = .raw
        default: return nil
        }
    }

    /// Whether every frame stands alone (a file cut anywhere, or trimmed to any frame, stays decodable).
    public var isIntraOnly: Bool { self != .h264 && self != .h264Packets }
}

/// What went wrong with a media file, in FFmpeg's words where it said any.
public struct MediaFileError: Error, CustomStringConvertible, Sendable {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// Calls a C function that fills an error buffer; returns its result and the message.
@inline(__always)
private func withErrorBuffer<T>(_ body: (UnsafeMutablePointer<CChar>, Int) -> T) -> (T, String) {
    var buffer = [CChar](repeating: 0, count: 512)
    let result = buffer.withUnsafeMutableBufferPointer { body($0.baseAddress!, $0.count) }
    let message = buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    return (result, message)
}

/// One Matroska file being written, frame by frame (FFmpeg's libavformat, and libavcodec where the
/// codec encodes). Not thread-safe: one writer belongs to one thread at a time.
///
/// The file is crash-safe: the muxer's output reaches the OS after every frame and the disk at least
/// every `syncEvery`, so a file whose writer was killed stays playable up to its last whole cluster,
/// and `MediaFile.repair` closes it.
public final class MediaWriter {
    public struct Options: Sendable {
        public var codec: MediaCodec
        /// The input frames' V4L2 fourcc.
        public var pixelFormat: UInt32
        public var width: Int
        public var height: Int
        public var bytesPerLine: Int
        /// The grid's frame rate, as an exact fraction.
        public var rate: (numerator: Int32, denominator: Int32)
        public var clusterMilliseconds: Int32 = 1000
        public var syncEveryMilliseconds: Int32 = 1000
        public var threads: Int32 = 1
        /// Written as the file's global tags.
        public var metadata: [(String, String)] = []

        public init(codec: MediaCodec, pixelFormat: UInt32, width: Int, height: Int, bytesPerLine: Int, rate: (numerator: Int32, denominator: Int32)) {
            self.codec = codec
            self.pixelFormat = pixelFormat
            self.width = width
            self.height = height
            self.bytesPerLine = bytesPerLine
            self.rate = rate
        }
    }

    private var handle: OpaquePointer?
    public let path: String

    /// Creates `path` (never overwriting a file) and writes the header.
    public init(path: String, options: Options) throws {
        self.path = path
        let metadata = options.metadata.flatMap { [$0.0, $0.1] }
        var cStrings = metadata.map { strdup($0) }
        cStrings.append(nil)
        defer { for string in cStrings { free(string) } }
        let (handle, message) = path.withCString { cPath in
            cStrings.withUnsafeBufferPointer { tags in
                tags.baseAddress!.withMemoryRebound(to: UnsafePointer<CChar>?.self, capacity: tags.count) { tags in
                    var c = camrig_media_writer_options()
                    c.path = cPath
                    c.codec = options.codec.c
                    c.pixel_format = options.pixelFormat
                    c.width = Int32(options.width)
                    c.height = Int32(options.height)
                    c.bytes_per_line = Int32(options.bytesPerLine)
                    c.rate_num = options.rate.numerator
                    c.rate_den = options.rate.denominator
                    c.cluster_ms = options.clusterMilliseconds
                    c.sync_every_ms = options.syncEveryMilliseconds
                    c.threads = options.threads
                    c.metadata = metadata.isEmpty ? nil : tags
                    return withErrorBuffer { camrig_media_writer_open(&c, $0, $1) }
                }
            }
        }
        guard let handle else { throw MediaFileError(message.isEmpty ? "cannot write \(path)" : message) }
        self.handle = handle
    }

    deinit {
        // Dropped without `close()` (an error on the way): closed here, so the file gets its index.
        if let handle { _ = camrig_media_writer_close(handle, nil, 0) }
    }

    /// Adds one frame at `nanoseconds` (which must increase from frame to frame).
    public func write(_ bytes: UnsafeRawBufferPointer, at nanoseconds: Int64) throws {
        guard let handle else { throw MediaFileError("\(path) is closed") }
        let (status, message) = withErrorBuffer {
            camrig_media_writer_write(handle, bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), bytes.count, nanoseconds, $0, $1)
        }
        if status < 0 { throw MediaFileError(message) }
    }

    /// Bytes in the file so far.
    public var bytesWritten: Int64 { handle.map { camrig_media_writer_bytes($0) } ?? 0 }

    /// Flushes the encoder, writes the index and trailer, and syncs the file to disk.
    public func close() throws {
        guard let handle else { return }
        self.handle = nil
        let (status, message) = withErrorBuffer { camrig_media_writer_close(handle, $0, $1) }
        if status < 0 { throw MediaFileError(message) }
    }
}

/// A recorded file read frame by frame in file order.
public final class MediaReader {
    public struct Info: Sendable, Equatable {
        public var width: Int
        public var height: Int
        public var codec: MediaCodec
        /// For raw files: the fourcc they were written with.
        public var pixelFormat: UInt32
        public var rate: (numerator: Int32, denominator: Int32)

        public static func == (a: Info, b: Info) -> Bool {
            a.width == b.width && a.height == b.height && a.codec == b.codec && a.pixelFormat == b.pixelFormat
                && a.rate.numerator == b.rate.numerator && a.rate.denominator == b.rate.denominator
        }
    }

    private let handle: OpaquePointer
    public let info: Info
    /// The file's path, or the name of the source it is read from.
    public let path: String
    /// The source read through, kept alive as long as the reader (nil for a file opened by path).
    private let source: SourceBox?

    public init(path: String) throws {
        self.path = path
        source = nil
        var cInfo = camrig_media_info()
        let (handle, message) = withErrorBuffer { camrig_media_reader_open(path, &cInfo, $0, $1) }
        (self.handle, info) = try Self.opened(handle, cInfo, message, path: path)
    }

    /// Reads a recorded file from `source` (an object in a store, say) instead of a path; `name` names it
    /// in errors. A failure of the source's own is thrown as it is, not as the reader's.
    public init(source: any MediaSource, name: String) throws {
        path = name
        let box = SourceBox(source)
        self.source = box
        var cSource = camrig_media_source(
            context: Unmanaged.passUnretained(box).toOpaque(), size: source.size,
            read: { context, offset, buffer, size in
                let box = Unmanaged<SourceBox>.fromOpaque(context!).takeUnretainedValue()
                do {
                    return Int32(try box.source.read(at: offset, into: UnsafeMutableRawBufferPointer(start: buffer, count: Int(size))))
                } catch {
                    box.failure = error
                    return -1
                }
            })
        var cInfo = camrig_media_info()
        let (handle, message) = withErrorBuffer { camrig_media_reader_open_source(&cSource, name, &cInfo, $0, $1) }
        if handle == nil, let failure = box.failure { throw failure }
        (self.handle, info) = try Self.opened(handle, cInfo, message, path: name)
    }

    private static func opened(_ handle: OpaquePointer?, _ cInfo: camrig_media_info, _ message: String, path: String) throws -> (OpaquePointer, Info) {
        guard let handle, let codec = MediaCodec(cInfo.codec) else {
            if let handle { camrig_media_reader_close(handle) }
            throw MediaFileError(message.isEmpty ? "cannot read \(path)" : message)
        }
        return (
            handle,
            Info(width: Int(cInfo.width), height: Int(cInfo.height), codec: codec, pixelFormat: cInfo.pixel_format, rate: (cInfo.rate_num, cInfo.rate_den))
        )
    }

    deinit { camrig_media_reader_close(handle) }

    /// The next frame's stored bytes (a JPEG for MJPEG files) and time, or nil at the end.
    public func next() throws -> (bytes: [UInt8], nanoseconds: Int64)? {
        try advance().map { packet in (Array(packet.bytes), packet.nanoseconds) }
    }

    /// Skips the next frame; false at the end.
    public func skip() throws -> Bool {
        try advance() != nil
    }

    /// Moves to the next frame: its bytes (valid until the next move) and time, or nil at the end.
    private func advance() throws -> (bytes: UnsafeBufferPointer<UInt8>, nanoseconds: Int64)? {
        var data: UnsafePointer<UInt8>?
        var size = 0
        var pts: Int64 = 0
        let (status, message) = withErrorBuffer { camrig_media_reader_next(handle, &data, &size, &pts, $0, $1) }
        if status < 0 {
            if let failure = source?.failure { throw failure }
            throw MediaFileError("\(path): \(message)")
        }
        guard status > 0 else { return nil }
        return (UnsafeBufferPointer(start: data, count: data == nil ? 0 : size), pts)
    }

    /// The frame last returned by `next` (or skipped) as packed RGB.
    public func decodeRGB() throws -> [UInt8] {
        var rgb = [UInt8](repeating: 0, count: info.width * info.height * 3)
        let (status, message) = withErrorBuffer { error, size in
            rgb.withUnsafeMutableBufferPointer { camrig_media_reader_decode_rgb(handle, $0.baseAddress, error, size) }
        }
        if status < 0 { throw MediaFileError("\(path): \(message)") }
        return rgb
    }
}

/// A recorded file read from elsewhere than a path, by offset: `MediaReader(source:name:)` reads it
/// through FFmpeg as it would a file, from the thread the reader is used on.
public protocol MediaSource: AnyObject {
    /// The file's size in bytes.
    var size: Int64 { get }
    /// Reads up to `buffer.count` bytes at `offset` into `buffer`: the count read, 0 at the end.
    func read(at offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int
}

/// A reader's source, and the last failure it threw (FFmpeg sees only that a read failed).
private final class SourceBox {
    let source: any MediaSource
    var failure: (any Error)?
    init(_ source: any MediaSource) { self.source = source }
}

public enum MediaFile {
    /// How many frames a file holds, read to its end (a file cut short: up to its last readable frame).
    public static func frameCount(_ path: String) throws -> Int {
        let reader = try MediaReader(path: path)
        var count = 0
        while (try? reader.skip()) == true { count += 1 }
        return count
    }

    /// Rewrites a file cut short (its writer was killed) as a properly closed file at `output`; returns
    /// the frames it kept.
    public static func repair(_ input: String, into output: String) throws -> Int {
        let (frames, message) = withErrorBuffer { camrig_media_repair(input, output, $0, $1) }
        if frames < 0 { throw MediaFileError(message) }
        return Int(frames)
    }

    /// Writes frames `range` (0-based, in file order) of `input` to a new file `output`; returns the
    /// frames written.
    public static func copy(_ input: String, frames range: ClosedRange<Int>, into output: String) throws -> Int {
        let (frames, message) = withErrorBuffer {
            camrig_media_copy_range(input, output, Int64(range.lowerBound), Int64(range.upperBound), $0, $1)
        }
        if frames < 0 { throw MediaFileError(message) }
        return Int(frames)
    }
}
