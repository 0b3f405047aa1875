/// A V4L2 pixel format: a FourCC code stored little-endian, as `V4L2_PIX_FMT_*` defines it.
public struct PixelFormat: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt32

    public init(rawValue: UInt32) {
        self.rawValue = rawValue
    }

    /// From four ASCII characters, e.g. `"YUYV"`; `nil` unless exactly four ASCII characters.
    public init?(fourCC: String) {
        let bytes = Array(fourCC.utf8)
        guard bytes.count == 4, bytes.allSatisfy({ $0 < 0x80 }) else { return nil }
        rawValue = UInt32(bytes[0]) | UInt32(bytes[1]) << 8 | UInt32(bytes[2]) << 16 | UInt32(bytes[3]) << 24
    }

    /// The four characters.
    public var fourCC: String {
        let bytes = (0..<4).map { UInt8(truncatingIfNeeded: rawValue >> (8 * $0)) }
        return String(decoding: bytes.map { $0 >= 0x20 && $0 < 0x7F ? $0 : UInt8(ascii: "?") }, as: UTF8.self)
    }

    public var description: String { fourCC }

    public static let yuyv = PixelFormat(fourCC: "YUYV")!
    public static let mjpeg = PixelFormat(fourCC: "MJPG")!
    public static let jpeg = PixelFormat(fourCC: "JPEG")!
    public static let rgb24 = PixelFormat(fourCC: "RGB3")!
    public static let grey = PixelFormat(fourCC: "GREY")!
    public static let bayerRGGB8 = PixelFormat(fourCC: "RGGB")!
    /// 4:2:0 YUV in two planes: a luma plane (`bytesPerLine` apart) then one of interleaved U, V at half the
    /// size each way (libcamera's NV12, the virtual cameras' only format).
    public static let nv12 = PixelFormat(fourCC: "NV12")!
    /// 4:2:0 YUV in three planes: luma, then U, then V, each chroma plane half the size each way and half
    /// `bytesPerLine` apart (V4L2's YU12, libcamera's YUV420).
    public static let yuv420 = PixelFormat(fourCC: "YU12")!
    /// Not a V4L2 format: a photo delivered as a DNG file (Bayer RAW), as CamRig agents make them.
    public static let dng = PixelFormat(fourCC: "DNG ")!

    /// Whether frames are compressed or files (their size varies; no fixed bytes per line).
    public var isCompressed: Bool { self == .mjpeg || self == .jpeg || self == .dng }

    /// Bits per pixel of uncompressed formats CamRig knows, `nil` otherwise.
    public var bitsPerPixel: Int? {
        switch self {
        case .yuyv: 16
        case .rgb24: 24
        case .grey, .bayerRGGB8: 8
        case .nv12, .yuv420: 12
        default: nil
        }
    }

    /// 4:2:0 planar YUV (NV12, YU12): `bytesPerLine` is the luma plane's, and the chroma planes follow it.
    public var isPlanarYUV420: Bool { self == .nv12 || self == .yuv420 }
}

/// Width and height in pixels.
public struct Dimensions: Hashable, Sendable, Comparable, CustomStringConvertible {
    public var width: UInt32
    public var height: UInt32

    public init(width: UInt32, height: UInt32) {
        self.width = width
        self.height = height
    }

    public var pixelCount: Int { Int(width) * Int(height) }

    public static func < (lhs: Dimensions, rhs: Dimensions) -> Bool {
        (lhs.pixelCount, lhs.width) < (rhs.pixelCount, rhs.width)
    }

    public var description: String { "\(width)x\(height)" }
}
