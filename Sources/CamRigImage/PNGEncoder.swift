import CZlib
import Dispatch

/// Encodes 8-bit greyscale or RGB pixels as a PNG file, deflated with zlib.
///
/// Every row is stored with the PNG "Up" filter (each byte minus the byte above it; the row above
/// the first is taken as zeros): one pass of byte subtractions the compiler vectorizes, which lets
/// deflate shrink camera images about as much as per-row adaptive filtering, at a fraction of the cost.
///
/// Deflate dominates the time, so the image is cut into horizontal stripes of about 1 MiB of
/// filtered data that are deflated concurrently, each as its own run of deflate blocks ended with a
/// sync flush, and joined into one zlib stream whose Adler-32 is combined from the stripes' (the
/// technique pigz uses). A stripe starts without the previous stripe's history, which costs a
/// negligible amount of compression. Stripe boundaries depend only on the image size, so the output
/// bytes do not depend on the number of processors. Each stripe becomes one IDAT chunk.
public enum PNGEncoder {
    /// The pixel layouts the encoder writes, all 8 bits per sample.
    public enum Channels: Sendable, Hashable, CustomStringConvertible {
        /// One grey byte per pixel (PNG colour type 0).
        case grey8
        /// Red, green and blue bytes per pixel (PNG colour type 2).
        case rgb8

        public var bytesPerPixel: Int {
            switch self {
            case .grey8: 1
            case .rgb8: 3
            }
        }

        var colourType: UInt8 {
            switch self {
            case .grey8: 0
            case .rgb8: 2
            }
        }

        public var description: String {
            switch self {
            case .grey8: "8-bit grey"
            case .rgb8: "8-bit RGB"
            }
        }
    }

    /// The PNG file for `height` rows of `width` pixels.
    ///
    /// Row `y` starts at byte `y × bytesPerRow` of `pixels`; bytes past `width × channels.bytesPerPixel`
    /// in a row are padding and are ignored. The last row needs no padding after it.
    /// - Parameter compressionLevel: zlib level, 0 (stored) to 9 (smallest), or -1 for zlib's default.
    public static func encode(
        width: Int,
        height: Int,
        channels: PNGEncoder.Channels,
        pixels: UnsafeRawBufferPointer,
        bytesPerRow: Int,
        compressionLevel: Int32 = 1
    ) throws -> [UInt8] {
        try validate(width: width, height: height, channels: channels, compressionLevel: compressionLevel)
        let rowBytes = width * channels.bytesPerPixel
        guard bytesPerRow >= rowBytes else {
            throw PNGEncoderError.rowStrideTooSmall(
                bytesPerRow: bytesPerRow, width: width, bytesPerPixel: channels.bytesPerPixel)
        }
        let (padded, overflow) = bytesPerRow.multipliedReportingOverflow(by: height - 1)
        let required = overflow ? Int.max : padded.addingReportingOverflow(rowBytes).partialValue
        guard pixels.count >= required, let base = pixels.baseAddress else {
            throw PNGEncoderError.bufferTooShort(
                byteCount: pixels.count, required: required, width: width, height: height, bytesPerRow: bytesPerRow)
        }
        return try encode(width: width, height: height, channels: channels, compressionLevel: compressionLevel) { y, _ in
            (base + y * bytesPerRow).assumingMemoryBound(to: UInt8.self)
        }
    }

    static func validate(width: Int, height: Int, channels: Channels, compressionLevel: Int32) throws {
        guard (1...maximumDimension).contains(width), (1...maximumDimension).contains(height),
            width <= maximumRowBytes / channels.bytesPerPixel
        else {
            throw PNGEncoderError.invalidDimensions(width: width, height: height)
        }
        guard (-1...9).contains(compressionLevel) else {
            throw PNGEncoderError.invalidCompressionLevel(compressionLevel)
        }
    }

    /// PNG stores width and height as 31-bit unsigned numbers.
    static let maximumDimension = Int(Int32.max)
    /// zlib counts bytes in 32 bits; one row must stay well inside that.
    static let maximumRowBytes = 1 << 30

