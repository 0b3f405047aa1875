import CamRigSecurity
import Foundation
import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import HummingbirdWebSocket
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOSSL
import ServiceLifecycle
import X509

/// The service's HTTPS server: the API, events, metrics and console behind TLS, where clients may
/// present a coordinator or viewer certificate of the rig's authority (checked as agents check
/// theirs) or come without one and show an access token.
public enum ServiceServer {
    /// Where the console's files are: the folder named; else the build's resource folder next to this
    /// program (`CamRig_CamRigService.resources/Console`), else where deploy/ installs them.
    public static func consoleDirectory(_ override: String? = nil) -> String {
        if let override { return override }
        let program = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
        let candidates = [
            program.appendingPathComponent("CamRig_CamRigService.resources/Console").path,
            "/usr/local/share/camrig/console", "/usr/share/camrig/console",
        ]
        return candidates.first { FileManager.default.fileExists(atPath: $0 + "/index.html") } ?? candidates[0]
    }

    /// The host a service listening on `host` names in the address it prints: 127.0.0.1 for every address
    /// (0.0.0.0, ::), else the one listened on. The coordinator's certificate names it (`camrig certs init`).
    public static func shownHost(_ host: String) -> String {
        host == "0.0.0.0" || host == "::" ? "127.0.0.1" : host
    }

    /// The server's TLS: the coordinator's certificate from `directory`, client certificates asked for
    /// but optional, and any that is presented verified against the authority, its revocation list and
    /// the coordinator and viewer roles (a refused certificate ends the handshake).
    public static func tlsConfiguration(directory: TLSDirectory, identityName: String?, verifier: ReloadingVerifier) throws -> TLSChannelConfiguration {
        let (_, certificate, key, root) = try directory.nioIdentity(named: identityName, roles: [.coordinator])
        var configuration = TLSConfiguration.makeServerConfiguration(certificateChain: [.certificate(certificate)], privateKey: .privateKey(key))
        configuration.minimumTLSVersion = .tlsv12
        configuration.certificateVerification = .optionalVerification
        configuration.trustRoots = .certificates([root])
        return TLSChannelConfiguration(tlsConfiguration: configuration) { certificates in
            guard let chain = try? certificates.map({ try Certificate(derEncoded: try $0.toDERBytes()) }) else { return .failed }
            if case .accepted = await verifier.current().verify(chain: chain) { return .certificateVerified }
            return .failed
        }
    }

    /// The application serving `service` on `host:port` (port 0: any free port, reported to `onRunning`).
    public static func application(
        service: RigService,
        host: String,
        port: Int,
        tls: TLSChannelConfiguration,
        trustRoot: Certificate,
        verifier: ReloadingVerifier? = nil,
        revokedTokens: TokenDenyList? = nil,
        allowedOrigins: Set<String> = [],
        consoleDirectory: String,
        connectionTimeout: TimeAmount = .seconds(30),
        logger: Logger,
        onRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) throws -> some ApplicationProtocol {
        let isRevoked: @Sendable (Certificate) -> Bool = { certificate in verifier?.isRevoked(certificate) ?? false }
        let revokedToken: @Sendable (String) -> Date? = { id in revokedTokens?.revokedAt(id) }
        let router = ServiceRoutes.router(
            service: service, trustRoot: trustRoot, consoleDirectory: consoleDirectory, isRevoked: isRevoked, allowedOrigins: allowedOrigins,
            revokedToken: revokedToken)
        let gate = AccessGate(trustRoot: trustRoot, isRevoked: isRevoked, allowedOrigins: allowedOrigins, revokedToken: revokedToken)
        // A connection that sends no request within 30 s of opening (a stalled handshake included:
        // nothing decrypted arrives) is closed, so is one idle for 30 s between requests, and at most
        // 1024 are open at once: peers without a certificate cannot take the descriptors the agents'
        // connections need.
        let http = HTTP1WebSocketUpgradeChannel.Configuration(http1: .init(idleTimeout: connectionTimeout))
        let webSocketResponder = router.buildResponder()
        let server = HTTPServerBuilder { responder in
            FirstRequestTimeoutChannel(
                base: try TLSChannel(
                    HTTP1WebSocketUpgradeChannel(responder: responder, webSocketResponder: webSocketResponder, configuration: http), configuration: tls),
                after: connectionTimeout, gate: gate)
        }
        return Application(
            router: router,
            server: server,
            configuration: ApplicationConfiguration(
                address: .hostname(host, port: port), serverName: "camrig",
                availableConnectionsDelegate: MaximumAvailableConnections(1024, logger: logger)),
            onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? port) },
            logger: logger)
    }
}


/// The client-certificate verifier, with the revocation list re-read whenever `crl.pem` changes: a
/// certificate revoked while the service runs is refused from its next connection on. A list the CA
/// did not sign is ignored (the previous one stays in force).
public final class ReloadingVerifier: Sendable {
    private let directory: TLSDirectory
    private let state: NIOLockedValueBox<(verifier: PeerCertificateVerifier, modified: Date?)>

