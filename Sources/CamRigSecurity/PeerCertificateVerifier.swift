import Foundation
@_spi(FixedExpiryValidationTime) import X509

/// Why a peer's certificate was refused, in words an operator can act on.
public struct PeerRefusal: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Reason: String, Sendable, Hashable {
        /// The peer sent no certificate at all.
        case noCertificate = "no-certificate"
        /// The certificate's validity ended.
        case expired
        /// The certificate's validity has not begun (check the clocks).
        case notYetValid = "not-yet-valid"
        /// The certificate was not signed by this rig's CA.
        case unknownAuthority = "unknown-authority"
        /// The rig's CA revoked the certificate (it is on the revocation list, `crl.pem`).
        case revoked
        /// The certificate names no CamRig role.
        case noRole = "no-role"
        /// The role is not one this side accepts (e.g. a viewer certificate presented by an "agent").
        case roleNotAccepted = "role-not-accepted"
        /// The certificate is unreadable or fails verification in another way.
        case invalid
    }

    public var reason: Reason
    public var message: String

    public init(_ reason: Reason, _ message: String) {
        self.reason = reason
        self.message = message
    }

    public var description: String { message }
}

/// Decides whether a peer's certificate chain belongs to this rig, and who the peer is.
///
/// Checks, in order: a certificate is present; it is within its validity period; it was issued by the
/// rig's CA (subject match and signature, via swift-certificates' RFC 5280 verifier); the CA has not
/// revoked it; it names a CamRig role; that role is one this side accepts. The first failed check is the
/// reason given.
public struct PeerCertificateVerifier: Sendable {
    public let trustRoot: Certificate
    public let acceptedRoles: Set<PeerRole>
    /// The CA's revocation list, already verified against `trustRoot`; `nil` when the rig has none.
    public let revocations: RevocationList?

    public enum Outcome: Sendable, Hashable {
        case accepted(PeerIdentity)
        case refused(PeerRefusal)
    }

    public init(trustRoot: Certificate, acceptedRoles: Set<PeerRole>, revocations: RevocationList? = nil) {
        self.trustRoot = trustRoot
        self.acceptedRoles = acceptedRoles
        self.revocations = revocations
    }

    public func verify(chain: [Certificate], at now: Date = Date()) async -> Outcome {
        guard let leaf = chain.first else {
            return .refused(PeerRefusal(.noCertificate, "presented no certificate"))
        }
        let name = leaf.subject.firstValue(of: .RDNAttributeType.commonName) ?? "\(leaf.subject)"
        if now > leaf.notValidAfter {
            return .refused(
                PeerRefusal(
                    .expired,
                    "certificate '\(name)' expired at \(Self.format(leaf.notValidAfter)); issue a new one with `camrig certs issue`"
                )
            )
        }
        if now < leaf.notValidBefore {
            return .refused(
                PeerRefusal(
                    .notYetValid,
                    "certificate '\(name)' is not valid before \(Self.format(leaf.notValidBefore)); check this host's clock"
                )
            )
        }
        if leaf.issuer != trustRoot.subject {
            return .refused(
                PeerRefusal(
                    .unknownAuthority,
                    "certificate '\(name)' was issued by '\(leaf.issuer)', not by this rig's CA '\(trustRoot.subject)'"
                )
            )
        }
        var verifier = Verifier(rootCertificates: CertificateStore([trustRoot])) {
            RFC5280Policy(fixedExpiryValidationTime: now)
        }
        let result = await verifier.validate(leaf: leaf, intermediates: CertificateStore(Array(chain.dropFirst())))
        guard case .validCertificate = result else {
            var detail = ""
            if case .couldNotValidate(let failures) = result, let first = failures.first {
                detail = ": \(first.policyFailureReason)"
            }
            return .refused(
                PeerRefusal(
                    .unknownAuthority,
                    "certificate '\(name)' names this rig's CA '\(trustRoot.subject)' as issuer but does not verify against it"
                        + " (signed by another CA of the same name?)\(detail)"
                )
            )
        }
        if let revoked = revocations?.entry(for: leaf.serialNumber) {
            let why = revoked.reason.map { " (\($0))" } ?? ""
            return .refused(
                PeerRefusal(
                    .revoked,
                    "certificate '\(name)' (serial \(leaf.serialNumber.hexadecimal)) was revoked by this rig's CA on \(Self.format(revoked.revokedAt))\(why); "
                        + "issue a new one with `camrig certs issue`"
                )
            )
        }
        let identity: PeerIdentity
        do {
            identity = try PeerIdentity(certificate: leaf)
        } catch {
            return .refused(PeerRefusal(.noRole, "\(error)"))
        }
        guard acceptedRoles.contains(identity.role) else {
            let accepted = acceptedRoles.map(\.rawValue).sorted().joined(separator: " or ")
            return .refused(
                PeerRefusal(
                    .roleNotAccepted,
                    "certificate '\(name)' has role \(identity.role.rawValue), but only \(accepted) may connect here"
                )
            )
        }
        return .accepted(identity)
    }

    static func format(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.string(from: date)
    }
}