    static let signature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]

    /// Filtered bytes per stripe deflated on its own.
    static let stripeBytes = 1 << 20
    /// Filtered bytes handed to zlib per call.
    static let batchBytes = 1 << 16

    /// Encodes rows supplied by `row`, which may be called concurrently for different rows.
    ///
    /// `row(y, scratch)` returns a pointer to row `y`'s `width × bytesPerPixel` bytes: either into the
    /// caller's own buffer, or `scratch` (that many bytes, private to the call) after filling it. Each row
    /// is requested at most twice (a second time as the row above the first row of a stripe), and must
    /// come out the same both times. Dimensions and level must already be valid.
    static func encode(
        width: Int,
        height: Int,
        channels: Channels,
        compressionLevel: Int32,
        row: (_ y: Int, _ scratch: UnsafeMutablePointer<UInt8>) -> UnsafePointer<UInt8>
    ) throws -> [UInt8] {
        let rowBytes = width * channels.bytesPerPixel
        let rowsPerStripe = max(1, stripeBytes / (rowBytes + 1))
        let stripeCount = (height + rowsPerStripe - 1) / rowsPerStripe

        let stripes = UnsafeMutableBufferPointer<Result<DeflatedStripe, any Error>?>.allocate(capacity: stripeCount)
        stripes.initialize(repeating: nil)
        defer {
            _ = stripes.deinitialize()
            stripes.deallocate()
        }
        // Each iteration writes only its own slot of `stripes`, and `row` may be called concurrently.
        withoutActuallyEscaping(row) { row in
            let shared = UncheckedSendable(value: (stripes: stripes, row: row))
            DispatchQueue.concurrentPerform(iterations: stripeCount) { index in
                let first = index * rowsPerStripe
                let rows = first..<min(height, first + rowsPerStripe)
                shared.value.stripes[index] = Result {
                    try deflateStripe(
                        rows: rows, rowBytes: rowBytes, compressionLevel: compressionLevel,
                        isLast: index == stripeCount - 1, row: shared.value.row)
                }
            }
        }

        let deflated = try stripes.map { try $0!.get() }
        var output = ChunkWriter()
        output.bytes.reserveCapacity(64 + 12 * stripeCount + deflated.reduce(0) { $0 + $1.bytes.count })
        output.bytes += signature
        var header = ChunkWriter.bigEndian(UInt32(width)) + ChunkWriter.bigEndian(UInt32(height))
        header += [8, channels.colourType, 0, 0, 0]
        output.appendChunk("IHDR", header)

        var adler = adler32(0, nil, 0)
        for (index, stripe) in deflated.enumerated() {
            adler = adler32_combine(adler, stripe.adler, stripe.filteredByteCount)
            // zlib header: deflate with a 32 KiB window, no preset dictionary.
            let zlibHeader: [UInt8] = index == 0 ? [0x78, 0x01] : []
            let trailer = index == stripeCount - 1 ? ChunkWriter.bigEndian(UInt32(truncatingIfNeeded: adler)) : []
            output.appendChunk("IDAT", zlibHeader, stripe.bytes, trailer)
        }
        output.appendChunk("IEND")
        return output.bytes
    }

    private struct DeflatedStripe {
        var bytes: [UInt8]
        var adler: UInt
        var filteredByteCount: Int
    }

    /// Filters and raw-deflates `rows`, ending with a sync flush (or, for the last stripe, the final block).
    private static func deflateStripe(
        rows: Range<Int>,
        rowBytes: Int,
        compressionLevel: Int32,
        isLast: Bool,
        row: (_ y: Int, _ scratch: UnsafeMutablePointer<UInt8>) -> UnsafePointer<UInt8>
    ) throws -> DeflatedStripe {
        let filteredRowBytes = rowBytes + 1
        let rowsPerBatch = max(1, batchBytes / filteredRowBytes)

        let stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
        stream.initialize(to: z_stream())
        defer { stream.deallocate() }
        let initResult = deflateInit2_(
            stream, compressionLevel, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY, ZLIB_VERSION,
            Int32(MemoryLayout<z_stream>.size))
        guard initResult == Z_OK else {
            throw PNGEncoderError.zlib(operation: "deflateInit2", code: initResult, message: zlibMessage(stream))
        }
        defer { deflateEnd(stream) }

        let zeros = UnsafeMutablePointer<UInt8>.allocate(capacity: rowBytes)
        zeros.initialize(repeating: 0, count: rowBytes)
        let scratch = UnsafeMutablePointer<UInt8>.allocate(capacity: 2 * rowBytes)
        let batch = UnsafeMutablePointer<UInt8>.allocate(capacity: rowsPerBatch * filteredRowBytes)
        var capacity = Int(deflateBound(stream, UInt(rows.count * filteredRowBytes))) + 64
        var compressed = UnsafeMutablePointer<UInt8>.allocate(capacity: capacity)
        defer {
            zeros.deallocate()
            scratch.deallocate()
            batch.deallocate()
            compressed.deallocate()
        }
        stream.pointee.next_out = compressed
        stream.pointee.avail_out = UInt32(capacity)

        var adler = adler32(0, nil, 0)
        func deflateBatch(count: Int, flush: Int32) throws {
            adler = adler32(adler, batch, UInt32(count))
            stream.pointee.next_in = batch
            stream.pointee.avail_in = UInt32(count)
            while true {
                if stream.pointee.avail_out == 0 {
                    let grown = UnsafeMutablePointer<UInt8>.allocate(capacity: 2 * capacity)
                    grown.update(from: compressed, count: capacity)
                    compressed.deallocate()
                    compressed = grown
                    stream.pointee.next_out = grown + capacity
                    stream.pointee.avail_out = UInt32(capacity)
                    capacity *= 2
                }
                let result = deflate(stream, flush)
                if result == Z_STREAM_END { return }
                guard result == Z_OK || result == Z_BUF_ERROR else {
                    throw PNGEncoderError.zlib(operation: "deflate", code: result, message: zlibMessage(stream))
                }
                if stream.pointee.avail_out > 0 {
                    if flush != Z_FINISH && stream.pointee.avail_in == 0 { return }
                    if result == Z_BUF_ERROR {
                        throw PNGEncoderError.zlib(operation: "deflate", code: result, message: zlibMessage(stream))
                    }
                }
            }
        }

        var previous: UnsafePointer<UInt8> =
            rows.lowerBound == 0 ? UnsafePointer(zeros) : row(rows.lowerBound - 1, scratch + ((rows.lowerBound - 1) & 1) * rowBytes)
        var batchRows = 0
        for y in rows {
            let current = row(y, scratch + (y & 1) * rowBytes)
            let filtered = batch + batchRows * filteredRowBytes
            filtered[0] = 2
            let target = filtered + 1
            for i in 0..<rowBytes {
                target[i] = current[i] &- previous[i]
            }
            previous = current
            batchRows += 1
            if batchRows == rowsPerBatch || y == rows.upperBound - 1 {
                let flush = y < rows.upperBound - 1 ? Z_NO_FLUSH : (isLast ? Z_FINISH : Z_SYNC_FLUSH)
                try deflateBatch(count: batchRows * filteredRowBytes, flush: flush)
                batchRows = 0
            }
        }

        let produced = capacity - Int(stream.pointee.avail_out)
        return DeflatedStripe(
            bytes: Array(UnsafeBufferPointer(start: compressed, count: produced)),
            adler: adler, filteredByteCount: rows.count * filteredRowBytes)
    }

    private static func zlibMessage(_ stream: UnsafeMutablePointer<z_stream>) -> String? {
        stream.pointee.msg.map { String(cString: $0) }
    }
}

