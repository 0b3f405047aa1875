import Foundation

/// The enrollment API's bodies (JSON, snake_case keys), as `camrig serve` takes and answers them on
/// `/enroll/v1/…` (see openapi.yaml) and `camrig-agent --enroll` sends and reads them.
public enum Enrollment {
    /// POST /enroll/v1/join: a host asks to join with a token.
    public struct JoinRequest: Codable, Sendable {
        /// The join token, whole.
        public var token: String
        /// The name the host asks for (its host name by default); a token may fix or prefix it.
        public var name: String
        /// A PKCS #10 certificate request (PEM) for the key the host made and keeps.
        public var csr: String
        /// The port the agent serves on (7450 by default); the coordinator connects to the address the
        /// request came from, or to `host` when given.
        public var port: Int
        public var host: String?

        public init(token: String, name: String, csr: String, port: Int, host: String? = nil) {
            self.token = token
            self.name = name
            self.csr = csr
            self.port = port
            self.host = host
        }
    }

    /// POST /enroll/v1/renew: an enrolled agent asks for a new certificate before its own expires.
    public struct RenewRequest: Codable, Sendable {
        /// The agent's current certificate (PEM).
        public var certificate: String
        /// A certificate request (PEM) for its new key.
        public var csr: String
        /// The current key's signature (ECDSA P-256, SHA-256, DER, base64) of the request's DER bytes:
        /// proof that the sender holds the certificate's key.
        public var proof: String
        public var port: Int

        public init(certificate: String, csr: String, proof: String, port: Int) {
            self.certificate = certificate
            self.csr = csr
            self.proof = proof
            self.port = port
        }
    }

    /// The answer to a join or a renewal.
    public struct Issued: Codable, Sendable {
        /// The name the certificate was issued to.
        public var name: String
        /// The agent's certificate (PEM).
        public var certificate: String
        /// The rig's CA certificate (PEM).
        public var ca: String
        /// The rig's revocation list (PEM), when there is one.
        public var crl: String?
        public var notValidAfter: Date
        /// When the agent should renew: two thirds into the certificate's life.
        public var renewAfter: Date

        public init(name: String, certificate: String, ca: String, crl: String?, notValidAfter: Date, renewAfter: Date) {
            self.name = name
            self.certificate = certificate
            self.ca = ca
            self.crl = crl
            self.notValidAfter = notValidAfter
            self.renewAfter = renewAfter
        }
    }

    /// One enrolment as the service lists it (GET /api/v1/enrollments).
    public struct Record: Codable, Sendable, Hashable {
        public enum State: String, Codable, Sendable {
            /// Issued a certificate; the coordinator has not reached the agent yet.
            case pending
            /// The coordinator is connected to it.
            case joined
            /// Refused, with the reason.
            case refused
        }

        public var time: Date
        public var state: State
        /// The name asked for, or given.
        public var name: String
        /// Where the request came from.
        public var address: String
        /// Where the coordinator reaches the agent (HOST:PORT), once issued.
        public var endpoint: String?
        /// The token's id (never its secret), or "renewal".
        public var token: String
        public var reason: String?
        public var notValidAfter: Date?

        public init(time: Date, state: State, name: String, address: String, endpoint: String?, token: String, reason: String?, notValidAfter: Date?) {
            self.time = time
            self.state = state
            self.name = name
            self.address = address
            self.endpoint = endpoint
            self.token = token
            self.reason = reason
            self.notValidAfter = notValidAfter
        }
    }

    /// JSON as the enrollment API writes and reads it.
    public static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.sortedKeys]
        return encoder
    }()

    public static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }()
}
