import CImageKernels
import CTurboJPEG
import CamRigDeviceModel
import NIOCore

/// Why a photo could not be encoded.
public struct PhotoEncodingError: Error, CustomStringConvertible {
    public var description: String
}

/// Turns a processed frame into the photo file the agent delivers.
public enum PhotoEncoder {
    /// The photo of `frame` as `output` (already resolved for its format): the frame itself, a JPEG, or a
    /// DNG, with the pixel format its result is labelled with.
    public static func encode(_ frame: CapturedFrame, as output: PhotoOutputType, model: String) throws -> (bytes: ByteBuffer, pixelFormat: PixelFormat) {
        switch output {
        case .frame:
            return (frame.bytes, frame.format.pixelFormat)
        case .jpeg:
            if frame.format.pixelFormat == .mjpeg || frame.format.pixelFormat == .jpeg { return (frame.bytes, .jpeg) }
            return (try jpeg(frame), .jpeg)
        case .dng:
            return (dng(frame, model: model), .dng)
        }
    }

    /// A baseline JPEG (quality 92) of a YUYV, RGB24 or grey frame. YUYV is taken as BT.601 video range
    /// and stretched to the full range JPEG (JFIF) uses, 4:2:2 as the camera sampled it.
    public static func jpeg(_ frame: CapturedFrame, quality: Int32 = 92) throws -> ByteBuffer {
        let width = Int(frame.format.dimensions.width)
        let height = Int(frame.format.dimensions.height)
        let pitch = Int(frame.format.bytesPerLine)
        guard let handle = tjInitCompress() else { throw PhotoEncodingError(description: "libjpeg-turbo could not start a compressor") }
        defer { tjDestroy(handle) }
        var output: UnsafeMutablePointer<UInt8>?
        var size: UInt = 0
        defer { if let output { tjFree(output) } }
        let status: Int32 = frame.bytes.withUnsafeReadableBytes { raw in
            let source = raw.bindMemory(to: UInt8.self)
            switch frame.format.pixelFormat {
            case .yuyv:
                var y = [UInt8](repeating: 0, count: width * height)
                var u = [UInt8](repeating: 0, count: width / 2 * height)
                var v = [UInt8](repeating: 0, count: width / 2 * height)
                y.withUnsafeMutableBufferPointer { y in
                    u.withUnsafeMutableBufferPointer { u in
                        v.withUnsafeMutableBufferPointer { v in
                            camrig_yuyv_to_jpeg_planes(source.baseAddress, pitch, width, height, y.baseAddress, u.baseAddress, v.baseAddress)
                        }
                    }
                }
                return y.withUnsafeBufferPointer { y in
                    u.withUnsafeBufferPointer { u in
                        v.withUnsafeBufferPointer { v in
                            var planes: [UnsafePointer<UInt8>?] = [y.baseAddress, u.baseAddress, v.baseAddress]
                            var strides: [Int32] = [Int32(width), Int32(width / 2), Int32(width / 2)]
                            return tjCompressFromYUVPlanes(
                                handle, &planes, Int32(width), &strides, Int32(height), Int32(TJSAMP_422.rawValue), &output, &size, quality, 0)
                        }
                    }
                }
            case .rgb24, .grey:
                let grey = frame.format.pixelFormat == .grey
                return tjCompress2(
                    handle, source.baseAddress, Int32(width), Int32(pitch), Int32(height),
                    grey ? Int32(TJPF_GRAY.rawValue) : Int32(TJPF_RGB.rawValue), &output, &size,
                    grey ? Int32(TJSAMP_GRAY.rawValue) : Int32(TJSAMP_444.rawValue), quality, 0)
            default:
                return -2
            }
        }
        guard status == 0, let output else {
            let reason = status == -2 ? "JPEG is made from YUYV, RGB or grey frames, not \(frame.format.pixelFormat)" : String(cString: tjGetErrorStr2(handle))
            throw PhotoEncodingError(description: "JPEG of \(frame.deviceID): \(reason)")
        }
        var buffer = ByteBufferAllocator().buffer(capacity: Int(size))
        buffer.writeBytes(UnsafeRawBufferPointer(start: output, count: Int(size)))
        return buffer
    }

