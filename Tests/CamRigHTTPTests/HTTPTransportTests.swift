import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import Testing

@testable import CamRigHTTP

/// CamRig's HTTP/1.1 client against a real HTTP server on loopback (SwiftNIO's server codec), made to behave
/// as stores and services do: keeping connections, closing kept ones without a word, answering too much, or
/// not answering at all.
@Suite("HTTP transport", .timeLimit(.minutes(1)))
struct HTTPTransportTests {
    /// How the server answers.
    enum Behaviour: Sendable {
        /// `echo:BODY` back with the request's method and path, and keeps the connection.
        case answer
        /// Answers a connection's first request; closes the connection on its second without answering (as a
        /// store does whose idle timeout ends a kept connection just as a request is sent on it).
        case closeOnSecondRequest
        /// Answers with `size` bytes.
        case large(Int)
        /// Reads the request and never answers.
        case silent
    }

    final class Server: Sendable {
        let channel: any Channel
        /// The port it listens on (read once: a closed channel has no address).
        let port: Int
        let connections = NIOLockedValueBox(0)
        let requests = NIOLockedValueBox<[String]>([])

        init(_ behaviour: Behaviour) async throws {
            let (connections, requests) = (connections, requests)
            channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .childChannelInitializer { channel in
                    connections.withLockedValue { $0 += 1 }
                    return channel.pipeline.configureHTTPServerPipeline().flatMap {
                        channel.pipeline.addHandler(Responder(behaviour: behaviour, requests: requests))
                    }
                }
                .bind(host: "127.0.0.1", port: 0).get()
            port = try #require(channel.localAddress?.port)
        }

        func stop() async { try? await channel.close() }
    }

    final class Responder: ChannelInboundHandler, Sendable {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart
        let behaviour: Behaviour
        let requests: NIOLockedValueBox<[String]>
        let received = NIOLockedValueBox<(HTTPRequestHead?, Int)>((nil, 0))
        let answered = NIOLockedValueBox(0)

