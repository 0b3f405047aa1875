import CamRigViews
import Foundation
import HTTPTypes
import Hummingbird

/// An error the service answers with: an HTTP status and an RFC 9457 problem document naming the agent
/// and camera it concerns.
public struct ServiceError: Error, Sendable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        case badRequest = "bad-request"
        case unauthorized
        case forbidden
        case notFound = "not-found"
        case conflict
        case unavailable
        case tooLarge = "too-large"
        case methodNotAllowed = "method-not-allowed"
        case unsupportedMediaType = "unsupported-media-type"
        case upgradeRequired = "upgrade-required"

        var status: HTTPResponse.Status {
            switch self {
            case .badRequest: .badRequest
            case .unauthorized: .unauthorized
            case .forbidden: .forbidden
            case .notFound: .notFound
            case .conflict: .conflict
            case .unavailable: .serviceUnavailable
            case .tooLarge: .contentTooLarge
            case .methodNotAllowed: .methodNotAllowed
            case .unsupportedMediaType: .unsupportedMediaType
            case .upgradeRequired: .upgradeRequired
            }
        }

        var title: String {
            switch self {
            case .badRequest: "The request cannot be carried out as written"
            case .unauthorized: "Sign in first"
            case .forbidden: "Not allowed for this role"
            case .notFound: "No such thing on this rig"
            case .conflict: "The rig is not in a state to do this now"
            case .unavailable: "The rig cannot do this yet"
            case .tooLarge: "Too large"
            case .methodNotAllowed: "This route does not take that method"
            case .unsupportedMediaType: "The request body is not of a type this route takes"
            case .upgradeRequired: "This route is a WebSocket"
            }
        }
    }

    public var kind: Kind
    public var agent: String?
    public var device: String?
    public var detail: String
    /// Extra response headers (`Allow` with a 405, `Upgrade` with a 426).
    public var headers: [(HTTPField.Name, String)] = []

    public init(_ kind: Kind, agent: String? = nil, device: String? = nil, _ detail: String) {
        self.kind = kind
        self.agent = agent
        self.device = device
        self.detail = detail
    }

    public var description: String { detail }

    func problem(instance: String?) -> Problem {
        Problem(
            type: "https://camrig.dev/problems/\(kind.rawValue)", title: kind.title, status: Int(kind.status.code), detail: detail,
            agent: agent, device: device, instance: instance)
    }
}

extension ServiceError: HTTPResponseError {
    public var status: HTTPResponse.Status { kind.status }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let body = try encoder.encode(problem(instance: request.uri.path))
        var headers: HTTPFields = [.contentType: "application/problem+json"]
        if kind == .unauthorized { headers[.wwwAuthenticate] = "Bearer realm=\"camrig\"" }
        for (name, value) in self.headers { headers[name] = value }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(data: body)))
    }
}
