import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// HTTP/1.1 exchanges with one origin (the object store's endpoint) on SwiftNIO's own codec, over TLS when
/// the endpoint is https: connections are kept alive and reused, one exchange at a time each, and as many
/// are opened as there are exchanges at once.
///
/// What an S3 client needs and no more (no redirects, no proxies, no compression, no chunked uploads): that
/// keeps camera hosts, which upload their own results, off a general HTTP client's dependencies.
final class HTTPTransport: Sendable {
    struct Response: Sendable {
        var status: UInt
        var headers: HTTPHeaders
        var body: ByteBuffer
    }

    enum Failure: Error, CustomStringConvertible {
        case timedOut(TimeAmount)
        case tooLarge(Int)
        case closedBeforeAnswer
        case shutDown

        var description: String {
            switch self {
            case .timedOut(let timeout): "no answer within \(timeout.nanoseconds / 1_000_000) ms"
            case .tooLarge(let limit): "the answer is longer than \(limit) bytes"
            case .closedBeforeAnswer: "the connection was closed before the answer was complete"
            case .shutDown: "the client is shut down"
            }
        }
    }

    let host: String
    let port: Int
    private let tls: NIOSSLContext?
    private let serverName: String?
    private let connectTimeout: TimeAmount
    private let group: any EventLoopGroup
    private let idle = NIOLockedValueBox(Idle())

    private struct Idle {
        var connections: [(connection: Connection, since: NIODeadline)] = []
        var shutDown = false
    }

    /// Connections kept for reuse at most, and for how long unused (stores close theirs after a while).
    static let keptConnections = 16
    static let idleTimeout = TimeAmount.seconds(30)

    init(host: String, port: Int, tls: TLSConfiguration?, connectTimeout: TimeAmount = .seconds(10)) throws {
        self.host = host
        self.port = port
        self.tls = try tls.map { try NIOSSLContext(configuration: $0) }
        // SNI carries names, never addresses.
        serverName = host.contains(":") || host.allSatisfy({ $0.isNumber || $0 == "." }) ? nil : host
        self.connectTimeout = connectTimeout
        group = MultiThreadedEventLoopGroup.singleton
    }

    /// Sends the request and reads its answer (at most `limit` bytes of body) within `timeout`.
    ///
    /// A kept connection that the store closed while it was unused fails at once: the request goes again on
    /// a new one (every request the S3 client makes can be repeated).
    func execute(_ head: HTTPRequestHead, body: ByteBuffer?, limit: Int, timeout: TimeAmount) async throws -> Response {
        if let kept = try takeIdle() {
            do {
                return try await exchange(on: kept, head, body: body, limit: limit, timeout: timeout)
            } catch let failure as Failure where failure.isFinal {
                throw failure
            } catch {
                // Asked again below on a new connection.
            }
        }
        return try await exchange(on: try await connect(), head, body: body, limit: limit, timeout: timeout)
    }

    /// Closes the kept connections; later requests fail.
    func shutdown() async {
        let connections = idle.withLockedValue { idle in
            defer { idle.connections.removeAll() }
            idle.shutDown = true
            return idle.connections.map(\.connection)
        }
        for connection in connections { try? await connection.channel.close() }
    }

    // MARK: Connections

    private struct Connection: Sendable {
        let channel: any Channel
        let handler: NIOLoopBound<ResponseHandler>
    }

    private func takeIdle() throws -> Connection? {
        let now = NIODeadline.now()
        let (kept, stale) = try idle.withLockedValue { idle throws -> (Connection?, [Connection]) in
            guard !idle.shutDown else { throw Failure.shutDown }
            let isStale = { (kept: (connection: Connection, since: NIODeadline)) in now - kept.since > Self.idleTimeout || !kept.connection.channel.isActive }
            let stale = idle.connections.filter(isStale).map(\.connection)
            idle.connections.removeAll(where: isStale)
            return (idle.connections.popLast()?.connection, stale)
        }
        for connection in stale { connection.channel.close(promise: nil) }
        return kept
    }

    private func keep(_ connection: Connection) {
        let kept = idle.withLockedValue { idle in
            guard !idle.shutDown, idle.connections.count < Self.keptConnections else { return false }
            idle.connections.append((connection, .now()))
            return true
        }
        if !kept { connection.channel.close(promise: nil) }
    }