        init(behaviour: Behaviour, requests: NIOLockedValueBox<[String]>) {
            self.behaviour = behaviour
            self.requests = requests
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head(let head): received.withLockedValue { $0 = (head, 0) }
            case .body(let bytes): received.withLockedValue { $0.1 += bytes.readableBytes }
            case .end:
                let (head, length) = received.withLockedValue { $0 }
                guard let head else {
                    Issue.record("the test server got the end of a request without its head")
                    context.close(promise: nil)
                    return
                }
                requests.withLockedValue { $0.append("\(head.method.rawValue) \(head.uri) \(length)") }
                let body: ByteBuffer
                if case .closeOnSecondRequest = behaviour, answered.withLockedValue({ $0 }) == 1 {
                    context.close(promise: nil)
                    return
                }
                answered.withLockedValue { $0 += 1 }
                switch behaviour {
                case .silent: return
                case .large(let size): body = ByteBuffer(repeating: 0x61, count: size)
                case .answer, .closeOnSecondRequest: body = ByteBuffer(string: "\(head.method.rawValue) \(head.uri) \(length)")
                }
                var headers = HTTPHeaders([("content-length", String(body.readableBytes)), ("etag", "\"e\"")])
                headers.add(name: "x-request", value: head.uri)
                context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .ok, headers: headers))), promise: nil)
                if head.method != .HEAD { context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil) }
                context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
            }
        }
    }

    static func request(_ method: HTTPMethod, _ uri: String, port: Int) -> HTTPRequestHead {
        var head = HTTPRequestHead(version: .http1_1, method: method, uri: uri)
        head.headers.add(name: "host", value: "127.0.0.1:\(port)")
        return head
    }

    /// A GET of `path` through `transport` from `server`, answered within 10 s.
    static func get(_ path: String, _ transport: HTTPTransport, from server: Server) async throws -> HTTPTransport.Response {
        try await transport.execute(request(.GET, path, port: server.port), body: nil, limit: 1 << 20, timeout: .seconds(10))
    }

    @Test("requests one after another go on one kept connection, each with its own answer; a HEAD's length is the header's, with no body to read")
    func keptAlive() async throws {
        let server = try await Server(.answer)
        let transport = try HTTPTransport(host: "127.0.0.1", port: server.port, tls: nil)
        for index in 0..<20 {
            var head = Self.request(.PUT, "/bucket/object-\(index)", port: server.port)
            let body = ByteBuffer(repeating: 0x62, count: 1000 + index)
            head.headers.add(name: "content-length", value: String(body.readableBytes))
            let response = try await transport.execute(head, body: body, limit: 1 << 20, timeout: .seconds(10))
            #expect(response.status == 200)
            #expect(String(buffer: response.body) == "PUT /bucket/object-\(index) \(1000 + index)")
        }
        let head = try await transport.execute(Self.request(.HEAD, "/bucket/object-0", port: server.port), body: nil, limit: 1 << 20, timeout: .seconds(10))
        #expect(head.headers.first(name: "x-request") == "/bucket/object-0" && head.body.readableBytes == 0)
        let after = try await Self.get("/bucket/after-head", transport, from: server)
        #expect(String(buffer: after.body) == "GET /bucket/after-head 0")
        #expect(server.connections.withLockedValue { $0 } == 1)
        await transport.shutdown()
        await server.stop()
    }

    @Test("requests at once each get a connection, and every answer goes to its own request")
    func concurrent() async throws {
        let server = try await Server(.answer)
        let transport = try HTTPTransport(host: "127.0.0.1", port: server.port, tls: nil)
        let answers = try await withThrowingTaskGroup(of: (Int, String).self) { group in
            for index in 0..<32 {
                group.addTask {
                    let response = try await Self.get("/bucket/\(index)", transport, from: server)
                    return (index, String(buffer: response.body))
                }
            }
            return try await group.reduce(into: [:]) { $0[$1.0] = $1.1 }
        }
        #expect(answers.count == 32 && answers.allSatisfy { $0.value == "GET /bucket/\($0.key) 0" })
        #expect((1...32).contains(server.connections.withLockedValue { $0 }))
        await transport.shutdown()
        await server.stop()
    }

    @Test("a store that closes a kept connection as a request goes out on it: the request is answered on a new connection")
    func closedWhileKept() async throws {
        let server = try await Server(.closeOnSecondRequest)
        let transport = try HTTPTransport(host: "127.0.0.1", port: server.port, tls: nil)
        for index in 0..<5 {
            let response = try await Self.get("/bucket/\(index)", transport, from: server)
            #expect(String(buffer: response.body) == "GET /bucket/\(index) 0")
        }
        // Each request after the first was sent on a kept connection the server closed, then again on a new one.
        #expect(server.requests.withLockedValue { $0.count } == 9)
        #expect(server.connections.withLockedValue { $0 } == 5)
        await transport.shutdown()
        await server.stop()
    }

    @Test("an answer longer than the limit, and a store that never answers, fail with what happened; the transport goes on working")
    func limits() async throws {
        let large = try await Server(.large(64 << 10))
        let transport = try HTTPTransport(host: "127.0.0.1", port: large.port, tls: nil)
        await #expect(throws: HTTPTransport.Failure.self) {
            _ = try await transport.execute(Self.request(.GET, "/bucket/big", port: large.port), body: nil, limit: 1 << 10, timeout: .seconds(10))
        }
        let whole = try await transport.execute(Self.request(.GET, "/bucket/big", port: large.port), body: nil, limit: 1 << 20, timeout: .seconds(10))
        #expect(whole.body.readableBytes == 64 << 10)
        await transport.shutdown()
        await large.stop()

        let silent = try await Server(.silent)
        let waiting = try HTTPTransport(host: "127.0.0.1", port: silent.port, tls: nil)
        let started = ContinuousClock.now
        do {
            _ = try await waiting.execute(Self.request(.GET, "/bucket/x", port: silent.port), body: nil, limit: 1 << 20, timeout: .milliseconds(300))
            Issue.record("a store that never answers was taken for an answer")
        } catch let failure as HTTPTransport.Failure {
            #expect("\(failure)".contains("no answer within"))
        }
        #expect(ContinuousClock.now - started < .seconds(5))
        await waiting.shutdown()
        await silent.stop()
        // After shutdown, a request fails at once rather than opening connections nobody closes.
        await #expect(throws: HTTPTransport.Failure.self) {
            _ = try await waiting.execute(Self.request(.GET, "/bucket/x", port: silent.port), body: nil, limit: 1 << 20, timeout: .seconds(1))
        }
    }

    @Test("a request that may not be repeated (a POST) never goes on a kept connection: a server closing kept ones never makes it fail or arrive twice")
    func notRepeated() async throws {
        let server = try await Server(.closeOnSecondRequest)
        let transport = try HTTPTransport(host: "127.0.0.1", port: server.port, tls: nil)
        _ = try await Self.get("/first", transport, from: server)  // leaves a kept connection the server will close
        for index in 0..<3 {
            var head = Self.request(.POST, "/api/\(index)", port: server.port)
            head.headers.add(name: "content-length", value: "2")
            let response = try await transport.execute(head, body: ByteBuffer(string: "{}"), limit: 1 << 20, timeout: .seconds(10))
            #expect(String(buffer: response.body) == "POST /api/\(index) 2")
        }
        #expect(server.requests.withLockedValue { $0.filter { $0.hasPrefix("POST") } } == ["POST /api/0 2", "POST /api/1 2", "POST /api/2 2"])
        #expect(server.connections.withLockedValue { $0 } == 4, "one connection for the GET, a new one for each POST")
        await transport.shutdown()
        await server.stop()
    }

    @Test("the TLS server name is the host's name, never an address; brackets around an IPv6 address are dropped and put back in Host")
    func serverNames() throws {
        #expect(HTTPTransport.serverName(for: "s3.example.com") == "s3.example.com")
        #expect(HTTPTransport.serverName(for: "rig-coordinator") == "rig-coordinator")
        #expect(HTTPTransport.serverName(for: "10.0.0.5") == nil)
        #expect(HTTPTransport.serverName(for: "fd00::5") == nil)
        let v6 = try HTTPTransport(host: "[fd00::5]", port: 8443, tls: nil)
        #expect(v6.host == "fd00::5" && v6.authority == "[fd00::5]:8443")
        #expect(try HTTPTransport(host: "store", port: 9000, tls: nil).authority == "store:9000")
    }

    @Test("a connection sets TCP_NODELAY at the TCP level and no socket option that needs a privilege, so an agent without capabilities (the packaged service) can connect")
    func unprivilegedSocketOptions() async throws {
        let server = try await Server(.answer)
        let transport = try HTTPTransport(host: "127.0.0.1", port: server.port, tls: nil)
        let connection = try await transport.connect()
        let noDelay = try await connection.channel.getOption(.tcpOption(.tcp_nodelay)).get()
        let debug = try await connection.channel.getOption(.socketOption(NIOBSDSocket.Option(rawValue: SO_DEBUG))).get()
        #expect(noDelay != 0, "TCP_NODELAY is set")
        #expect(debug == 0, "SO_DEBUG (CAP_NET_ADMIN) is not set: TCP_NODELAY's number at the socket level is SO_DEBUG's")
        try await connection.channel.close()
        await transport.shutdown()
        await server.stop()
    }
}
