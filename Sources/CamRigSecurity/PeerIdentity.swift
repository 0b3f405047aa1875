import Foundation
import SwiftASN1
import X509

/// Who a certificate says its holder is: a name (the subject's common name) and a role (its OU).
public struct PeerIdentity: Sendable, Hashable, CustomStringConvertible {
    /// The subject's common name, e.g. `agent-3` or `coordinator`.
    public var name: String
    /// The role from the subject's organizational unit.
    public var role: PeerRole
    /// End of the certificate's validity.
    public var notValidAfter: Date

    public init(name: String, role: PeerRole, notValidAfter: Date) {
        self.name = name
        self.role = role
        self.notValidAfter = notValidAfter
    }

    /// Reads the identity from a certificate. Throws when the certificate names no CamRig role.
    public init(certificate: Certificate) throws {
        guard let name = certificate.subject.firstValue(of: .RDNAttributeType.commonName) else {
            throw SecurityError("certificate \(certificate.subject) has no common name")
        }
        let units = certificate.subject.values(of: .RDNAttributeType.organizationalUnitName)
        guard units.count == 1, let roleText = units.first else {
            throw SecurityError(
                units.isEmpty
                    ? "certificate '\(name)' carries no CamRig role (its subject has no OU)"
                    : "certificate '\(name)' has \(units.count) OU attributes (\(units.joined(separator: ", "))); a CamRig certificate has exactly one, its role"
            )
        }
        guard let role = PeerRole(rawValue: roleText) else {
            throw SecurityError(
                "certificate '\(name)' has OU '\(roleText)', which is not a CamRig role (agent, coordinator, viewer)"
            )
        }
        self.init(name: name, role: role, notValidAfter: certificate.notValidAfter)
    }

    public var description: String { "\(name) (\(role.rawValue))" }
}

extension DistinguishedName {
    /// The first attribute of `type` as text.
    func firstValue(of type: ASN1ObjectIdentifier) -> String? {
        values(of: type).first
    }

    /// Every attribute of `type` as text.
    func values(of type: ASN1ObjectIdentifier) -> [String] {
        flatMap { rdn in rdn.filter { $0.type == type }.compactMap { String($0.value) } }
    }
}
