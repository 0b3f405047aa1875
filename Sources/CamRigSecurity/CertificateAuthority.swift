import Crypto
import Foundation
import SwiftASN1
import X509

/// A rig's own certificate authority: it signs every agent, coordinator and viewer certificate, and
/// peers accept only certificates it signed.
///
/// Keys are ECDSA P-256; certificates are X.509 v3 with the role in the subject's OU.
public struct CertificateAuthority: Sendable {
    /// The CA's self-signed certificate: the trust root every peer loads.
    public let certificate: Certificate
    let privateKey: P256.Signing.PrivateKey

    /// A certificate and its private key.
    public struct IssuedCertificate: Sendable {
        public let certificate: Certificate
        public let privateKey: P256.Signing.PrivateKey
        public let identity: PeerIdentity
    }

    /// Loads an existing authority.
    public init(certificate: Certificate, privateKey: P256.Signing.PrivateKey) throws {
        guard certificate.publicKey == Certificate.PublicKey(privateKey.publicKey) else {
            throw SecurityError("the CA key does not belong to the CA certificate")
        }
        self.certificate = certificate
        self.privateKey = privateKey
    }

    /// Creates a new authority with a fresh key.
    public static func create(
        name: String = "CamRig CA",
        notValidBefore: Date = Date().addingTimeInterval(-300),
        validFor days: Int = 3650
    ) throws -> CertificateAuthority {
        let key = P256.Signing.PrivateKey()
        let subject = try DistinguishedName {
            OrganizationName("CamRig")
            CommonName(name)
        }
        let publicKey = Certificate.PublicKey(key.publicKey)
        let certificate = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: publicKey,
            notValidBefore: notValidBefore,
            notValidAfter: notValidBefore.addingTimeInterval(Double(days) * 86_400),
            issuer: subject,
            subject: subject,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                SubjectKeyIdentifier(hash: publicKey)
            },
            issuerPrivateKey: Certificate.PrivateKey(key)
        )
        return try CertificateAuthority(certificate: certificate, privateKey: key)
    }

    /// The authority's signature of `message` (ECDSA P-256 with SHA-256, raw r‖s), which anyone holding
    /// the authority's certificate can check: how access tokens are issued.
    public func signature(for message: Data) throws -> Data {
        try privateKey.signature(for: message).rawRepresentation
    }

    /// Issues a certificate for `name` in `role`, with a new key.
    ///
    /// - Parameters:
    ///   - hostnames: DNS names and IP addresses put in the subject alternative names, for tools that
    ///     check them (CamRig itself authorizes by role and name).
    public func issue(
        name: String,
        role: PeerRole,
        hostnames: [String] = [],
        notValidBefore: Date = Date().addingTimeInterval(-300),
        notValidAfter: Date? = nil,
        validFor days: Int = 825
    ) throws -> IssuedCertificate {
        let key = P256.Signing.PrivateKey()
        let certificate = try certificate(
            for: Certificate.PublicKey(key.publicKey), name: name, role: role, hostnames: hostnames, notValidBefore: notValidBefore,
            notValidAfter: notValidAfter ?? notValidBefore.addingTimeInterval(Double(days) * 86_400))
        return IssuedCertificate(
            certificate: certificate,
            privateKey: key,
            identity: PeerIdentity(name: name, role: role, notValidAfter: certificate.notValidAfter)
        )
    }

    /// Signs a certificate for a key held elsewhere (an enrolling agent's, from its certificate request):
    /// `name` in `role`, valid from `notValidBefore` to `notValidAfter` (never past the CA's own end).
    public func certificate(
        for publicKey: Certificate.PublicKey, name: String, role: PeerRole, hostnames: [String] = [], notValidBefore: Date, notValidAfter: Date
    ) throws -> Certificate {
        try TLSDirectory.validateName(name)
        let subject = try DistinguishedName {
            OrganizationName("CamRig")
            OrganizationalUnitName(role.rawValue)
            CommonName(name)
        }
        var alternativeNames: [GeneralName] = [.dnsName(name)]
        for host in hostnames where host != name {
            if let address = IPAddressBytes(host) {
                alternativeNames.append(.ipAddress(ASN1OctetString(contentBytes: address.bytes[...])))
            } else {
                alternativeNames.append(.dnsName(host))
            }
        }
        let usages: [ExtendedKeyUsage.Usage] = role == .agent ? [.serverAuth, .clientAuth] : [.clientAuth, .serverAuth]
        return try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: publicKey,
            notValidBefore: notValidBefore,
            notValidAfter: min(notValidAfter, self.certificate.notValidAfter),
            issuer: self.certificate.subject,
            subject: subject,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage(usages)
                SubjectKeyIdentifier(hash: publicKey)
                AuthorityKeyIdentifier(keyIdentifier: try self.certificate.extensions.subjectKeyIdentifier?.keyIdentifier)
                SubjectAlternativeNames(alternativeNames)
            },
            issuerPrivateKey: Certificate.PrivateKey(privateKey)
        )
    }

    /// Whether `certificate` was signed by this authority.
    public func signed(_ certificate: Certificate) -> Bool {
        certificate.issuer == self.certificate.subject && self.certificate.publicKey.isValidSignature(certificate.signature, for: certificate)
    }
}

/// The bytes of a textual IPv4 or IPv6 address.
struct IPAddressBytes {
    let bytes: [UInt8]

    /// The address's text form, for 4 or 16 bytes.
    static func text(_ bytes: [UInt8]) -> String? {
        let family = bytes.count == 4 ? AF_INET : bytes.count == 16 ? AF_INET6 : -1
        guard family >= 0 else { return nil }
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let text = bytes.withUnsafeBytes { inet_ntop(family, $0.baseAddress, &buffer, socklen_t(buffer.count)) }
        return text == nil ? nil : String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    init?(_ text: String) {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            bytes = withUnsafeBytes(of: &v4) { Array($0) }
            return
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 {
            bytes = withUnsafeBytes(of: &v6) { Array($0) }
            return
        }
        return nil
    }
}
