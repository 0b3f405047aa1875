import CamRigCoordinator
import CamRigLocalRig
import CamRigSecurity
import CamRigViews
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Testing

@testable import CamRigService

/// The API's answers as HTTP says they should be, through the router (no socket): problems for every
/// refusal, 404 and 405 told apart, 415 for a body that is not JSON, 426 for a WebSocket route asked
/// for without an upgrade, and the bounds the OpenAPI document states.
@Suite("Service routes", .timeLimit(.minutes(1)))
struct RoutesTests {
    static let console = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Sources/CamRigService/Console")

    /// Runs `body` with a router over a service of no agents, and an operator's and a viewer's token.
    static func withRouter(_ body: @Sendable (any TestClientProtocol, _ operator: String, _ viewer: String) async throws -> Void) async throws {
        let pki = try ScratchPKI(agents: [], viewers: [])
        defer { try? FileManager.default.removeItem(atPath: pki.path) }
        let captures = FileManager.default.temporaryDirectory.appendingPathComponent("camrig-routes-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: captures) }
        let logger = Logger(label: "test")
        let service = try RigService(
            pool: AgentPool(endpoints: [], security: .insecure, logger: logger), configuration: .init(capturesDirectory: captures), logger: logger)
        let authority = try pki.directory.loadAuthority()
        let expires = Date().addingTimeInterval(600)
        let operatorToken = try AccessTokens.issue(name: "op", role: .operator, expires: expires, authority: authority)
        let viewerToken = try AccessTokens.issue(name: "screen", role: .viewer, expires: expires, authority: authority)
        let router = ServiceRoutes.router(service: service, trustRoot: try pki.directory.trustRoot(), consoleDirectory: console.path)
        let app = Application(router: router, logger: logger)
        try await app.test(.router) { client in try await body(client, operatorToken, viewerToken) }
    }

    static func headers(_ token: String, json: Bool = false) -> HTTPFields {
        var fields: HTTPFields = [.authorization: "Bearer \(token)"]
        if json { fields[.contentType] = "application/json" }
        return fields
    }

    static func problem(_ response: TestResponse) throws -> Problem {
        #expect(response.headers[.contentType] == "application/problem+json")
        return try JSONDecoder().decode(Problem.self, from: Data(buffer: response.body))
    }

    @Test("a protected route without access is a 401 problem with WWW-Authenticate")
    func unauthorized() async throws {
        try await Self.withRouter { client, _, _ in
            for path in ["/api/v1/rig", "/api/v1/events", "/api/v1/previews", "/metrics", "/api/v1/nothing-here"] {
                let response = try await client.execute(uri: path, method: .get)
                #expect(response.status == .unauthorized, "\(path)")
                #expect(try Self.problem(response).status == 401)
                #expect(response.headers[.wwwAuthenticate] != nil)
            }
        }
    }

    @Test("an unknown API route is a 404 problem, a method the route does not take a 405 with Allow")
    func notFoundAndMethodNotAllowed() async throws {
        try await Self.withRouter { client, token, _ in
            let missing = try await client.execute(uri: "/api/v1/nothing-here", method: .get, headers: Self.headers(token))
            #expect(missing.status == .notFound)
            #expect(try Self.problem(missing).detail.contains("/api/v1/nothing-here"))
            for method in [HTTPRequest.Method.delete, .init("TRACE")!, .patch] {
                let refused = try await client.execute(uri: "/api/v1/rig", method: method, headers: Self.headers(token, json: true))
                #expect(refused.status == .methodNotAllowed, "\(method)")
                #expect(refused.headers[.allow] == "GET")
                #expect(try Self.problem(refused).status == 405)
            }
            let put = try await client.execute(uri: "/api/v1/devices/a/cam0/settings", method: .get, headers: Self.headers(token))
            #expect(put.status == .methodNotAllowed && put.headers[.allow] == "PUT")
        }
    }

    @Test("an operator's request with a body that is not JSON is a 415 problem, a viewer's change a 403")
    func mediaTypeAndRole() async throws {
        try await Self.withRouter { client, token, viewer in
            var headers = Self.headers(token)
            headers[.contentType] = "text/plain"
            headers[.contentLength] = "2"
            let refused = try await client.execute(uri: "/api/v1/captures/photo", method: .post, headers: headers, body: ByteBuffer(string: "{}"))
            #expect(refused.status == .unsupportedMediaType)
            #expect(try Self.problem(refused).detail.contains("application/json"))
            let forbidden = try await client.execute(uri: "/api/v1/captures/photo", method: .post, headers: Self.headers(viewer, json: true), body: ByteBuffer(string: "{}"))
            #expect(forbidden.status == .forbidden)
        }
    }

    @Test("a WebSocket route asked for with a plain GET is a 426 problem naming the upgrade")
    func upgradeRequired() async throws {
        try await Self.withRouter { client, token, _ in
            for path in ["/api/v1/events", "/api/v1/previews"] {
                let response = try await client.execute(uri: path, method: .get, headers: Self.headers(token))
                #expect(response.status == .upgradeRequired, "\(path)")
                #expect(response.headers[.upgrade] == "websocket")
                #expect(try Self.problem(response).status == 426)
            }
        }
    }

    @Test("the bounds openapi.yaml states are the ones refused: bracket within -8…8 EV, duration within (0, 600] s, settings not empty")
    func bounds() async throws {
        try await Self.withRouter { client, token, _ in
            let cases: [(String, String, HTTPRequest.Method)] = [
                ("/api/v1/captures/photo", #"{"bracket": [0, 8.5]}"#, .post),
                ("/api/v1/captures/photo", #"{"bracket": [-9]}"#, .post),
                ("/api/v1/captures/recording", #"{"duration": 0}"#, .post),
                ("/api/v1/captures/recording", #"{"duration": 600.5}"#, .post),
                ("/api/v1/captures/recording", #"{"duration": 1, "size": "x480"}"#, .post),
                ("/api/v1/devices/a/cam0/settings", #"{"settings": {}}"#, .put),
            ]
            for (path, body, method) in cases {
                let response = try await client.execute(uri: path, method: method, headers: Self.headers(token, json: true), body: ByteBuffer(string: body))
                #expect(response.status == .badRequest, "\(method) \(path) \(body): \(response.status)")
            }
        }
    }
}
