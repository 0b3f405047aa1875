import CamRigTestSupport
import CamRigWire
import Logging
import NIOCore
import NIOEmbedded
import Testing

@testable import CamRigAgent

/// One agent connection over `EmbeddedChannel`: the real pipeline (decoder, encoder, handler), no socket.
final class EmbeddedAgentConnection {
    let channel = EmbeddedChannel()
    let loop: EmbeddedEventLoop
    let log = LogCapture()

    init(handshakeTimeout: TimeAmount = .seconds(10), idleTimeout: TimeAmount = .seconds(120)) throws {
        loop = channel.embeddedEventLoop
        let configuration = AgentConfiguration(
            host: "127.0.0.1",
            port: 0,
            security: .insecure,
            agentID: "agent-test",
            handshakeTimeout: handshakeTimeout,
            idleTimeout: idleTimeout
        )
        try AgentServer.configurePipeline(
            channel: channel,
            id: 1,
            configuration: configuration,
            router: AgentRequestRouter(agentID: "agent-test", devices: nil),
            logger: log.logger()
        )
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9)).wait()
    }

    func send(_ bytes: [UInt8]) throws {
        try channel.writeInbound(ByteBuffer(bytes: bytes))
    }

    func send(_ id: UInt64, _ body: WireEnvelope.OneOf_Body) throws {
        try send(RawPeer.frame(requestID: id, body))
    }

    func sendHello() throws {
        try send(RawPeer.hello)
    }

    /// Everything the agent wrote so far, decoded.
    func received() throws -> [WireFrame] {
        loop.run()  // replies written from other threads arrive through execute
        var bytes = ByteBuffer()
        while var chunk = try channel.readOutbound(as: ByteBuffer.self) { bytes.writeBuffer(&chunk) }
        var decoder = WireFrameDecoder()
        var frames: [WireFrame] = []
        while let frame = try decoder.decode(buffer: &bytes) { frames.append(frame) }
        #expect(bytes.readableBytes == 0, "the agent wrote a partial frame")
        return frames
    }

    var isOpen: Bool { channel.isActive }
}
