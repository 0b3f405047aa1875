import CamRigSecurity
import Foundation
import Hummingbird
import HummingbirdWebSocket
import NIOCore
import NIOSSL
import X509

/// Each request's context: Hummingbird's, the connection it came on (for its client certificate),
/// and who the caller turned out to be (set by `AccessMiddleware` on every route that needs access).
public struct ServiceRequestContext: RequestContext, WebSocketRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let webSocket: WebSocketHandlerReference<Self>
    let channel: any Channel
    /// Set by `AccessMiddleware` before any route that needs access runs; nil on public routes.
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
        return certificate.flatMap(Certificate.init)
    }
}

/// The context of the API's routes: the caller's access is known (`AccessMiddleware` refused the
/// request otherwise).
public struct AuthenticatedContext: ChildRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let access: Access

    public init(context: ServiceRequestContext) throws {
        guard let access = context.access else {
            throw ServiceError(.unauthorized, "sign in first: present a coordinator or viewer certificate, or send a token from `camrig certs token`")
        }
        coreContext = context.coreContext
        self.access = access
    }

    public var maxUploadSize: Int { 64 * 1024 }
}

extension Certificate {
    /// The certificate NIOSSL holds, in swift-certificates' type.
    init?(_ certificate: NIOSSLCertificate) {
        guard let der = try? certificate.toDERBytes(), let parsed = try? Certificate(derEncoded: der) else { return nil }
        self = parsed
    }
}

/// Finds out who calls and refuses what their role does not allow.
///
/// A caller is an operator or a viewer by their client certificate's role (coordinator: operator), or
/// by an access token (`camrig certs token`) sent as `Authorization: Bearer TOKEN` or in the
/// `camrig_token` cookie that `/login?token=` sets for browsers. The console's static files and
/// `/login` need no access; everything else does, and viewers may only read. A request that changes
/// something must carry JSON (415 otherwise).
struct AccessMiddleware: RouterMiddleware {
    typealias Context = ServiceRequestContext
    let gate: AccessGate

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        let path = request.uri.path
        if AccessGate.isPublic(path) { return try await next(request, context) }
        if let refusal = gate.crossSite(
            method: request.method.rawValue, upgrade: request.headers[.upgrade], origin: request.headers[.origin], host: request.head.authority)
        {
            throw ServiceError(.forbidden, refusal)
        }
        let access = try gate.access(
            certificate: await context.peerCertificate(), authorization: request.headers[.authorization], cookie: request.cookies[AccessGate.cookieName]?.value)
        guard let access else {
            throw ServiceError(
                .unauthorized,
                "no client certificate and no access token: present a coordinator or viewer certificate, or send a token from `camrig certs token` (Authorization: Bearer TOKEN, or open /login?token=TOKEN in a browser)")
        }
        context.access = access
        if access.role == .viewer, request.method != .get, request.method != .head {
            throw ServiceError(
                .forbidden,
                "\(access.name) has the viewer role, which is read-only (status, previews, captures): \(request.method) \(path) takes the operator role (a coordinator certificate, or a token from `camrig certs token --role operator`)")
        }
        if Self.takesJSON(request.method), Self.hasBody(request) {
            let type = request.headers[.contentType]?.lowercased() ?? ""
            guard type.hasPrefix("application/json") else {
                throw ServiceError(.unsupportedMediaType, "\(request.method) \(path) takes Content-Type: application/json" + (type.isEmpty ? "" : ", not \(type)"))
            }
        }
        return try await next(request, context)
    }

    /// Whether the request comes with a body (an empty one needs no type).
    static func hasBody(_ request: Request) -> Bool {
        if let length = request.headers[.contentLength].flatMap({ Int($0) }) { return length > 0 }
        return request.headers[.transferEncoding] != nil
    }

    /// Methods whose requests carry a JSON body here (a form cannot send JSON without asking first, which
    /// keeps other sites' pages from changing the rig with a browser's certificate).
    static func takesJSON(_ method: HTTPRequest.Method) -> Bool {
        method == .post || method == .put || method == .patch
    }
}

/// Who may do what: the checks `AccessMiddleware` makes on each request, and `UpgradeGate` on a
/// WebSocket upgrade before it is answered.
struct AccessGate: Sendable {
    let trustRoot: Certificate
    /// Whether a client certificate has been revoked since its connection was opened.
    let isRevoked: @Sendable (Certificate) -> Bool
    /// Origins besides the service's own that browsers may change the rig from (a reverse proxy's).
    let allowedOrigins: Set<String>
    /// When a token id was revoked, or nil.
    let revokedToken: @Sendable (String) -> Date?

    static let cookieName = "camrig_token"

    /// What needs no access: signing in and out, the API document, and the console's own files (they
    /// hold no rig data). Named exactly: anything else, however spelled, needs access.
    /// Enrollment's routes carry their own credential (a join token, or the agent's certificate and a proof).
    static let publicPaths: Set<String> = [
        "/", "/index.html", "/console.js", "/console.css", "/login", "/logout", "/openapi.yaml",
        "/enroll/v1/ca", "/enroll/v1/crl", "/enroll/v1/join", "/enroll/v1/renew",
    ]

    static func isPublic(_ path: String) -> Bool { publicPaths.contains(path) }

    /// A request that changes something, or opens a WebSocket, from a page of another site: a browser
    /// holding a client certificate would send it along. Such requests must come from the console's own
    /// origin (when the browser names one).
    func crossSite(method: String, upgrade: String?, origin: String?, host: String?) -> String? {
        let mutating = method != "GET" && method != "HEAD"
        let isUpgrade = upgrade?.lowercased() == "websocket"
        guard mutating || isUpgrade else { return nil }
        if let origin, let host, origin != "https://\(host)", !allowedOrigins.contains(origin) {
            return "requests from \(origin) may not change the rig or watch its events; use the console at https://\(host)/"
        }
        return nil
    }

    /// The caller's access: by client certificate, else by token; nil when neither is there; an error
    /// when the one presented is refused.
    func access(certificate: Certificate?, authorization: String?, cookie: String?) throws -> Access? {
        if let certificate, let identity = try? PeerIdentity(certificate: certificate), let access = Access(certificate: identity) {
            guard !isRevoked(certificate) else {
                throw ServiceError(.unauthorized, "the certificate of '\(identity.name)' was revoked; this connection may do nothing more")
            }
            return access
        }
        var token: String?
        if let authorization, authorization.lowercased().hasPrefix("bearer ") {
            token = String(authorization.dropFirst(7)).trimmingCharacters(in: .whitespaces)
        } else if let cookie {
            token = cookie
        }
        guard let token else { return nil }
        switch AccessTokens.verify(token, trustRoot: trustRoot, revokedAt: revokedToken) {
        case .success(let access): return access
        case .failure(let refusal): throw ServiceError(.unauthorized, refusal.description)
        }
    }

    /// The value of cookie `name` in a `Cookie` header.
    static func cookie(_ name: String, in header: String) -> String? {
        for pair in header.split(separator: ";") {
            let parts = pair.split(separator: "=", maxSplits: 1)
            if parts.count == 2, parts[0].trimmingCharacters(in: .whitespaces) == name { return String(parts[1]).trimmingCharacters(in: .whitespaces) }
        }
        return nil
    }
}
