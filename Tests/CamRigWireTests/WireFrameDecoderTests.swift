import CamRigWire
import NIOCore
import NIOTestUtils
import Testing

@Suite("Wire frame decoder", .timeLimit(.minutes(1)))
struct WireFrameDecoderTests {
    func ping(_ id: UInt64, nonce: UInt64 = 7) -> WireFrame {
        var ping = WirePing()
        ping.nonce = nonce
        return WireFrame(requestID: id, .ping(ping))
    }

    func videoFrame(_ id: UInt64, payload: [UInt8]) -> WireFrame {
        var frame = WireVideoFrame()
        frame.streamID = "s1"
        frame.sequence = id
        return WireFrame(requestID: id, .videoFrame(frame), payload: ByteBuffer(bytes: payload))
    }

    func bytes(_ frame: WireFrame) throws -> ByteBuffer { try frame.encoded() }

    func decodeAll(_ bytes: [UInt8], max: UInt32 = WireProtocol.defaultMaxFrameLength) throws -> [WireFrame] {
        var decoder = WireFrameDecoder(maxFrameLength: max)
        var buffer = ByteBuffer(bytes: bytes)
        var frames: [WireFrame] = []
        while let frame = try decoder.decode(buffer: &buffer) { frames.append(frame) }
        return frames
    }

    @Test("frames survive any split of the byte stream (byte by byte, all at once, random)")
    func verifier() throws {
        let frames = [ping(1), videoFrame(2, payload: Array(0..<200)), ping(3, nonce: .max), videoFrame(4, payload: [9])]
        let pairs = try frames.map { (try bytes($0), [DecodedFrame($0)]) }
        try ByteToMessageDecoderVerifier.verifyDecoder(
            inputOutputPairs: pairs.map { ($0.0, $0.1) },
            decoderFactory: { DecodedFrameDecoder() }
        )
    }

    @Test("the payload arrives as raw bytes after the envelope, not inside it")
    func payloadLayout() throws {
        let payload: [UInt8] = Array(repeating: 0xAB, count: 1000)
        let encoded = try bytes(videoFrame(5, payload: payload))
        let length = try #require(encoded.getInteger(at: 0, as: UInt32.self))
        let envelopeLength = try #require(encoded.getInteger(at: 4, as: UInt32.self))
        #expect(Int(length) == encoded.readableBytes - 4)
        #expect(Int(length) == 4 + Int(envelopeLength) + payload.count)
        #expect(encoded.getBytes(at: encoded.readableBytes - payload.count, length: payload.count) == payload)
        let decoded = try decodeAll(Array(encoded.readableBytesView))
        #expect(decoded.count == 1)
        #expect(decoded[0].payload.map { Array($0.readableBytesView) } == payload)
    }

    @Test(
        "a length prefix above the maximum is refused from its four bytes alone",
        arguments: [UInt32.max, WireProtocol.defaultMaxFrameLength + 1, 0x8000_0000]
    )
    func oversizedLength(length: UInt32) throws {
        var buffer = ByteBuffer()
        buffer.writeInteger(length)
        var decoder = WireFrameDecoder()
        let error = #expect(throws: WireProtocolError.self) { try decoder.decode(buffer: &buffer) }
        #expect(error?.code == .frameTooLarge)
        #expect(error?.message.contains("\(length)") == true)
    }

    @Test("a configured smaller maximum is enforced")
    func smallerMaximum() throws {
        let frame = try bytes(videoFrame(1, payload: Array(repeating: 1, count: 5000)))
        let error = #expect(throws: WireProtocolError.self) { try decodeAll(Array(frame.readableBytesView), max: 4096) }
        #expect(error?.code == .frameTooLarge)
    }

    @Test("zero and too-short lengths are malformed", arguments: [UInt32(0), 1, 3])
    func shortLength(length: UInt32) throws {
        var bytes: [UInt8] = []
        withUnsafeBytes(of: length.bigEndian) { bytes.append(contentsOf: $0) }
        bytes += [0, 0, 0, 0]
        let error = #expect(throws: WireProtocolError.self) { try decodeAll(bytes) }
        #expect(error?.code == .malformedFrame)
    }