    /// Accepts certificates of `directory`'s authority in the coordinator and viewer roles.
    public init(directory: TLSDirectory) throws {
        self.directory = directory
        let trustRoot = try directory.trustRoot()
        let verifier = PeerCertificateVerifier(
            trustRoot: trustRoot, acceptedRoles: [.coordinator, .viewer], revocations: try directory.revocationList(verifiedBy: trustRoot))
        state = NIOLockedValueBox((verifier, Self.modified(directory.revocationListPath)))
    }

    /// Whether `certificate` is on the current revocation list: checked at every request, so that a
    /// connection opened before the revocation loses its access too.
    public func isRevoked(_ certificate: Certificate) -> Bool {
        current().revocations?.entry(for: certificate.serialNumber) != nil
    }

    static func modified(_ path: String) -> Date? {
        (try? FileManager.default.attributesOfItem(atPath: path))?[.modificationDate] as? Date
    }

    func current() -> PeerCertificateVerifier {
        let modified = Self.modified(directory.revocationListPath)
        return state.withLockedValue { state in
            guard modified != state.modified else { return state.verifier }
            state.modified = modified
            if let list = try? directory.revocationList(verifiedBy: state.verifier.trustRoot) {
                state.verifier = PeerCertificateVerifier(trustRoot: state.verifier.trustRoot, acceptedRoles: state.verifier.acceptedRoles, revocations: list)
            }
            return state.verifier
        }
    }
}

/// A server channel that closes a connection which has not sent anything decrypted within `after` of
/// opening (a silent peer, a stalled TLS handshake): Hummingbird's idle timeout starts with the first
/// request only.
///
/// It also puts an `UpgradeGate` in front of the WebSocket upgrade.
struct FirstRequestTimeoutChannel<Base: ServerChildChannel>: ServerChildChannel {
    typealias Value = Base.Value
    let base: Base
    let after: TimeAmount
    let gate: AccessGate

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        base.setup(channel: channel, logger: logger).flatMapThrowing { value in
            let pipeline = channel.pipeline.syncOperations
            let timeout = FirstRequestTimeout(after: after)
            if let tls = try? pipeline.handler(type: NIOSSLServerHandler.self) {
                try pipeline.addHandler(timeout, position: .after(tls))
            } else {
                try pipeline.addHandler(timeout, position: .first)
            }
            if let decoder = try? pipeline.handler(type: ByteToMessageHandler<HTTPRequestDecoder>.self) {
                try pipeline.addHandler(UpgradeGate(gate: gate), position: .after(decoder))
            }
            return value
        }
    }

    func handle(value: Value, logger: Logger) async {
        await base.handle(value: value, logger: logger)
    }
}

/// Closes its connection when nothing was read `after` it opened.
final class FirstRequestTimeout: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny
    private let after: TimeAmount
    private var timer: Scheduled<Void>?

    init(after: TimeAmount) { self.after = after }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { start(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        start(context)
        context.fireChannelActive()
    }

    private func start(_ context: ChannelHandlerContext) {
        guard timer == nil else { return }
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(in: after) { loopBound.value.close(promise: nil) }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        timer?.cancel()
        context.fireChannelRead(data)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
    }
}

/// Lets a WebSocket upgrade through only when the caller may open it. Refused, the request goes on as
/// a plain request with its upgrade headers taken off, so that the router answers it with the problem
/// (401, 403) any other request would get; an upgrade refused later can only be an empty 400.
final class UpgradeGate: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    let gate: AccessGate

    init(gate: AccessGate) { self.gate = gate }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // Only a connection's first request may be an upgrade (NIO's upgrade handler looks at no other):
        // the gate leaves once it has seen it, before any WebSocket bytes could reach it.
        guard case .head(var head) = unwrapInboundIn(data) else { return context.fireChannelRead(data) }
        defer { context.pipeline.syncOperations.removeHandler(context: context, promise: nil) }
        guard head.headers.first(name: "upgrade")?.lowercased() == "websocket", refuses(head, context) else { return context.fireChannelRead(data) }
        head.headers.remove(name: "upgrade")
        let connection = head.headers[canonicalForm: "connection"].filter { $0.lowercased() != "upgrade" }.joined(separator: ", ")
        head.headers.remove(name: "connection")
        if !connection.isEmpty { head.headers.add(name: "connection", value: connection) }
        context.fireChannelRead(wrapInboundOut(.head(head)))
    }

    private func refuses(_ head: HTTPRequestHead, _ context: ChannelHandlerContext) -> Bool {
        let headers = head.headers
        if gate.crossSite(method: head.method.rawValue, upgrade: "websocket", origin: headers.first(name: "origin"), host: headers.first(name: "host")) != nil {
            return true
        }
        let peer = (try? context.pipeline.syncOperations.handler(type: NIOSSLServerHandler.self))?.peerCertificate.flatMap(Certificate.init)
        let cookie = headers.first(name: "cookie").flatMap { AccessGate.cookie(AccessGate.cookieName, in: $0) }
        do {
            return try gate.access(certificate: peer, authorization: headers.first(name: "authorization"), cookie: cookie) == nil
        } catch {
            return true
        }
    }
}