    /// A DNG (1.4) of an 8-bit RGGB Bayer frame: one uncompressed 16-bit CFA image with the sensor's
    /// values as they are (black level 0, white level 255), identity colour matrix, neutral white balance.
    public static func dng(_ frame: CapturedFrame, model: String) -> ByteBuffer {
        let width = Int(frame.format.dimensions.width)
        let height = Int(frame.format.dimensions.height)
        let pitch = Int(frame.format.bytesPerLine)
        var tiff = TIFFWriter()
        let imageBytes = width * height * 2
        tiff.entry(254, .long, [0])  // NewSubfileType: the main image
        tiff.entry(256, .long, [Int64(width)])
        tiff.entry(257, .long, [Int64(height)])
        tiff.entry(258, .short, [16])  // BitsPerSample
        tiff.entry(259, .short, [1])  // Compression: none
        tiff.entry(262, .short, [32803])  // PhotometricInterpretation: CFA
        tiff.entry(271, ascii: "CamRig")  // Make
        tiff.entry(272, ascii: model)  // Model
        tiff.stripOffsetsEntry(273)
        tiff.entry(274, .short, [1])  // Orientation
        tiff.entry(277, .short, [1])  // SamplesPerPixel
        tiff.entry(278, .long, [Int64(height)])  // RowsPerStrip
        tiff.entry(279, .long, [Int64(imageBytes)])  // StripByteCounts
        tiff.entry(284, .short, [1])  // PlanarConfiguration: chunky
        tiff.entry(33421, .short, [2, 2])  // CFARepeatPatternDim
        tiff.entry(33422, .byte, [0, 1, 1, 2])  // CFAPattern: R G / G B
        tiff.entry(50706, .byte, [1, 4, 0, 0])  // DNGVersion
        tiff.entry(50707, .byte, [1, 1, 0, 0])  // DNGBackwardVersion
        tiff.entry(50708, ascii: "CamRig \(model)")  // UniqueCameraModel
        tiff.entry(50714, .long, [0])  // BlackLevel
        tiff.entry(50717, .long, [255])  // WhiteLevel
        tiff.entry(50721, .srational, [1, 1, 0, 1, 0, 1, 0, 1, 1, 1, 0, 1, 0, 1, 0, 1, 1, 1])  // ColorMatrix1: identity
        tiff.entry(50728, .rational, [1, 1, 1, 1, 1, 1])  // AsShotNeutral
        tiff.entry(50778, .short, [21])  // CalibrationIlluminant1: D65
        return tiff.finish(imageBytes: imageBytes) { out in
            frame.bytes.withUnsafeReadableBytes { source in
                for row in 0..<height {
                    for column in 0..<width {
                        out.writeInteger(UInt16(source[row * pitch + column]), endianness: .little)
                    }
                }
            }
        }
    }
}

/// A little-endian TIFF with one IFD and one strip, as DNG is.
struct TIFFWriter {
    enum FieldType: UInt16 {
        case byte = 1, ascii = 2, short = 3, long = 4, rational = 5, srational = 10

        var size: Int {
            switch self {
            case .byte, .ascii: 1
            case .short: 2
            case .long: 4
            case .rational, .srational: 8
            }
        }
    }

    private struct Entry {
        var tag: UInt16
        var type: FieldType
        var count: Int
        var value: [UInt8]
        var isStripOffsets = false
    }

    private var entries: [Entry] = []

    /// An entry of numbers (rationals as numerator, denominator pairs), in ascending tag order.
    mutating func entry(_ tag: UInt16, _ type: FieldType, _ values: [Int64]) {
        var bytes: [UInt8] = []
        let width = type == .rational || type == .srational ? 4 : type.size
        for value in values {
            for index in 0..<width { bytes.append(UInt8(truncatingIfNeeded: value >> (8 * index))) }
        }
        entries.append(Entry(tag: tag, type: type, count: type == .rational || type == .srational ? values.count / 2 : values.count, value: bytes))
    }

