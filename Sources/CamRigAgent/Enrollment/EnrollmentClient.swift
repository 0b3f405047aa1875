import CamRigSecurity
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import X509

/// HTTPS requests to the enrollment API of `camrig serve`, one connection per request.
///
/// Before the agent has the rig's CA it trusts nothing it is sent: the CA certificate is fetched without
/// verification and accepted only if its key matches the token's pin. Every other request checks the
/// service's certificate against that CA and requires it to be a coordinator's, so another host holding
/// a certificate of the same rig (an agent's) cannot stand in for the service.
struct EnrollmentClient: Sendable {
    let host: String
    let port: Int
    let url: String
    let group: any EventLoopGroup
    let timeout: TimeAmount

    init(url text: String, group: any EventLoopGroup, timeout: TimeAmount = .seconds(15)) throws {
        guard let components = URLComponents(string: text), components.scheme == "https", let host = components.host, !host.isEmpty else {
            throw SecurityError("'\(text)' is not the service's address: give https://HOST[:PORT], where `camrig serve` listens")
        }
        self.host = host.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        self.port = components.port ?? 8443
        self.url = text
        self.group = group
        self.timeout = timeout
    }

    struct Response {
        var status: Int
        var body: Data

        /// The problem document's detail, or the body, for an error message.
        var detail: String {
            if let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any], let detail = object["detail"] as? String { return detail }
            return String(decoding: body.prefix(500), as: UTF8.self)
        }
    }

    enum Trust {
        /// Nothing yet: only for fetching the CA, which the caller checks against the pin.
        case none
        /// The rig's CA, and a coordinator's certificate.
        case rig(Certificate)
    }

    /// The rig's CA, fetched and checked against `pin`.
    func authority(pinned pin: String) async throws -> Certificate {
        let response = try await request(.GET, "/enroll/v1/ca", trust: .none)
        guard response.status == 200 else {
            throw SecurityError("the service at \(url) did not give its CA (HTTP \(response.status): \(response.detail)); is enrollment on (`camrig serve --enroll`)?")
        }
        let ca: Certificate
        do {
            ca = try Certificate(pemEncoded: String(decoding: response.body, as: UTF8.self))
        } catch {
            throw SecurityError("the service at \(url) answered with a CA that cannot be read: \(error)")
        }
        guard JoinToken.pin(of: ca) == pin else {
            throw SecurityError("the service at \(url) presents a CA whose key does not match the token's pin: it is not the rig's service (or the token is for another rig)")
        }
        return ca
    }

    /// Sends `body` as JSON and decodes the answer as `Enrollment.Issued`; a refusal throws its reason.
    func issue(_ path: String, _ body: some Encodable, trust ca: Certificate) async throws -> Enrollment.Issued {
        let response = try await request(.POST, path, body: try Enrollment.encoder.encode(body), trust: .rig(ca))
        guard response.status == 200 else {
            throw SecurityError("the service at \(url) refused: \(response.detail) (HTTP \(response.status))")
        }
        do {
            return try Enrollment.decoder.decode(Enrollment.Issued.self, from: response.body)
        } catch {
            throw SecurityError("the service at \(url) answered with something that is not a certificate: \(error)")
        }
    }

    func request(_ method: HTTPMethod, _ path: String, body: Data? = nil, trust: Trust) async throws -> Response {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.minimumTLSVersion = .tlsv12
        let verifier: PeerCertificateVerifier?
        switch trust {
        case .none:
            configuration.certificateVerification = .none
            verifier = nil
        case .rig(let ca):
            configuration.certificateVerification = .noHostnameVerification
            configuration.trustRoots = .certificates([try NIOSSLCertificate(bytes: Array(try ca.serializeAsPEM().pemString.utf8), format: .pem)])
            verifier = PeerCertificateVerifier(trustRoot: ca, acceptedRoles: [.coordinator], revocations: nil)
        }
        let context = try NIOSSLContext(configuration: configuration)
        let serverName = host.contains(":") || host.allSatisfy({ $0.isNumber || $0 == "." }) ? nil : host
        let refusal = PeerVerificationRecord()
        do {
            return try await exchange(method, path, body: body, context: context, serverName: serverName, verifier: verifier, refusal: refusal)
        } catch let error as SecurityError {
            throw error
        } catch {
            if let why = refusal.refusal {
                throw SecurityError("the service at \(url) is not the rig's coordinator: its certificate \(why)")
            }
            throw SecurityError("no answer from the service at \(url): \(MutualTLS.explain(error))")
        }
    }

    private func exchange(
        _ method: HTTPMethod, _ path: String, body: Data?, context: NIOSSLContext, serverName: String?, verifier: PeerCertificateVerifier?,
        refusal: PeerVerificationRecord
    ) async throws -> Response {
        let (host, port, url) = (self.host, self.port, self.url)
        let channel = try await ClientBootstrap(group: group)
            .connectTimeout(timeout)
            .connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let handler: NIOSSLClientHandler
                    if let verifier {
                        handler = try NIOSSLClientHandler(context: context, serverHostname: serverName) { certificates, promise in
                            do {
                                let chain = try certificates.map { try Certificate(derEncoded: try $0.toDERBytes()) }
                                promise.completeWithTask {
                                    let outcome = await verifier.verify(chain: chain)
                                    refusal.outcome = outcome
                                    if case .accepted = outcome { return .certificateVerified }
                                    return .failed
                                }
                            } catch {
                                promise.succeed(.failed)
                            }
                        }
                    } else {
                        handler = try NIOSSLClientHandler(context: context, serverHostname: serverName)
                    }
                    try channel.pipeline.syncOperations.addHandler(handler)
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(wrappingChannelSynchronously: channel)
                }
            }
        let deadline = channel.channel.eventLoop.scheduleTask(in: timeout) { channel.channel.close(promise: nil) }
        defer { deadline.cancel() }
        return try await channel.executeThenClose { inbound, outbound in
            var head = HTTPRequestHead(version: .http1_1, method: method, uri: path)
            head.headers.add(name: "Host", value: host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)")
            head.headers.add(name: "Connection", value: "close")
            head.headers.add(name: "Accept", value: "application/json")
            if let body {
                head.headers.add(name: "Content-Type", value: "application/json")
                head.headers.add(name: "Content-Length", value: "\(body.count)")
            }
            try await outbound.write(.head(head))
            if let body { try await outbound.write(.body(.byteBuffer(ByteBuffer(bytes: body)))) }
            try await outbound.write(.end(nil))
            var response = Response(status: 0, body: Data())
            for try await part in inbound {
                switch part {
                case .head(let head): response.status = Int(head.status.code)
                case .body(let buffer):
                    response.body.append(contentsOf: buffer.readableBytesView)
                    guard response.body.count <= 1 << 20 else { throw SecurityError("the service at \(url) sent more than 1 MiB") }
                case .end: return response
                }
            }
            throw SecurityError("the service at \(url) closed the connection before answering")
        }
    }
}