import CamRigSecurity
import CamRigStorage
import CamRigWire
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// Zero-touch enrollment (`/enroll/v1/…`, no access needed: the join token or the agent's own certificate
/// is the credential) and the enrolments list for the console (`/api/v1/enrollments`).
struct EnrollmentController {
    let service: RigService

    var publicRoutes: RouteCollection<ServiceRequestContext> {
        let routes = RouteCollection(context: ServiceRequestContext.self)
        let service = self.service
        routes.get("/enroll/v1/ca") { _, _ in
            let registrar = try Self.registrar(service)
            return Response(status: .ok, headers: [.contentType: "application/x-pem-file"], body: .init(byteBuffer: ByteBuffer(string: registrar.caPEM)))
        }
        routes.get("/enroll/v1/crl") { _, _ in
            let registrar = try Self.registrar(service)
            guard let pem = try await BlockingWork.run({ registrar.revocationListPEM() }) else { return Response(status: .noContent) }
            return Response(status: .ok, headers: [.contentType: "application/x-pem-file"], body: .init(byteBuffer: ByteBuffer(string: pem)))
        }
        routes.post("/enroll/v1/join") { request, context in
            try await Self.issue(Enrollment.JoinRequest.self, request, context, service: service, what: "enrolment") { $0.join($1, from: $2) }
        }
        routes.post("/enroll/v1/renew") { request, context in
            try await Self.issue(Enrollment.RenewRequest.self, request, context, service: service, what: "renewal") { $0.renew($1, from: $2) }
        }
        return routes
    }

    /// `/api/v1/enrollments`: every enrolment, newest first.
    var routes: RouteCollection<AuthenticatedContext> {
        let routes = RouteCollection(context: AuthenticatedContext.self)
        let service = self.service
        routes.get("enrollments") { _, _ in
            let registrar = service.enrollment
            // Off the cooperative pool: an enrolment holds the ledger while it is flushed.
            let records = try await BlockingWork.run { registrar?.records ?? [] }
            let output = EnrollmentsOutput(enabled: registrar != nil, enrollments: records)
            return Response(
                status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(data: try Enrollment.encoder.encode(output))))
        }
        return routes
    }

    struct EnrollmentsOutput: Encodable {
        var enabled: Bool
        var enrollments: [Enrollment.Record]
    }

    static func registrar(_ service: RigService) throws -> EnrollmentRegistrar {
        guard let registrar = service.enrollment else {
            throw ServiceError(.notFound, "enrollment is off on this service: start it with `camrig serve --enroll` (its TLS directory must hold the CA's key)")
        }
        return registrar
    }

    /// A join or renewal: the JSON body decoded, `registrar` asked on a thread that may block (it writes the
    /// ledger durably), and its answer.
    static func issue<Body: Decodable & Sendable>(
        _ type: Body.Type, _ request: Request, _ context: ServiceRequestContext, service: RigService, what: String,
        _ ask: @escaping @Sendable (EnrollmentRegistrar, Body, String) -> Result<(Enrollment.Issued, EnrollmentRegistrar.Member), EnrollmentRegistrar.Refusal>
    ) async throws -> Response {
        let registrar = try registrar(service)
        let contentType = request.headers[.contentType] ?? ""
        guard contentType.lowercased().hasPrefix("application/json") else {
            throw ServiceError(.unsupportedMediaType, "\(request.uri.path) takes Content-Type: application/json" + (contentType.isEmpty ? "" : ", not \(contentType)"))
        }
        let body = try await ServiceRoutes.decode(type, request, context)
        let address = context.channel.remoteAddress?.ipAddress ?? "unknown"
        let outcome = try await BlockingWork.run { ask(registrar, body, address) }
        return try await answer(outcome, service: service, address: address, what: what)
    }

    /// The certificate, with the member connected to; or the refusal, logged with its reason.
    static func answer(
        _ outcome: Result<(Enrollment.Issued, EnrollmentRegistrar.Member), EnrollmentRegistrar.Refusal>, service: RigService, address: String, what: String
    ) async throws -> Response {
        switch outcome {
        case .success(let (issued, member)):
            await service.admit(member, renewal: what == "renewal")
            return Response(
                status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(data: try Enrollment.encoder.encode(issued))))
        case .failure(let refusal):
            await service.refused(refusal.reason, address: address, what: what)
            let kind: ServiceError.Kind =
                switch refusal.kind {
                case .badRequest: .badRequest
                case .forbidden: .forbidden
                case .conflict: .conflict
                }
            throw ServiceError(kind, refusal.reason)
        }
    }
}
