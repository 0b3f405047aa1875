import CamRigSecurity
import CamRigStorage
import Foundation
import Hummingbird
import NIOCore

/// Signing in and out, who the caller is, and the API document.
struct AccessController {
    let gate: AccessGate
    let consoleDirectory: String

    /// `/login`, `/logout` and `/openapi.yaml`: no access needed.
    var publicRoutes: RouteCollection<ServiceRequestContext> {
        let routes = RouteCollection(context: ServiceRequestContext.self)
        let (gate, consoleDirectory) = (self.gate, self.consoleDirectory)
        routes.get("/login") { request, _ in
            guard let token = request.uri.queryParameters.get("token") else {
                throw ServiceError(.badRequest, "give the token: /login?token=TOKEN (from `camrig certs token`)")
            }
            switch AccessTokens.verify(token, trustRoot: gate.trustRoot, revokedAt: gate.revokedToken) {
            case .success:
                return Response(
                    status: .seeOther,
                    headers: [
                        .location: "/",
                        .setCookie: "\(AccessGate.cookieName)=\(token); Path=/; HttpOnly; Secure; SameSite=Strict",
                    ])
            case .failure(let refusal):
                throw ServiceError(.unauthorized, refusal.description)
            }
        }
        routes.post("/logout") { _, _ in
            Response(status: .noContent, headers: [.setCookie: "\(AccessGate.cookieName)=; Path=/; Max-Age=0; HttpOnly; Secure; SameSite=Strict"])
        }
        routes.get("/openapi.yaml") { _, _ in
            let path = consoleDirectory + "/openapi.yaml"
            guard let data = try await BlockingWork.run({ FileManager.default.contents(atPath: path) }) else {
                throw ServiceError(.notFound, "openapi.yaml is missing from \(consoleDirectory)")
            }
            return Response(status: .ok, headers: [.contentType: "application/yaml"], body: .init(byteBuffer: ByteBuffer(data: data)))
        }
        return routes
    }

    /// `/api/v1/whoami`.
    var routes: RouteCollection<AuthenticatedContext> {
        let routes = RouteCollection(context: AuthenticatedContext.self)
        routes.get("whoami") { _, context in try ServiceRoutes.json(context.access) }
        return routes
    }
}
