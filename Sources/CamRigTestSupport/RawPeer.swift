import CamRigSecurity
import CamRigWire
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL

/// A deliberately misbehaving client: connects (optionally over TLS, with or without a certificate),
/// writes whatever bytes a test gives it, and records what the agent sends back until it closes.
public enum RawPeer {
    /// How the raw peer speaks TLS.
    public enum Transport: Sendable {
        case plaintext
        /// TLS 1.3 presenting no certificate.
        case tlsWithoutCertificate
        /// TLS 1.3 presenting certificate `name` from `directory`.
        case tls(directory: TLSDirectory, name: String)
    }

    /// What came back.
    public struct Exchange: Sendable {
        /// Every byte the agent sent.
        public var received: ByteBuffer
        /// Whether the agent closed the connection before the timeout.
        public var closedByAgent: Bool

        /// The frames in `received`, decoded; stops at the first undecodable one.
        public var frames: [WireFrame] {
            var buffer = received
            var decoder = WireFrameDecoder()
            var frames: [WireFrame] = []
            while let frame = try? decoder.decode(buffer: &buffer) { frames.append(frame) }
            return frames
        }

        /// The `Error` messages among `frames`.
        public var errors: [WireError] {
            frames.compactMap { if case .error(let error) = $0.envelope.body { error } else { nil } }
        }
    }

    /// Connects to `host:port`, writes each chunk of `chunks` in turn (`spacing` apart, when given), and
    /// collects the agent's bytes until it closes or `timeout` passes.
    public static func exchange(
        host: String = "127.0.0.1",
        port: Int,
        transport: Transport,
        chunks: [[UInt8]],
        timeout: TimeAmount = .seconds(5),
        spacing: Duration? = nil,
        stopReadingFor pause: Duration? = nil,
        whilePaused: @Sendable () async -> Void = {}
    ) async throws -> Exchange {
        let collector = Collector()
        let bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(.seconds(5))
            .channelInitializer { channel in
                do {
                    if let tls = try makeTLS(transport) {
                        try channel.pipeline.syncOperations.addHandler(try NIOSSLClientHandler(context: tls, serverHostname: nil))
                    }
                    try channel.pipeline.syncOperations.addHandler(collector)
                    return channel.eventLoop.makeSucceededVoidFuture()
                } catch {
                    return channel.eventLoop.makeFailedFuture(error)
                }
            }
        let channel = try await bootstrap.connect(host: host, port: port).get()
        for (index, chunk) in chunks.enumerated() {
            if let spacing, index > 0 { try await Task.sleep(for: spacing) }
            var buffer = channel.allocator.buffer(capacity: chunk.count)
            buffer.writeBytes(chunk)
            try? await channel.writeAndFlush(buffer)
        }
        if let pause {
            // A client that stops reading: the kernel's buffers fill and the agent's writes stall.
            try await channel.setOption(.autoRead, value: false).get()
            try await Task.sleep(for: pause)
            await whilePaused()
            try await channel.setOption(.autoRead, value: true).get()
            channel.read()
        }
        let timedOut = NIOLockedValueBox(false)
        let timer = channel.eventLoop.scheduleTask(in: timeout) {
            timedOut.withLockedValue { $0 = true }
            channel.close(promise: nil)
        }
        try? await channel.closeFuture.get()
        timer.cancel()
        return Exchange(received: collector.received, closedByAgent: !timedOut.withLockedValue { $0 })
    }

    /// A complete, valid frame with `body`, encoded.
    public static func frame(requestID: UInt64, _ body: WireEnvelope.OneOf_Body) -> [UInt8] {
        let buffer = try! WireFrame(requestID: requestID, body).encoded()
        return Array(buffer.readableBytesView)
    }

    /// A valid hello frame.
    public static var hello: [UInt8] {
        var hello = WireHello()
        hello.minProtocolVersion = 1
        hello.maxProtocolVersion = 1
        hello.clientSoftware = "raw test peer"
        return frame(requestID: 1, .hello(hello))
    }

    static func makeTLS(_ transport: Transport) throws -> NIOSSLContext? {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.minimumTLSVersion = .tlsv13
        configuration.certificateVerification = .none
        switch transport {
        case .plaintext:
            return nil
        case .tlsWithoutCertificate:
            break
        case .tls(let directory, let name):
            configuration.certificateChain = try NIOSSLCertificate.fromPEMFile(directory.path + "/\(name).pem").map { .certificate($0) }
            configuration.privateKey = .privateKey(try NIOSSLPrivateKey(file: directory.path + "/\(name)-key.pem", format: .pem))
        }
        return try NIOSSLContext(configuration: configuration)
    }

    final class Collector: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        private let bytes = NIOLockedValueBox(ByteBuffer())

        var received: ByteBuffer { bytes.withLockedValue { $0 } }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            var chunk = unwrapInboundIn(data)
            _ = bytes.withLockedValue { $0.writeBuffer(&chunk) }
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            // TLS alerts and resets end the exchange like a close does.
            context.close(promise: nil)
        }
    }
}
