import CamRigSecurity
import Foundation
import Hummingbird
import HummingbirdWebSocket
import NIOCore
import NIOSSL
import X509

/// Each request's context: Hummingbird's, the connection it came on (for its client certificate),
/// and who the caller turned out to be.
public struct ServiceRequestContext: RequestContext, WebSocketRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let webSocket: WebSocketHandlerReference<Self>
    let channel: any Channel
    /// Set by `AccessMiddleware` before any route runs.
    public var access: Access?

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        webSocket = .init()
        channel = source.channel
    }

    /// The request size limit: settings and capture requests are small.
    public var maxUploadSize: Int { 64 * 1024 }

    /// The client certificate the connection was opened with, already verified during the handshake.
    func peerCertificate() async -> Certificate? {
        let channel = self.channel
        let certificate = try? await channel.eventLoop.submit { () -> NIOSSLCertificate? in
            try channel.pipeline.syncOperations.handler(type: NIOSSLServerHandler.self).peerCertificate
        }.get()
        guard let certificate, let der = try? certificate.toDERBytes() else { return nil }
        return try? Certificate(derEncoded: der)
    }
}

/// Finds out who calls and refuses what their role does not allow.
///
/// A caller is an operator or a viewer by their client certificate's role (coordinator: operator), or
/// by an access token (`camrig certs token`) sent as `Authorization: Bearer TOKEN` or in the
/// `camrig_token` cookie that `/login?token=` sets for browsers. The console's static files and
/// `/login` need no access; everything else does, and viewers may only read.
struct AccessMiddleware: RouterMiddleware {
    typealias Context = ServiceRequestContext
    let trustRoot: Certificate
    /// Whether a client certificate has been revoked since its connection was opened.
    let isRevoked: @Sendable (Certificate) -> Bool
    /// Origins besides the service's own that browsers may change the rig from (a reverse proxy's).
    let allowedOrigins: Set<String>
    /// When a token id was revoked, or nil.
    let revokedToken: @Sendable (String) -> Date?

    static let cookieName = "camrig_token"

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        let path = request.uri.path
        if Self.isPublic(path) { return try await next(request, context) }
        if let refusal = Self.crossSite(request, allowedOrigins: allowedOrigins) { throw ServiceError(.forbidden, refusal) }
        context.access = try await Self.access(for: request, context: context, trustRoot: trustRoot, isRevoked: isRevoked, revokedToken: revokedToken)
        guard let access = context.access else {
            throw ServiceError(
                .unauthorized,
                "no client certificate and no access token: present a coordinator or viewer certificate, or send a token from `camrig certs token` (Authorization: Bearer TOKEN, or open /login?token=TOKEN in a browser)")
        }
        if access.role == .viewer, request.method != .get, request.method != .head {
            throw ServiceError(
                .forbidden,
                "\(access.name) has the viewer role, which is read-only (status, previews, captures): \(request.method) \(path) takes the operator role (a coordinator certificate, or a token from `camrig certs token --role operator`)")
        }
        return try await next(request, context)
    }

    /// What needs no access: signing in and out, the API document, and the console's own files (they
    /// hold no rig data). Named exactly: anything else, however spelled, needs access.
    static let publicPaths: Set<String> = ["/", "/index.html", "/console.js", "/console.css", "/login", "/logout", "/openapi.yaml"]

    static func isPublic(_ path: String) -> Bool { publicPaths.contains(path) }

    /// A request that changes something, or opens the events socket, from a page of another site: a
    /// browser holding a client certificate would send it along. Such requests must come from the
    /// console's own origin (when the browser names one) and carry JSON (which a form cannot send
    /// without asking the service first).
    static func crossSite(_ request: Request, allowedOrigins: Set<String> = []) -> String? {
        let mutating = request.method != .get && request.method != .head
        let upgrade = request.headers[.upgrade]?.lowercased() == "websocket"
        guard mutating || upgrade else { return nil }
        if let origin = request.headers[.origin], let host = request.head.authority, origin != "https://\(host)", !allowedOrigins.contains(origin) {
            return "requests from \(origin) may not change the rig or watch its events; use the console at https://\(host)/"
        }
        if mutating, request.method != .delete, request.uri.path != "/logout" {
            let type = request.headers[.contentType]?.lowercased() ?? ""
            guard type.hasPrefix("application/json") else {
                return "\(request.method) \(request.uri.path) takes Content-Type: application/json"
            }
        }
        return nil
    }

    static func access(
        for request: Request, context: ServiceRequestContext, trustRoot: Certificate, isRevoked: @Sendable (Certificate) -> Bool,
        revokedToken: @Sendable (String) -> Date?
    ) async throws -> Access? {
        if let certificate = await context.peerCertificate(), let identity = try? PeerIdentity(certificate: certificate),
            let access = Access(certificate: identity)
        {
            guard !isRevoked(certificate) else {
                throw ServiceError(.unauthorized, "the certificate of '\(identity.name)' was revoked; this connection may do nothing more")
            }
            return access
        }
        var token: String?
        if let authorization = request.headers[.authorization], authorization.lowercased().hasPrefix("bearer ") {
            token = String(authorization.dropFirst(7)).trimmingCharacters(in: .whitespaces)
        } else if let cookie = request.cookies[cookieName] {
            token = cookie.value
        }
        guard let token else { return nil }
        switch AccessTokens.verify(token, trustRoot: trustRoot, revokedAt: revokedToken) {
        case .success(let access): return access
        case .failure(let refusal): throw ServiceError(.unauthorized, refusal.description)
        }
    }
}
