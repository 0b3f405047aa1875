import CamRigWire
import NIOCore
import NIOEmbedded
import Testing

@Suite("Wire frame encoder", .timeLimit(.minutes(1)))
struct WireFrameEncoderTests {
    @Test("image payloads are written as their own buffer, never copied into the frame")
    func payloadNotCopied() throws {
        let channel = EmbeddedChannel(handler: WireFrameEncoder())
        let payload = ByteBuffer(repeating: 0x5A, count: 1920 * 1080 * 2)
        var frame = WireVideoFrame()
        frame.sequence = 42
        try channel.writeOutbound(WireFrame(requestID: 3, .videoFrame(frame), payload: payload))

        let head = try #require(try channel.readOutbound(as: ByteBuffer.self))
        let body = try #require(try channel.readOutbound(as: ByteBuffer.self))
        #expect(head.getInteger(at: 0, as: UInt32.self) == UInt32(head.readableBytes - 4 + payload.readableBytes))
        let samePointer = payload.withUnsafeReadableBytes { original in
            body.withUnsafeReadableBytes { written in original.baseAddress == written.baseAddress }
        }
        #expect(samePointer, "the payload buffer must reach the socket as is")
        _ = try channel.finish()
    }

    @Test("a frame above the peer's maximum fails the write and sends nothing")
    func oversizedWriteFails() throws {
        let encoder = WireFrameEncoder(peerMaxFrameLength: WireProtocol.minimumMaxFrameLength)
        let channel = EmbeddedChannel(handler: encoder)
        let payload = ByteBuffer(repeating: 1, count: Int(WireProtocol.minimumMaxFrameLength))
        let write = channel.writeAndFlush(WireFrame(requestID: 1, .videoFrame(WireVideoFrame()), payload: payload))
        let error = #expect(throws: WireProtocolError.self) { try write.wait() }
        #expect(error?.code == .frameTooLarge)
        #expect(try channel.readOutbound(as: ByteBuffer.self) == nil)
        _ = try channel.finish()
    }
}

@Suite("PROTOCOL.md examples", .timeLimit(.minutes(1)))
struct ProtocolDocumentTests {
    @Test("the ping example of §3 is exactly what the encoder writes")
    func pingExample() throws {
        var ping = WirePing()
        ping.nonce = 7
        let bytes = Array(try WireFrame(requestID: 2, .ping(ping)).encoded().readableBytesView)
        #expect(bytes == [0x00, 0x00, 0x00, 0x0A, 0x00, 0x00, 0x00, 0x06, 0x08, 0x02, 0x72, 0x02, 0x08, 0x07])
    }

    @Test("viewers may only describe and watch; coordinators may do everything")
    func roles() {
        #expect(WirePeerRole.viewer.mayRequest(.describeDevice(.init())))
        #expect(WirePeerRole.viewer.mayRequest(.startStream(.init())))
        #expect(!WirePeerRole.viewer.mayRequest(.lock(.init())))
        #expect(!WirePeerRole.viewer.mayRequest(.configure(.init())))
        #expect(!WirePeerRole.viewer.mayRequest(.scheduleTrigger(.init())))
        #expect(WirePeerRole.coordinator.mayRequest(.configure(.init())))
        #expect(!WirePeerRole.agent.mayRequest(.ping(.init())))
    }
}

@Suite("Version negotiation", .timeLimit(.minutes(1)))
struct NegotiationTests {
    @Test("the highest common version wins; no overlap gives none")
    func negotiate() {
        #expect(WireProtocol.negotiate(clientMinimum: 1, clientMaximum: 1, supported: 1...1) == 1)
        #expect(WireProtocol.negotiate(clientMinimum: 1, clientMaximum: 5, supported: 1...3) == 3)
        #expect(WireProtocol.negotiate(clientMinimum: 2, clientMaximum: 4, supported: 1...3) == 3)
        #expect(WireProtocol.negotiate(clientMinimum: 4, clientMaximum: 6, supported: 1...3) == nil)
        #expect(WireProtocol.negotiate(clientMinimum: 0, clientMaximum: 0, supported: 1...3) == nil)
        #expect(WireProtocol.negotiate(clientMinimum: 3, clientMaximum: 1, supported: 1...3) == nil)
    }

    @Test("announced maximum frame lengths: 0 is the default, tiny values are raised")
    func maxFrameLength() {
        #expect(WireProtocol.effectiveMaxFrameLength(announced: 0) == WireProtocol.defaultMaxFrameLength)
        #expect(WireProtocol.effectiveMaxFrameLength(announced: 10) == WireProtocol.minimumMaxFrameLength)
        #expect(WireProtocol.effectiveMaxFrameLength(announced: 100 << 20) == 100 << 20)
    }
}