    private func connect() async throws -> Connection {
        let (tls, serverName) = (self.tls, self.serverName)
        return try await ClientBootstrap(group: group)
            .connectTimeout(connectTimeout)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let tls {
                        try channel.pipeline.syncOperations.addHandler(try NIOSSLClientHandler(context: tls, serverHostname: serverName))
                    }
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    let handler = ResponseHandler()
                    try channel.pipeline.syncOperations.addHandler(handler)
                    return Connection(channel: channel, handler: NIOLoopBound(handler, eventLoop: channel.eventLoop))
                }
            }
    }

    private func exchange(on connection: Connection, _ head: HTTPRequestHead, body: ByteBuffer?, limit: Int, timeout: TimeAmount) async throws -> Response {
        let (channel, handler) = (connection.channel, connection.handler)
        let loop = channel.eventLoop
        let answer = loop.makePromise(of: Response.self)
        loop.execute {
            handler.value.begin(answer, limit: limit)
            let written = loop.makePromise(of: Void.self)
            written.futureResult.whenFailure { handler.value.fail($0) }
            channel.write(HTTPClientRequestPart.head(head), promise: nil)
            if let body { channel.write(HTTPClientRequestPart.body(.byteBuffer(body)), promise: nil) }
            channel.writeAndFlush(HTTPClientRequestPart.end(nil), promise: written)
        }
        let timer = loop.scheduleTask(in: timeout) {
            handler.value.fail(Failure.timedOut(timeout))
            channel.close(promise: nil)
        }
        defer { timer.cancel() }
        let response: Response
        do {
            response = try await answer.futureResult.get()
        } catch {
            channel.close(promise: nil)
            throw error
        }
        if try await loop.submit({ handler.value.reusable && channel.isActive }).get() {
            keep(connection)
        } else {
            channel.close(promise: nil)
        }
        return response
    }
}

extension HTTPTransport.Failure {
    /// Failures that another connection would not mend.
    var isFinal: Bool {
        switch self {
        case .tooLarge, .shutDown, .timedOut: true
        case .closedBeforeAnswer: false
        }
    }
}

/// Collects the answer to the one request in flight on its connection.
private final class ResponseHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart

    private struct Pending {
        let promise: EventLoopPromise<HTTPTransport.Response>
        let limit: Int
        var head: HTTPResponseHead?
        var body: ByteBuffer?
    }

    private var pending: Pending?
    private var active = true
    /// Whether the connection may carry another request (its last answer was whole and kept it alive).
    private(set) var reusable = false

    func begin(_ promise: EventLoopPromise<HTTPTransport.Response>, limit: Int) {
        guard active else {
            promise.fail(HTTPTransport.Failure.closedBeforeAnswer)
            return
        }
        reusable = false
        pending = Pending(promise: promise, limit: limit)
    }

    func fail(_ error: any Error) {
        reusable = false
        pending.take()?.promise.fail(error)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard var current = pending else {
            // Nothing was asked: a store that talks out of turn is not talked to again.
            reusable = false
            context.close(promise: nil)
            return
        }
        switch unwrapInboundIn(data) {
        case .head(let head):
            current.head = head
            pending = current
        case .body(var bytes):
            let had = current.body?.readableBytes ?? 0
            guard had + bytes.readableBytes <= current.limit else {
                fail(HTTPTransport.Failure.tooLarge(current.limit))
                context.close(promise: nil)
                return
            }
            pending = nil  // keeps `current.body` uniquely referenced while it grows
            if current.body == nil {
                current.body = bytes
            } else {
                current.body!.writeBuffer(&bytes)
            }
            pending = current
        case .end:
            pending = nil
            guard let head = current.head else {
                current.promise.fail(HTTPTransport.Failure.closedBeforeAnswer)
                context.close(promise: nil)
                return
            }
            reusable = head.isKeepAlive
            current.promise.succeed(HTTPTransport.Response(status: head.status.code, headers: head.headers, body: current.body ?? ByteBuffer()))
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        active = false
        fail(HTTPTransport.Failure.closedBeforeAnswer)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        fail(error)
        context.close(promise: nil)
    }
}