/// Hands values to concurrent stripe work whose access pattern is safe by construction.
private struct UncheckedSendable<Value>: @unchecked Sendable {
    let value: Value
}

/// Appends length-prefixed, CRC-checked PNG chunks.
private struct ChunkWriter {
    var bytes: [UInt8] = []

    static func bigEndian(_ value: UInt32) -> [UInt8] {
        [UInt8(value >> 24), UInt8(truncatingIfNeeded: value >> 16), UInt8(truncatingIfNeeded: value >> 8),
         UInt8(truncatingIfNeeded: value)]
    }

    /// A chunk whose data is `parts` joined.
    mutating func appendChunk(_ type: StaticString, _ parts: [UInt8]...) {
        bytes += Self.bigEndian(UInt32(parts.reduce(0) { $0 + $1.count }))
        let typeStart = bytes.count
        type.withUTF8Buffer { bytes += $0 }
        for part in parts {
            bytes += part
        }
        let crc = bytes.withUnsafeBufferPointer { all in
            crc32(0, all.baseAddress! + typeStart, UInt32(all.count - typeStart))
        }
        bytes += Self.bigEndian(UInt32(truncatingIfNeeded: crc))
    }
}

/// Why a PNG could not be written.
public enum PNGEncoderError: Error, Hashable, Sendable, CustomStringConvertible {
    /// Width or height is zero, negative or above PNG's limit of 2147483647, or a row exceeds 1 GiB.
    case invalidDimensions(width: Int, height: Int)
    /// `bytesPerRow` is smaller than one row of pixels.
    case rowStrideTooSmall(bytesPerRow: Int, width: Int, bytesPerPixel: Int)
    /// The pixel buffer ends before the last row does.
    case bufferTooShort(byteCount: Int, required: Int, width: Int, height: Int, bytesPerRow: Int)
    /// The zlib level is outside -1...9.
    case invalidCompressionLevel(Int32)
    /// zlib reported a failure.
    case zlib(operation: String, code: Int32, message: String?)

    public var description: String {
        switch self {
        case .invalidDimensions(let width, let height):
            "PNG dimensions \(width)x\(height) are invalid: width and height must be 1...\(PNGEncoder.maximumDimension), and a row at most 1 GiB"
        case .rowStrideTooSmall(let bytesPerRow, let width, let bytesPerPixel):
            "bytesPerRow \(bytesPerRow) is shorter than one row of \(width) pixels × \(bytesPerPixel) bytes = \(width * bytesPerPixel) bytes"
        case .bufferTooShort(let byteCount, let required, let width, let height, let bytesPerRow):
            "pixel buffer holds \(byteCount) bytes but \(width)x\(height) pixels at \(bytesPerRow) bytes per row need \(required)"
        case .invalidCompressionLevel(let level):
            "compression level \(level) is outside -1...9"
        case .zlib(let operation, let code, let message):
            "zlib \(operation) failed with code \(code)" + (message.map { ": \($0)" } ?? "")
        }
    }
}
