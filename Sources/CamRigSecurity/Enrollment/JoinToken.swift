import Crypto
import Foundation
import X509

/// A join token: what an agent needs to enroll in a rig, as one short line.
///
///     camrig-join-ID.SECRET.PIN
///
/// `ID` (8 characters) names the token in the rig's token list and logs; `SECRET` (24 characters) proves
/// the holder was given it; `PIN` is the SHA-256 of the rig CA's public key (its DER SubjectPublicKeyInfo,
/// base64url without padding), so that the agent can tell the rig's coordinator from anyone else before
/// it trusts anything it is sent, as kubeadm's `--discovery-token-ca-cert-hash` does.
public struct JoinToken: Sendable, Hashable, CustomStringConvertible {
    public static let prefix = "camrig-join-"
    static let alphabet = Array("abcdefghijkmnpqrstuvwxyz23456789")

    public var id: String
    public var secret: String
    public var caPin: String

    public init(id: String, secret: String, caPin: String) {
        self.id = id
        self.secret = secret
        self.caPin = caPin
    }

    /// A new token for the CA `authority`.
    public static func generate(for authority: Certificate) -> JoinToken {
        JoinToken(id: random(8), secret: random(24), caPin: pin(of: authority))
    }

    static func random(_ count: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        return String((0..<count).map { _ in alphabet[Int(generator.next(upperBound: UInt32(alphabet.count)))] })
    }

    /// The pin of a CA certificate: SHA-256 of its public key, base64url without padding.
    public static func pin(of certificate: Certificate) -> String {
        let digest = SHA256.hash(data: Array(certificate.publicKey.subjectPublicKeyInfoBytes))
        return Data(digest).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Reads a token; the error says what is wrong with it (never the secret).
    public init(text: String) throws {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard trimmed.hasPrefix(Self.prefix) else {
            throw SecurityError("not a CamRig join token (it starts with '\(Self.prefix)'; make one with `camrig certs join-token`)")
        }
        let parts = trimmed.dropFirst(Self.prefix.count).split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        let allowed = Set(Self.alphabet)
        let pinAllowed = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        guard parts.count == 3, parts[0].count == 8, parts[0].allSatisfy(allowed.contains), parts[1].count == 24,
            parts[1].allSatisfy(allowed.contains), parts[2].count == 43, parts[2].allSatisfy(pinAllowed.contains)
        else {
            throw SecurityError("the join token is damaged (expected camrig-join-ID.SECRET.PIN with 8, 24 and 43 characters): copy it again")
        }
        self.init(id: parts[0], secret: parts[1], caPin: parts[2])
    }

    public var text: String { "\(Self.prefix)\(id).\(secret).\(caPin)" }

    /// The token without its secret, for logs.
    public var description: String { "\(Self.prefix)\(id).…" }

    /// What the rig keeps of the secret: its SHA-256, hex.
    public var secretHash: String { Self.hash(secret) }

    static func hash(_ secret: String) -> String {
        SHA256.hash(data: Array(secret.utf8)).map { String(format: "%02x", $0) }.joined()
    }
}
