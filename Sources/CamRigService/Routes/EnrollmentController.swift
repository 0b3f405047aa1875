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
            let registrar = try Self.registrar(service)
            let body = try await Self.decode(Enrollment.JoinRequest.self, request, context)
            let address = Self.address(context)
            let outcome = try await BlockingWork.run { registrar.join(body, from: address) }
            return try await Self.answer(outcome, service: service, address: address, what: "enrolment")
        }
        routes.post("/enroll/v1/renew") { request, context in
            let registrar = try Self.registrar(service)
            let body = try await Self.decode(Enrollment.RenewRequest.self, request, context)
            let address = Self.address(context)
            let outcome = try await BlockingWork.run { registrar.renew(body, from: address) }
            return try await Self.answer(outcome, service: service, address: address, what: "renewal")
        }
        return routes
    }

    /// `/api/v1/enrollments`: every enrolment, newest first.
    var routes: RouteCollection<AuthenticatedContext> {
        let routes = RouteCollection(context: AuthenticatedContext.self)
        let service = self.service
        routes.get("enrollments") { _, _ in
            let registrar = service.enrollment
            let output = EnrollmentsOutput(enabled: registrar != nil, enrollments: registrar?.records ?? [])
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

    static func address(_ context: ServiceRequestContext) -> String {
        context.channel.remoteAddress?.ipAddress ?? "unknown"
    }

    static func decode<T: Decodable>(_ type: T.Type, _ request: Request, _ context: ServiceRequestContext) async throws -> T {
        let contentType = request.headers[.contentType] ?? ""
        guard contentType.lowercased().hasPrefix("application/json") else {
            throw ServiceError(.unsupportedMediaType, "\(request.uri.path) takes Content-Type: application/json" + (contentType.isEmpty ? "" : ", not \(contentType)"))
        }
        var request = request
        let body: ByteBuffer
        do {
            body = try await request.collectBody(upTo: context.maxUploadSize)
        } catch {
            throw ServiceError(.tooLarge, "the request body is larger than \(context.maxUploadSize) bytes")
        }
        do {
            return try Enrollment.decoder.decode(T.self, from: Data(buffer: body))
        } catch {
            throw ServiceError(.badRequest, "the request body is not the JSON this route takes (see /openapi.yaml): \(error)")
        }
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
