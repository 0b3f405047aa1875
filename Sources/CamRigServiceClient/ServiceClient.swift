import CamRigHTTP
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
    private let client: HTTPTransport
    /// The path the service is served under (a reverse proxy's prefix), or empty.
    private let basePath: String

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
        guard let components = URLComponents(string: self.url), let scheme = components.scheme, ["https", "http"].contains(scheme),
            let host = components.host, !host.isEmpty, components.query == nil, components.fragment == nil
        else {
            throw InvalidAddress(description: "'\(url)' is not a service's address: give https://HOST[:PORT], where `camrig serve` listens")
        }
        basePath = components.percentEncodedPath
        client = try HTTPTransport(
            host: host, port: components.port ?? (scheme == "https" ? 443 : 80), tls: scheme == "https" ? tls : nil, connectTimeout: .seconds(5))
    }

    /// `/api/v1/devices/AGENT/DEVICE`, each part percent-encoded.
    public static func cameraPath(agent: String, device: String) -> String {
        var allowed = CharacterSet.urlPathAllowed
        allowed.remove(charactersIn: "/;:?#%")
        let encode = { (part: String) in part.addingPercentEncoding(withAllowedCharacters: allowed) ?? part }
        return "/api/v1/devices/\(encode(agent))/\(encode(device))"
    }

    public func shutdown() async {
        await client.shutdown()
    }

    /// A `--service` that is not an http(s) address.
    public struct InvalidAddress: Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    /// An error reply of the service: its problem document's detail, agent and camera.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public var status: Int
        public var detail: String
        public var agent: String?
        public var device: String?
        public var description: String { detail }
    }

    /// GET `path`, answered within `timeout`.
    public func get<T: Decodable>(_ path: String, as type: T.Type = T.self, timeout: Duration = .seconds(120)) async throws -> T {
        try await send(path, method: .GET, body: Optional<Data>.none, timeout: TimeAmount(timeout), as: T.self)
    }

    public func post<T: Decodable>(_ path: String, _ body: some Encodable, as type: T.Type = T.self) async throws -> T {
        try await send(path, method: .POST, body: try Self.encoder.encode(body), timeout: .seconds(120), as: T.self)
    }

    public func put<T: Decodable>(_ path: String, _ body: some Encodable, as type: T.Type = T.self) async throws -> T {
        try await send(path, method: .PUT, body: try Self.encoder.encode(body), timeout: .seconds(120), as: T.self)
    }

    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        return encoder
    }()

    private func send<T: Decodable>(_ path: String, method: HTTPMethod, body: Data?, timeout: TimeAmount, as type: T.Type) async throws -> T {
        var head = HTTPRequestHead(version: .http1_1, method: method, uri: basePath + path)
        head.headers.add(name: "Host", value: client.authority)
        head.headers.add(name: "Accept", value: "application/json")
        if let body {
            head.headers.add(name: "Content-Type", value: "application/json")
            head.headers.add(name: "Content-Length", value: "\(body.count)")
        }
        let response = try await client.execute(head, body: body.map { ByteBuffer(data: $0) }, limit: 64 * 1024 * 1024, timeout: timeout)
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        guard (200..<300).contains(response.status) else {
            let problem = try? decoder.decode(Problem.self, from: Data(buffer: response.body))
            throw Failure(
                status: Int(response.status), detail: problem?.detail ?? "the service at \(url) answered HTTP \(response.status)",
                agent: problem?.agent, device: problem?.device)
        }
        return try decoder.decode(T.self, from: Data(buffer: response.body))
    }
}
