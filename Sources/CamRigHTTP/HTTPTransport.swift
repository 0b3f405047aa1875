import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// CamRig's one HTTP client: HTTP/1.1 exchanges with one origin on SwiftNIO's own codec, over TLS when the
/// origin is https. Connections are kept alive and reused, one exchange at a time each, and as many are opened
/// as there are exchanges at once. Every exchange has a deadline and a limit on the answer's size.
///
/// The object store's S3 client, an agent's enrollment and the command line's client of `camrig serve` all
/// use it. What they need and no more (no redirects, no proxies, no compression, no chunked uploads), which
/// keeps camera hosts off a general HTTP client's dependencies. The rule for the TLS server name is here
/// alone (`serverName(for:)`).
public final class HTTPTransport: Sendable {
    /// An answer: its status, headers and whole body.
    public struct Response: Sendable {
        public var status: UInt
        public var headers: HTTPHeaders
        public var body: ByteBuffer
    }

    /// Checks the server's certificate chain (leaf first) in place of NIOSSL's own verification against the
    /// configuration's trust roots, for a peer that must be more than trusted (the rig's coordinator, say).
    public typealias Verification = @Sendable ([NIOSSLCertificate], EventLoopPromise<NIOSSLVerificationResult>) -> Void

    /// Why an exchange failed, when it was not the network's or TLS's error.
    public enum Failure: Error, CustomStringConvertible {
        case timedOut(TimeAmount)
        case tooLarge(Int)
        case closedBeforeAnswer
        case shutDown

        public var description: String {
            switch self {
            case .timedOut(let timeout): "no answer within \(timeout.nanoseconds / 1_000_000) ms"
            case .tooLarge(let limit): "the answer is longer than \(limit) bytes"
            case .closedBeforeAnswer: "the connection was closed before the answer was complete"
            case .shutDown: "the client is shut down"
            }
        }
    }

    public let host: String
    public let port: Int
    private let tls: NIOSSLContext?
    private let verification: Verification?
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

    /// A client of `host`:`port` (an address or a name; brackets around an IPv6 address are dropped), over TLS
    /// with `tls` when given; `verification` replaces NIOSSL's check of the server's chain.
    public init(
        host: String, port: Int, tls: TLSConfiguration?, verification: Verification? = nil, connectTimeout: TimeAmount = .seconds(10)
    ) throws {
        let host = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        self.host = host
        self.port = port
        self.tls = try tls.map { try NIOSSLContext(configuration: $0) }
        self.verification = verification
        serverName = Self.serverName(for: host)
        self.connectTimeout = connectTimeout
        group = MultiThreadedEventLoopGroup.singleton
    }

    /// The TLS server name (SNI) for `host`: names only, never addresses (RFC 6066, section 3).
    public static func serverName(for host: String) -> String? {
        host.contains(":") || host.allSatisfy({ $0.isNumber || $0 == "." }) ? nil : host
    }

    /// The `Host` header's value for this origin (an IPv6 address in brackets).
    public var authority: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// Sends the request and reads its answer (at most `limit` bytes of body) within `timeout`.
    ///
    /// A kept connection that the server closed while it was unused fails at once. A request that may be
    /// repeated (by its method: GET, HEAD, PUT, DELETE) then goes again on a new connection; any other (a POST)
    /// never goes on a kept connection, so that it is sent once.
    public func execute(_ head: HTTPRequestHead, body: ByteBuffer?, limit: Int, timeout: TimeAmount) async throws -> Response {
        let idempotent = [.GET, .HEAD, .PUT, .DELETE, .OPTIONS].contains(head.method)
        if idempotent, let kept = try takeIdle() {
            do {
                return try await exchange(on: kept, head, body: body, limit: limit, timeout: timeout)
            } catch let failure as Failure where failure.isFinal {
                throw failure
            } catch {
                // Asked again below on a new connection.
            }
        }
        if !idempotent { _ = try takeIdle(keeping: true) }  // refuses when shut down
        return try await exchange(on: try await connect(), head, body: body, limit: limit, timeout: timeout)
    }

    /// Closes the kept connections; later requests fail. Its owner calls it once it is done.
    public func shutdown() async {
        let connections = idle.withLockedValue { idle in
            defer { idle.connections.removeAll() }
            idle.shutDown = true
            return idle.connections.map(\.connection)
        }
        for connection in connections { try? await connection.channel.close() }
    }

    // MARK: Connections

    struct Connection: Sendable {
        let channel: any Channel
        let handler: NIOLoopBound<ResponseHandler>
    }

    /// A kept connection to use (none when `keeping`, which only drops the stale ones), or nil.
    private func takeIdle(keeping: Bool = false) throws -> Connection? {
        let now = NIODeadline.now()
        let (kept, stale) = try idle.withLockedValue { idle throws -> (Connection?, [Connection]) in
            guard !idle.shutDown else { throw Failure.shutDown }
            let isStale = { (kept: (connection: Connection, since: NIODeadline)) in now - kept.since > Self.idleTimeout || !kept.connection.channel.isActive }
            let stale = idle.connections.filter(isStale).map(\.connection)
            idle.connections.removeAll(where: isStale)
            return (keeping ? nil : idle.connections.popLast()?.connection, stale)
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

    /// A new connection (internal for the tests, which check its socket options).
    func connect() async throws -> Connection {
        let (tls, serverName, verification) = (self.tls, self.serverName, self.verification)
        return try await ClientBootstrap(group: group)
            .connectTimeout(connectTimeout)
            // TCP_NODELAY at IPPROTO_TCP: as a socket-level option its number is SO_DEBUG, which needs CAP_NET_ADMIN.
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let tls {
                        let handler =
                            if let verification {
                                try NIOSSLClientHandler(context: tls, serverHostname: serverName, customVerificationCallback: verification)
                            } else {
                                try NIOSSLClientHandler(context: tls, serverHostname: serverName)
                            }
                        try channel.pipeline.syncOperations.addHandler(handler)
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
final class ResponseHandler: ChannelInboundHandler, RemovableChannelHandler {
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
