import CamRigSecurity
import Crypto
import Foundation
import X509

/// What a caller of the service may do.
public enum AccessRole: String, Sendable, Codable, CaseIterable {
    /// Everything: configure cameras, capture, finalize. A coordinator certificate, or an operator token.
    case `operator`
    /// Read only: status, previews, captures and their files. A viewer certificate, or a viewer token.
    case viewer
}

/// Who is calling, and how they proved it.
public struct Access: Sendable, Codable, Equatable {
    public var name: String
    public var role: AccessRole
    /// `certificate` or `token`.
    public var method: String

    public init(name: String, role: AccessRole, method: String) {
        self.name = name
        self.role = role
        self.method = method
    }

    /// The access a verified client certificate gives; nil for an agent's certificate.
    public init?(certificate identity: PeerIdentity) {
        switch identity.role {
        case .coordinator: self.init(name: identity.name, role: .operator, method: "certificate")
        case .viewer: self.init(name: identity.name, role: .viewer, method: "certificate")
        case .agent: return nil
        }
    }
}

/// Access tokens for browsers and scripts that hold no client certificate.
///
/// A token is `camrig1.PAYLOAD.SIGNATURE`: PAYLOAD is base64url JSON (`name`, `role`, `expires` in Unix
/// seconds, a random `id`), SIGNATURE the rig's certificate authority's ECDSA P-256 signature of
/// `camrig1.PAYLOAD` (raw r‖s, base64url). The service checks it against the authority's certificate
/// alone, so tokens need no database; they end when they expire.
public enum AccessTokens {
    public static let prefix = "camrig1"

    struct Payload: Codable {
        var name: String
        var role: AccessRole
        var expires: Int64
        var id: String
    }

    /// A token for `name` in `role`, valid until `expires`, signed by `authority`.
    public static func issue(name: String, role: AccessRole, expires: Date, authority: CertificateAuthority) throws -> String {
        let payload = Payload(name: name, role: role, expires: Int64(expires.timeIntervalSince1970), id: UUID().uuidString)
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let body = prefix + "." + base64url(try encoder.encode(payload))
        return body + "." + base64url(try authority.signature(for: Data(body.utf8)))
    }

    /// Why a token was refused, said so that its holder knows what to do.
    public struct Refusal: Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    /// The access `token` gives, checked against the authority's certificate `trustRoot`.
    public static func verify(_ token: String, trustRoot: Certificate, now: Date = Date()) -> Result<Access, Refusal> {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == prefix, let payloadBytes = unbase64url(String(parts[1])),
            let signatureBytes = unbase64url(String(parts[2]))
        else { return .failure(Refusal(description: "the token is not a CamRig access token (camrig1.…); issue one with `camrig certs token`")) }
        guard let key = P256.Signing.PublicKey(trustRoot.publicKey),
            let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureBytes),
            key.isValidSignature(signature, for: Data("\(parts[0]).\(parts[1])".utf8))
        else { return .failure(Refusal(description: "the token was not issued by this rig's certificate authority")) }
        guard let payload = try? JSONDecoder().decode(Payload.self, from: payloadBytes) else {
            return .failure(Refusal(description: "the token's contents cannot be read"))
        }
        guard Double(payload.expires) > now.timeIntervalSince1970 else {
            let when = ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double(payload.expires)))
            return .failure(Refusal(description: "the token of '\(payload.name)' expired at \(when); issue a new one with `camrig certs token`"))
        }
        return .success(Access(name: payload.name, role: payload.role, method: "token"))
    }

    static func base64url(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func unbase64url(_ text: String) -> Data? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64)
    }
}
