import CamRigDeviceModel
import NIOCore

/// What every synthetic frame says about itself, so a receiver can check it got the right frame from
/// the right instant.
///
/// Raw formats carry it in their first 32 bytes (little-endian); MJPEG carries it in a JPEG comment
/// segment (`COM`) with the same 32 bytes.
public struct SyntheticFrameHeader: Hashable, Sendable {
    public static let magic: UInt32 = 0x5953_5243  // "CRSY"
    public static let size = 32

    public var sequence: UInt64
    /// The frame's timestamp (start of exposure on the host's clock), in nanoseconds.
    public var timestamp: Int64
    /// A hash of the device's unique id.
    public var deviceHash: UInt32

    public init(sequence: UInt64, timestamp: Int64, deviceHash: UInt32) {
        self.sequence = sequence
        self.timestamp = timestamp
        self.deviceHash = deviceHash
    }

    func write(into buffer: inout ByteBuffer) {
        buffer.writeInteger(Self.magic, endianness: .little)
        buffer.writeInteger(UInt32(1), endianness: .little)  // layout version
        buffer.writeInteger(sequence, endianness: .little)
        buffer.writeInteger(timestamp, endianness: .little)
        buffer.writeInteger(deviceHash, endianness: .little)
        buffer.writeInteger(UInt32(0), endianness: .little)
    }

    /// Reads the header of a synthetic frame in `format`; `nil` if the bytes are not one.
    public static func decode(_ bytes: ByteBuffer, format: PixelFormat) -> SyntheticFrameHeader? {
        var view = bytes
        if format.isCompressed {
            // SOI, then a COM segment: FF FE, u16 BE length (2 + 32), the 32 header bytes.
            guard view.readInteger(as: UInt16.self) == 0xFFD8, view.readInteger(as: UInt16.self) == 0xFFFE,
                view.readInteger(as: UInt16.self) == UInt16(2 + size)
            else { return nil }
        }
        guard view.readableBytes >= size, view.readInteger(endianness: .little, as: UInt32.self) == magic,
            view.readInteger(endianness: .little, as: UInt32.self) == 1,
            let sequence = view.readInteger(endianness: .little, as: UInt64.self),
            let timestamp = view.readInteger(endianness: .little, as: Int64.self),
            let hash = view.readInteger(endianness: .little, as: UInt32.self)
        else { return nil }
        return SyntheticFrameHeader(sequence: sequence, timestamp: timestamp, deviceHash: hash)
    }

    /// FNV-1a of a device id.
    public static func hash(_ id: String) -> UInt32 {
        var hash: UInt32 = 0x811C_9DC5
        for byte in id.utf8 {
            hash ^= UInt32(byte)
            hash = hash &* 0x0100_0193
        }
        return hash
    }
}
