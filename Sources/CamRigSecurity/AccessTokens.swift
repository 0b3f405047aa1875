import CamRigFiles
import Crypto
import Foundation
import NIOConcurrencyHelpers
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

    /// What a token says about itself, once its signature is checked (nil: not a token of this authority).
    public struct Claims: Sendable, Equatable {
        public var id: String
        public var name: String
        public var role: AccessRole
        public var expires: Date
    }

    /// The claims of `token` when the authority whose certificate is `trustRoot` signed it, expired or not.
    public static func claims(of token: String, trustRoot: Certificate) -> Claims? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == prefix, let payloadBytes = unbase64url(String(parts[1])),
            let signatureBytes = unbase64url(String(parts[2])), let key = P256.Signing.PublicKey(trustRoot.publicKey),
            let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureBytes),
            key.isValidSignature(signature, for: Data("\(parts[0]).\(parts[1])".utf8)),
            let payload = try? JSONDecoder().decode(Payload.self, from: payloadBytes)
        else { return nil }
        return Claims(id: payload.id, name: payload.name, role: payload.role, expires: Date(timeIntervalSince1970: Double(payload.expires)))
    }

    /// The access `token` gives, checked against the authority's certificate `trustRoot` and the tokens
    /// revoked (`revokedAt` gives when the token of an id was revoked, nil when it was not).
    public static func verify(
        _ token: String, trustRoot: Certificate, now: Date = Date(), revokedAt: (String) -> Date? = { _ in nil }
    ) -> Result<Access, Refusal> {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == prefix else {
            return .failure(Refusal(description: "the token is not a CamRig access token (camrig1.…); issue one with `camrig certs token`"))
        }
        guard let claims = claims(of: token, trustRoot: trustRoot) else {
            return .failure(Refusal(description: "the token was not issued by this rig's certificate authority"))
        }
        guard claims.expires > now else {
            let when = ISO8601DateFormatter().string(from: claims.expires)
            return .failure(Refusal(description: "the token of '\(claims.name)' expired at \(when); issue a new one with `camrig certs token`"))
        }
        if let revoked = revokedAt(claims.id) {
            let when = ISO8601DateFormatter().string(from: revoked)
            return .failure(Refusal(description: "the token of '\(claims.name)' was revoked at \(when); ask for a new one (`camrig certs token`)"))
        }
        return .success(Access(name: claims.name, role: claims.role, method: "token"))
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

/// Tokens revoked before they expire: `revoked-tokens.json` in the TLS directory (written by `camrig
/// certs revoke-token`), a JSON array of {id, name, expires, revoked_at}. The service re-reads it when
/// it changes; a token on it is refused from its next request on.
public final class TokenDenyList: Sendable {
    public static let fileName = "revoked-tokens.json"

    public struct Entry: Codable, Sendable, Equatable {
        public var id: String
        public var name: String
        public var expires: Date
        public var revokedAt: Date

        public init(id: String, name: String, expires: Date, revokedAt: Date) {
            self.id = id
            self.name = name
            self.expires = expires
            self.revokedAt = revokedAt
        }
    }

    let path: String
    private let state = NIOLockedValueBox<(entries: [String: Date], modified: Date?)>(([:], nil))

    public init(directory: TLSDirectory) {
        path = (directory.path as NSString).appendingPathComponent(Self.fileName)
    }

    /// When the token `id` was revoked, or nil.
    public func revokedAt(_ id: String) -> Date? {
        let modified = (try? FileManager.default.attributesOfItem(atPath: path))?[.modificationDate] as? Date
        return state.withLockedValue { state in
            if modified != state.modified {
                state.modified = modified
                state.entries = Dictionary((Self.read(path) ?? []).map { ($0.id, $0.revokedAt) }, uniquingKeysWith: { first, _ in first })
            }
            return state.entries[id]
        }
    }

    static let coder = (encoder: { () -> JSONEncoder in
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        return encoder
    }(), decoder: { () -> JSONDecoder in
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        return decoder
    }())

    static func read(_ path: String) -> [Entry]? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        return try? coder.decoder.decode([Entry].self, from: data)
    }

    /// Adds `claims` to `directory`'s list (dropping entries past their expiry: they need no listing).
    public static func revoke(_ claims: AccessTokens.Claims, in directory: TLSDirectory, now: Date = Date()) throws -> Entry {
        let path = (directory.path as NSString).appendingPathComponent(fileName)
        if FileManager.default.fileExists(atPath: path), read(path) == nil {
            throw SecurityError("\(path) is not a list of revoked tokens; move it aside and revoke again")
        }
        var entries = (read(path) ?? []).filter { $0.expires > now && $0.id != claims.id }
        let entry = Entry(id: claims.id, name: claims.name, expires: claims.expires, revokedAt: now)
        entries.append(entry)
        // Durable before it is reported: a revocation must not be undone by a power cut.
        try DurableFile.write(Array(try coder.encoder.encode(entries)), to: URL(fileURLWithPath: path), permissions: 0o644)
        return entry
    }
}
