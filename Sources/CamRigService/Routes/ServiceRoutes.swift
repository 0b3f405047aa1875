import CamRigStorage
import CamRigViews
import Foundation
import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers
import NIOCore
import X509

/// The HTTP API (`/api/v1`), the WebSockets, `/metrics`, `/login` and the console's files: the router
/// of one controller per area. `openapi.yaml` (served at `/openapi.yaml`) documents every route here.
public enum ServiceRoutes {
    /// Builds the router: the API behind `AccessMiddleware`, the console's files from `consoleDirectory`.
    public static func router(
        service: RigService, trustRoot: Certificate, consoleDirectory: String,
        isRevoked: @escaping @Sendable (Certificate) -> Bool = { _ in false }, allowedOrigins: Set<String> = [],
        revokedToken: @escaping @Sendable (String) -> Date? = { _ in nil }
    ) -> Router<ServiceRequestContext> {
        let gate = AccessGate(trustRoot: trustRoot, isRevoked: isRevoked, allowedOrigins: allowedOrigins, revokedToken: revokedToken)
        let router = Router(context: ServiceRequestContext.self)
        let table = RouteTable()
        router.add(middleware: ProblemMiddleware(routes: table))
        router.add(middleware: AccessMiddleware(gate: gate))
        router.add(middleware: FileMiddleware(consoleDirectory, urlBasePath: "/", searchForIndexHtml: true))
        router.addRoutes(AccessController(gate: gate, consoleDirectory: consoleDirectory).publicRoutes)
        router.addRoutes(EnrollmentController(service: service).publicRoutes)
        router.addRoutes(EventsController(service: service).webSocketRoutes, atPath: "/api/v1")
        router.addRoutes(PreviewsController(service: service).webSocketRoutes, atPath: "/api/v1")
        router.addRoutes(RigController(service: service).metricsRoutes)
        let api = router.group("/api/v1", context: AuthenticatedContext.self)
        api.addRoutes(AccessController(gate: gate, consoleDirectory: consoleDirectory).routes)
        api.addRoutes(RigController(service: service).routes)
        api.addRoutes(AgentsController(service: service).routes)
        api.addRoutes(DevicesController(service: service).routes)
        api.addRoutes(CapturesController(service: service).routes)
        api.addRoutes(EventsController(service: service).routes)
        api.addRoutes(EnrollmentController(service: service).routes)
        table.set(router.routes.map { ("\($0.path)", $0.method) })
        return router
    }

    // MARK: Helpers

    static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok, location: String? = nil) throws -> Response {
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.outputFormatting = [.sortedKeys]
        var headers: HTTPFields = [.contentType: "application/json"]
        if let location { headers[.location] = location }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(data: try encoder.encode(value))))
    }

    static func decode<T: Decodable>(_ type: T.Type, _ request: Request, _ context: some RequestContext, emptyAs empty: T? = nil) async throws -> T {
        var request = request
        let body: ByteBuffer
        do {
            body = try await request.collectBody(upTo: context.maxUploadSize)
        } catch {
            throw ServiceError(.tooLarge, "the request body is larger than \(context.maxUploadSize) bytes")
        }
        if body.readableBytes == 0, let empty { return empty }
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        do {
            return try decoder.decode(T.self, from: Data(buffer: body))
        } catch {
            throw ServiceError(.badRequest, "the request body is not the JSON this route takes (see /openapi.yaml): \(error)")
        }
    }

    /// AGENT/DEVICE from the path, each part percent-decoded (a device id may hold ':' or spaces).
    static func cameraName(_ context: some RequestContext) throws -> String {
        let agent = try context.parameters.require("agent")
        let device = try context.parameters.require("device")
        return "\(agent.removingPercentEncoding ?? agent)/\(device.removingPercentEncoding ?? device)"
    }
}

/// The routes the router serves, as path patterns with their methods: what `ProblemMiddleware` needs to
/// tell an unknown path (404) from a method the path does not take (405).
final class RouteTable: Sendable {
    private let routes = NIOLockedValueBox<[(segments: [Substring], method: HTTPRequest.Method)]>([])

    func set(_ routes: [(path: String, method: HTTPRequest.Method)]) {
        let split = routes.map { (segments: $0.path.split(separator: "/"), method: $0.method) }
        self.routes.withLockedValue { $0 = split }
    }

    /// The methods `path` is served with (none: an unknown path). As the router does, a segment written
    /// out wins over a parameter at its place: /captures/recording is not /captures/{capture}.
    func methods(of path: String) -> [HTTPRequest.Method] {
        let segments = path.split(separator: "/")
        let isParameter = { (pattern: Substring) in (pattern.hasPrefix("{") && pattern.hasSuffix("}")) || pattern.hasPrefix(":") }
        var candidates = routes.withLockedValue { routes in
            routes.filter { route in
                route.segments.count == segments.count
                    && zip(route.segments, segments).allSatisfy { pattern, segment in isParameter(pattern) || pattern == segment }
            }
        }
        for (index, segment) in segments.enumerated() where candidates.contains(where: { $0.segments[index] == segment }) {
            candidates.removeAll { isParameter($0.segments[index]) }
        }
        return candidates.map(\.method)
    }
}

/// Answers every error as a problem document: an unknown path is a 404 naming it, a method the path
/// does not take a 405 with `Allow`, a storage failure (the catalog unreachable, a file unreadable) a
/// 503 saying which and why, and Hummingbird's own errors keep their status.
struct ProblemMiddleware: RouterMiddleware {
    typealias Context = ServiceRequestContext
    let routes: RouteTable

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as ServiceError {
            throw error
        } catch let error as StorageError {
            // The catalog or the captures' files: what failed and what to do, not an empty 500.
            throw ServiceError(.unavailable, error.description)
        } catch let error as HTTPError where error.status == .notFound {
            let path = request.uri.path
            let allowed = routes.methods(of: path)
            guard !allowed.isEmpty, !allowed.contains(request.method) else {
                throw ServiceError(.notFound, "no route \(path) (GET /openapi.yaml lists the API's routes)")
            }
            var refusal = ServiceError(.methodNotAllowed, "\(path) takes \(allowed.map(\.rawValue).joined(separator: ", ")), not \(request.method)")
            refusal.headers = [(.allow, allowed.map(\.rawValue).joined(separator: ", "))]
            throw refusal
        } catch let error as HTTPError {
            throw ServiceError(httpStatus: error.status, detail: error.body ?? error.status.reasonPhrase)
        }
    }
}

extension ServiceError {
    /// A problem for an HTTP status Hummingbird chose.
    init(httpStatus status: HTTPResponse.Status, detail: String) {
        let kind: Kind =
            switch status {
            case .unauthorized: .unauthorized
            case .forbidden: .forbidden
            case .notFound: .notFound
            case .methodNotAllowed: .methodNotAllowed
            case .contentTooLarge: .tooLarge
            case .unsupportedMediaType: .unsupportedMediaType
            default: .badRequest
            }
        self.init(kind, detail)
    }
}
