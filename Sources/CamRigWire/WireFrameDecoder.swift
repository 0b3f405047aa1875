import NIOCore
import SwiftProtobuf

/// Splits a byte stream into `WireFrame`s.
///
/// The length prefix is checked as soon as its four bytes arrive, so a frame that claims more than
/// `maxFrameLength` is refused before any of its body is buffered: memory never grows with a claimed
/// length, only with bytes actually received, and never beyond one maximum-sized frame.
///
/// Every error is a `WireProtocolError`; after one, the connection must be closed.
public struct WireFrameDecoder: NIOSingleStepByteToMessageDecoder {
    public typealias InboundOut = WireFrame

    /// The largest length prefix accepted.
    public let maxFrameLength: UInt32

    /// Creates a decoder that refuses frames longer than `maxFrameLength`.
    public init(maxFrameLength: UInt32 = WireProtocol.defaultMaxFrameLength) {
        self.maxFrameLength = maxFrameLength
    }

    public mutating func decode(buffer: inout ByteBuffer) throws -> WireFrame? {
        guard let length = buffer.getInteger(at: buffer.readerIndex, endianness: .big, as: UInt32.self) else {
            return nil
        }
        guard length >= WireProtocol.minimumFrameLength else {
            throw WireProtocolError(
                .malformedFrame,
                "length prefix \(length) is below the minimum of \(WireProtocol.minimumFrameLength) (the envelope-length field)"
            )
        }
        guard length <= maxFrameLength else {
            throw WireProtocolError(
                .frameTooLarge,
                "length prefix \(length) (0x\(String(length, radix: 16, uppercase: true))) is above the maximum frame length of \(maxFrameLength)"
            )
        }
        guard buffer.readableBytes >= WireProtocol.lengthPrefixSize + Int(length) else {
            return nil
        }
        buffer.moveReaderIndex(forwardBy: WireProtocol.lengthPrefixSize)
        var body = buffer.readSlice(length: Int(length))!
        return try Self.parse(body: &body)
    }

    public mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws -> WireFrame? {
        if let frame = try decode(buffer: &buffer) {
            return frame
        }
        if buffer.readableBytes > 0 {
            let claimed = buffer.getInteger(at: buffer.readerIndex, endianness: .big, as: UInt32.self)
            let got = buffer.readableBytes
            buffer.moveReaderIndex(to: buffer.writerIndex)
            throw WireProtocolError(
                .malformedFrame,
                "connection ended inside a frame: \(got) bytes received"
                    + (claimed.map { " of \(Int($0) + WireProtocol.lengthPrefixSize) announced" } ?? "")
            )
        }
        return nil
    }

    /// Parses the bytes after the length prefix.
    static func parse(body: inout ByteBuffer) throws -> WireFrame {
        let envelopeLength = body.readInteger(endianness: .big, as: UInt32.self)!
        guard envelopeLength <= WireProtocol.maxEnvelopeLength else {
            throw WireProtocolError(
                .malformedFrame,
                "envelope length \(envelopeLength) is above the maximum of \(WireProtocol.maxEnvelopeLength)"
            )
        }
        guard Int(envelopeLength) <= body.readableBytes else {
            throw WireProtocolError(
                .malformedFrame,
                "envelope length \(envelopeLength) runs past the end of the frame (\(body.readableBytes) bytes left)"
            )
        }
        let envelopeBytes = body.readSlice(length: Int(envelopeLength))!
        let envelope: WireEnvelope
        do {
            envelope = try WireEnvelope(serializedBytes: EnvelopeBytes(buffer: envelopeBytes))
        } catch {
            throw WireProtocolError(.undecodableMessage, "envelope of \(envelopeLength) bytes is not a valid Envelope: \(error)")
        }
        guard let message = envelope.body else {
            throw WireProtocolError(
                .unknownMessage,
                "envelope holds no message known to protocol version \(WireProtocol.currentVersion)",
                requestID: envelope.requestID
            )
        }
        let payload = body.readableBytes > 0 ? body : nil
        if payload != nil && !message.carriesPayload {
            throw WireProtocolError(
                .malformedFrame,
                "\(message.messageName) takes no payload but the frame has \(body.readableBytes) bytes after the envelope",
                requestID: envelope.requestID
            )
        }
        return WireFrame(envelope: envelope, payload: payload)
    }
}

/// An envelope's bytes as swift-protobuf reads them, straight from the receive buffer (no copy).
private struct EnvelopeBytes: SwiftProtobufContiguousBytes {
    var buffer: ByteBuffer

    init(buffer: ByteBuffer) { self.buffer = buffer }
    init(repeating: UInt8, count: Int) { buffer = ByteBuffer(repeating: repeating, count: count) }
    init<S: Sequence>(_ sequence: S) where S.Element == UInt8 { buffer = ByteBuffer(bytes: sequence) }

    var count: Int { buffer.readableBytes }

    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try buffer.withUnsafeReadableBytes(body)
    }

    mutating func withUnsafeMutableBytes<R>(_ body: (UnsafeMutableRawBufferPointer) throws -> R) rethrows -> R {
        try buffer.withUnsafeMutableReadableBytes(body)
    }
}
