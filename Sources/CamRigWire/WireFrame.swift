import NIOCore

/// One unit of the wire protocol: an envelope and, for the messages that carry one, a payload of raw bytes.
///
/// On the wire (see `proto/PROTOCOL.md`):
///
///     +-----------------+-------------------+------------------+----------------------+
///     | length (u32 BE) | env length (u32 BE)| envelope (proto) | payload (raw bytes)  |
///     +-----------------+-------------------+------------------+----------------------+
///                       |<---------------------------- length ---------------------->|
///
/// The payload is kept as a `ByteBuffer` slice so image bytes are never copied through a protobuf field.
public struct WireFrame: Sendable {
    /// The message.
    public var envelope: WireEnvelope
    /// Raw bytes after the envelope (image data), or `nil` when the message carries none.
    public var payload: ByteBuffer?

    /// Creates a frame.
    public init(envelope: WireEnvelope, payload: ByteBuffer? = nil) {
        self.envelope = envelope
        self.payload = payload
    }

    /// Creates a frame holding one message.
    public init(requestID: UInt64, _ body: WireEnvelope.OneOf_Body, payload: ByteBuffer? = nil) {
        var envelope = WireEnvelope()
        envelope.requestID = requestID
        envelope.body = body
        self.init(envelope: envelope, payload: payload)
    }

    /// The request this frame answers, or 0.
    public var requestID: UInt64 { envelope.requestID }

    /// Number of payload bytes.
    public var payloadLength: Int { payload?.readableBytes ?? 0 }

    /// Encodes the length prefix, the envelope length and the envelope; the payload (if any) follows
    /// these bytes on the wire and is written separately, uncopied.
    ///
    /// - Throws: `WireProtocolError` with `.frameTooLarge` if the frame would exceed `maxFrameLength`.
    public func encodeHead(into buffer: inout ByteBuffer, maxFrameLength: UInt32) throws {
        let envelopeBytes: [UInt8] = try envelope.serializedBytes()
        guard envelopeBytes.count <= Int(WireProtocol.maxEnvelopeLength) else {
            throw WireProtocolError(
                .frameTooLarge,
                "\(envelope.messageName) envelope is \(envelopeBytes.count) bytes, above the maximum of \(WireProtocol.maxEnvelopeLength)",
                requestID: requestID
            )
        }
        let length = UInt64(WireProtocol.envelopeLengthSize) + UInt64(envelopeBytes.count) + UInt64(payloadLength)
        guard length <= UInt64(maxFrameLength) else {
            throw WireProtocolError(
                .frameTooLarge,
                "\(envelope.messageName) frame is \(length) bytes, above the peer's maximum of \(maxFrameLength)",
                requestID: requestID
            )
        }
        buffer.reserveCapacity(minimumWritableBytes: 8 + envelopeBytes.count)
        buffer.writeInteger(UInt32(length), endianness: .big)
        buffer.writeInteger(UInt32(envelopeBytes.count), endianness: .big)
        buffer.writeBytes(envelopeBytes)
    }

    /// The whole frame as one buffer (copies the payload; for tests and small messages).
    public func encoded(
        allocator: ByteBufferAllocator = ByteBufferAllocator(),
        maxFrameLength: UInt32 = WireProtocol.defaultMaxFrameLength
    ) throws -> ByteBuffer {
        var buffer = allocator.buffer(capacity: 64 + payloadLength)
        try encodeHead(into: &buffer, maxFrameLength: maxFrameLength)
        if var payload { buffer.writeBuffer(&payload) }
        return buffer
    }
}
