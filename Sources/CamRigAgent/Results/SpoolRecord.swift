import Foundation
import NIOCore

/// The format of the agent's spool files (`results/ID.result`, `deferred/ID.photo`): a big-endian u32
/// length, a protobuf message of that length (the header), then the payload bytes to the end of the file.
struct SpoolRecord {
    /// The header message's bytes.
    var header: Data
    /// Everything after the header.
    var payload: Data

    /// The largest header accepted when reading: a longer one is a damaged file, not a record.
    static let maxHeaderLength = 64 << 20

    /// Why bytes are not a record.
    enum DecodingError: Error, Equatable, CustomStringConvertible {
        /// Shorter than its length prefix says.
        case truncated
        /// A length prefix beyond `maxHeaderLength`.
        case headerTooLong(Int)

        var description: String {
            switch self {
            case .truncated: "truncated"
            case .headerTooLong(let length): "header of \(length) bytes, more than \(SpoolRecord.maxHeaderLength)"
            }
        }
    }

    /// The file's bytes: the length prefix, `header`, then each payload in order.
    static func encode(header: [UInt8], payloads: [ByteBuffer]) -> Data {
        var data = Data(capacity: 4 + header.count + payloads.reduce(0) { $0 + $1.readableBytes })
        withUnsafeBytes(of: UInt32(header.count).bigEndian) { data.append(contentsOf: $0) }
        data.append(contentsOf: header)
        for payload in payloads { payload.withUnsafeReadableBytes { data.append(contentsOf: $0) } }
        return data
    }

    /// Splits a file's bytes into header and payload.
    init(decoding data: Data) throws(DecodingError) {
        let start = data.startIndex
        guard data.count >= 4 else { throw .truncated }
        let length = Int(data[start..<(start + 4)].reduce(0) { $0 << 8 | UInt32($1) })
        guard length <= Self.maxHeaderLength else { throw .headerTooLong(length) }
        guard data.count >= 4 + length else { throw .truncated }
        header = data[(start + 4)..<(start + 4 + length)]
        payload = data[(start + 4 + length)...]
    }
}
