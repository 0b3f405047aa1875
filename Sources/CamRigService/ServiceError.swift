import Foundation
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

        var status: HTTPResponse.Status {
            switch self {
            case .badRequest: .badRequest
            case .unauthorized: .unauthorized
            case .forbidden: .forbidden
            case .notFound: .notFound
            case .conflict: .conflict
            case .unavailable: .serviceUnavailable
            case .tooLarge: .contentTooLarge
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
            }
        }
    }

    public var kind: Kind
    public var agent: String?
    public var device: String?
    public var detail: String

    public init(_ kind: Kind, agent: String? = nil, device: String? = nil, _ detail: String) {
        self.kind = kind
        self.agent = agent
        self.device = device
        self.detail = detail
    }

    public var description: String { detail }

    /// The problem document (`application/problem+json`).
    public struct Problem: Codable, Sendable {
        public var type: String
        public var title: String
        public var status: Int
        public var detail: String
        public var agent: String?
        public var device: String?
        public var instance: String?
    }

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
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(data: body)))
    }
}
