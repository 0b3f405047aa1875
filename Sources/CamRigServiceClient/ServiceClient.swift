import AsyncHTTPClient
import CamRigSecurity
import CamRigViews
import Foundation
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import NIOSSL

/// The `camrig` command line's way to a running `camrig serve`: HTTPS with the coordinator's client
/// certificate (the operator role), the rig's CA as the only trust root.
public final class ServiceClient: Sendable {
    public let url: String
    private let client: HTTPClient

    /// A client for the service at `url` (https://HOST:PORT), presenting `identityName` (default: the
    /// directory's coordinator certificate) from `directory`.
    public init(url: String, directory: TLSDirectory, identityName: String?) throws {
        self.url = url.hasSuffix("/") ? String(url.dropLast()) : url
        let (_, certificate, key, root) = try directory.nioIdentity(named: identityName, roles: [.coordinator, .viewer])
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.certificateChain = [.certificate(certificate)]
        tls.privateKey = .privateKey(key)
        tls.trustRoots = .certificates([root])
        // The service's certificate is the coordinator's, issued by the rig's CA: it names the
        // coordinator, not necessarily the host it is reached by.
        tls.certificateVerification = .noHostnameVerification
        var configuration = HTTPClient.Configuration(tlsConfiguration: tls)
        configuration.timeout = .init(connect: .seconds(5), read: .seconds(60))
        client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    /// `/api/v1/devices/AGENT/DEVICE`, each part percent-encoded.
    public static func cameraPath(agent: String, device: String) -> String {
        var allowed = CharacterSet.urlPathAllowed
        allowed.remove(charactersIn: "/;:?#%")
        let encode = { (part: String) in part.addingPercentEncoding(withAllowedCharacters: allowed) ?? part }
        return "/api/v1/devices/\(encode(agent))/\(encode(device))"
    }

    public func shutdown() async {
        try? await client.shutdown()
    }

    /// An error reply of the service: its problem document's detail, agent and camera.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public var status: Int
        public var detail: String
        public var agent: String?
        public var device: String?
        public var description: String { detail }
    }

    public func get<T: Decodable>(_ path: String, as type: T.Type = T.self) async throws -> T {
        try await send(path, method: .GET, body: Optional<Data>.none, as: T.self)
    }

    public func post<T: Decodable>(_ path: String, _ body: some Encodable, as type: T.Type = T.self) async throws -> T {
        try await send(path, method: .POST, body: try Self.encoder.encode(body), as: T.self)
    }

    public func put<T: Decodable>(_ path: String, _ body: some Encodable, as type: T.Type = T.self) async throws -> T {
        try await send(path, method: .PUT, body: try Self.encoder.encode(body), as: T.self)
    }

    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        return encoder
    }()

    private func send<T: Decodable>(_ path: String, method: HTTPMethod, body: Data?, as type: T.Type) async throws -> T {
        var request = HTTPClientRequest(url: url + path)
        request.method = method
        request.headers.add(name: "Content-Type", value: "application/json")
        if let body { request.body = .bytes(ByteBuffer(data: body)) }
        let response = try await client.execute(request, timeout: .seconds(120))
        let bytes = try await response.body.collect(upTo: 64 * 1024 * 1024)
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        guard (200..<300).contains(response.status.code) else {
            let problem = try? decoder.decode(Problem.self, from: Data(buffer: bytes))
            throw Failure(
                status: Int(response.status.code), detail: problem?.detail ?? "the service at \(url) answered \(response.status)",
                agent: problem?.agent, device: problem?.device)
        }
        return try decoder.decode(T.self, from: Data(buffer: bytes))
    }
}