    @Test("an envelope length running past the frame is malformed")
    func envelopeOverrun() throws {
        // length 8: envelope-length field says 100 but only 4 bytes follow.
        let bytes: [UInt8] = [0, 0, 0, 8, 0, 0, 0, 100, 1, 2, 3, 4]
        let error = #expect(throws: WireProtocolError.self) { try decodeAll(bytes) }
        #expect(error?.code == .malformedFrame)
    }

    @Test("bytes that are not protobuf are undecodable")
    func undecodable() throws {
        // Field 1 as a length-delimited field of 200 bytes, with 3 bytes present: invalid protobuf.
        let envelope: [UInt8] = [0x0A, 0xC8, 0x01, 1, 2, 3]
        let bytes: [UInt8] = [0, 0, 0, UInt8(4 + envelope.count), 0, 0, 0, UInt8(envelope.count)] + envelope
        let error = #expect(throws: WireProtocolError.self) { try decodeAll(bytes) }
        #expect(error?.code == .undecodableMessage)
    }

    @Test("an envelope holding an unknown message type is refused, keeping its request id")
    func unknownMessage() throws {
        // request_id = 9 (field 1, varint), then field 99 (length-delimited, 2 bytes): not in the schema.
        let envelope: [UInt8] = [0x08, 0x09, 0x9A, 0x06, 0x02, 0xAA, 0xBB]
        let bytes: [UInt8] = [0, 0, 0, UInt8(4 + envelope.count), 0, 0, 0, UInt8(envelope.count)] + envelope
        let error = #expect(throws: WireProtocolError.self) { try decodeAll(bytes) }
        #expect(error?.code == .unknownMessage)
        #expect(error?.requestID == 9)
    }

    @Test("a payload on a message that takes none is malformed")
    func payloadOnControlMessage() throws {
        let frame = WireFrame(requestID: 1, .ping(WirePing()), payload: ByteBuffer(bytes: [1, 2, 3]))
        let error = #expect(throws: WireProtocolError.self) { try decodeAll(Array(try bytes(frame).readableBytesView)) }
        #expect(error?.code == .malformedFrame)
    }

    @Test("a frame cut off by the end of the connection is reported, not silently dropped")
    func truncatedAtEOF() throws {
        let whole = Array(try bytes(videoFrame(1, payload: Array(repeating: 7, count: 64))).readableBytesView)
        var buffer = ByteBuffer(bytes: whole.prefix(40))
        var decoder = WireFrameDecoder()
        #expect(try decoder.decode(buffer: &buffer) == nil)
        let error = #expect(throws: WireProtocolError.self) { try decoder.decodeLast(buffer: &buffer, seenEOF: true) }
        #expect(error?.code == .malformedFrame)
        #expect(error?.message.contains("40 bytes received of \(whole.count) announced") == true)
    }

    @Test("an incomplete frame waits for more bytes without buffering beyond what arrived")
    func incompleteWaits() throws {
        var buffer = ByteBuffer()
        buffer.writeInteger(UInt32(WireProtocol.defaultMaxFrameLength))  // a legal but huge claim
        buffer.writeBytes([0, 0, 0, 0])
        var decoder = WireFrameDecoder()
        #expect(try decoder.decode(buffer: &buffer) == nil)
        #expect(buffer.capacity < 1024)
    }
}

/// Equatable view of a decoded frame for the verifier.
struct DecodedFrame: Equatable {
    var envelope: WireEnvelope
    var payload: [UInt8]?

    init(_ frame: WireFrame) {
        envelope = frame.envelope
        payload = frame.payload.map { Array($0.readableBytesView) }
    }
}

struct DecodedFrameDecoder: ByteToMessageDecoder {
    typealias InboundOut = DecodedFrame
    var inner = WireFrameDecoder()

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let frame = try inner.decode(buffer: &buffer) else { return .needMoreData }
        context.fireChannelRead(NIOAny(DecodedFrame(frame)))
        return .continue
    }

    mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        try decode(context: context, buffer: &buffer)
    }
}
