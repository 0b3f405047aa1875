import CamRigHTTP
import CamRigSecurity
import Foundation
import NIOCore
import NIOHTTP1
import NIOFoundationCompat
import NIOSSL
import X509

/// HTTPS requests to the enrollment API of `camrig serve`, through CamRig's one HTTP client (`HTTPTransport`),
/// one connection per request.
///
/// Before the agent has the rig's CA it trusts nothing it is sent: the CA certificate is fetched without
/// verification and accepted only if its key matches the token's pin. Every other request checks the
/// service's certificate against that CA and requires it to be a coordinator's, so another host holding
/// a certificate of the same rig (an agent's) cannot stand in for the service.
struct EnrollmentClient: Sendable {
    let host: String
    let port: Int
    let url: String
    let timeout: TimeAmount

    init(url text: String, timeout: TimeAmount = .seconds(15)) throws {
        guard let components = URLComponents(string: text), components.scheme == "https", let host = components.host, !host.isEmpty else {
            throw SecurityError("'\(text)' is not the service's address: give https://HOST[:PORT], where `camrig serve` listens")
        }
        self.host = host.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        self.port = components.port ?? 8443
        self.url = text
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
        let refusal = PeerVerificationRecord()
        let verification: HTTPTransport.Verification?
        switch trust {
        case .none:
            configuration.certificateVerification = .none
            verification = nil
        case .rig(let ca):
            configuration.certificateVerification = .noHostnameVerification
            configuration.trustRoots = .certificates([try NIOSSLCertificate(bytes: Array(try ca.serializeAsPEM().pemString.utf8), format: .pem)])
            let verifier = PeerCertificateVerifier(trustRoot: ca, acceptedRoles: [.coordinator], revocations: nil)
            verification = { certificates, promise in
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
        }
        let transport = try HTTPTransport(host: host, port: port, tls: configuration, verification: verification, connectTimeout: timeout)
        var head = HTTPRequestHead(version: .http1_1, method: method, uri: path)
        head.headers.add(name: "Host", value: transport.authority)
        head.headers.add(name: "Accept", value: "application/json")
        if let body {
            head.headers.add(name: "Content-Type", value: "application/json")
            head.headers.add(name: "Content-Length", value: "\(body.count)")
        }
        let answer: HTTPTransport.Response
        do {
            answer = try await transport.execute(head, body: body.map { ByteBuffer(bytes: $0) }, limit: 1 << 20, timeout: timeout)
        } catch {
            await transport.shutdown()
            if let why = refusal.refusal {
                throw SecurityError("the service at \(url) is not the rig's coordinator: its certificate \(why)")
            }
            if case HTTPTransport.Failure.tooLarge = error {
                throw SecurityError("the service at \(url) sent more than 1 MiB")
            }
            throw SecurityError("no answer from the service at \(url): \(MutualTLS.explain(error))")
        }
        await transport.shutdown()
        return Response(status: Int(answer.status), body: Data(buffer: answer.body))
    }
}