    mutating func entry(_ tag: UInt16, ascii: String) {
        let bytes = Array(ascii.utf8) + [0]
        entries.append(Entry(tag: tag, type: .ascii, count: bytes.count, value: bytes))
    }

    /// The StripOffsets entry, filled in by `finish`.
    mutating func stripOffsetsEntry(_ tag: UInt16) {
        entries.append(Entry(tag: tag, type: .long, count: 1, value: [0, 0, 0, 0], isStripOffsets: true))
    }

    /// The file: header, IFD, the values too long for their entries, then the strip that `image` writes.
    func finish(imageBytes: Int, image: (inout ByteBuffer) -> Void) -> ByteBuffer {
        let ifdSize = 2 + entries.count * 12 + 4
        var extra: [UInt8] = []
        var extraOffsets: [Int] = []
        let extraStart = 8 + ifdSize
        for entry in entries {
            if entry.value.count > 4 {
                if extra.count % 2 == 1 { extra.append(0) }  // values start on word boundaries
                extraOffsets.append(extraStart + extra.count)
                extra += entry.value
            } else {
                extraOffsets.append(-1)
            }
        }
        if extra.count % 2 == 1 { extra.append(0) }
        let stripOffset = extraStart + extra.count
        var out = ByteBufferAllocator().buffer(capacity: stripOffset + imageBytes)
        out.writeBytes([0x49, 0x49, 42, 0])  // "II", 42
        out.writeInteger(UInt32(8), endianness: .little)
        out.writeInteger(UInt16(entries.count), endianness: .little)
        for (entry, offset) in zip(entries, extraOffsets) {
            out.writeInteger(entry.tag, endianness: .little)
            out.writeInteger(entry.type.rawValue, endianness: .little)
            out.writeInteger(UInt32(entry.count), endianness: .little)
            if entry.isStripOffsets {
                out.writeInteger(UInt32(stripOffset), endianness: .little)
            } else if offset >= 0 {
                out.writeInteger(UInt32(offset), endianness: .little)
            } else {
                out.writeBytes(entry.value + [UInt8](repeating: 0, count: 4 - entry.value.count))
            }
        }
        out.writeInteger(UInt32(0), endianness: .little)  // no next IFD
        out.writeBytes(extra)
        image(&out)
        return out
    }
}

extension PhotoEncoder {
    /// A baseline JPEG of packed RGB pixels (`width` × `height`, 3 bytes each, rows without padding).
    public static func jpeg(rgb: [UInt8], width: Int, height: Int, quality: Int32) throws -> ByteBuffer {
        guard width > 0, height > 0, rgb.count >= width * height * 3 else {
            throw PhotoEncodingError(description: "JPEG of \(width)×\(height) RGB: \(rgb.count) bytes is too few")
        }
        guard let handle = tjInitCompress() else { throw PhotoEncodingError(description: "libjpeg-turbo could not start a compressor") }
        defer { tjDestroy(handle) }
        var output: UnsafeMutablePointer<UInt8>?
        var size: UInt = 0
        defer { if let output { tjFree(output) } }
        let status = rgb.withUnsafeBufferPointer { pixels in
            tjCompress2(
                handle, pixels.baseAddress, Int32(width), Int32(width * 3), Int32(height), Int32(TJPF_RGB.rawValue), &output, &size,
                Int32(TJSAMP_420.rawValue), quality, 0)
        }
        guard status == 0, let output else { throw PhotoEncodingError(description: "JPEG of RGB: \(String(cString: tjGetErrorStr2(handle)))") }
        var buffer = ByteBufferAllocator().buffer(capacity: Int(size))
        buffer.writeBytes(UnsafeRawBufferPointer(start: output, count: Int(size)))
        return buffer
    }
}
