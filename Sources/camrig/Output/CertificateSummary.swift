import CamRigCLI
import CamRigSecurity
import Foundation

/// One certificate as `camrig certs` shows it.
struct CertificateSummary: Encodable {
    var name: String
    var role: String
    var notValidAfter: String
    var expired: Bool
    /// Whole days until it expires (negative once expired).
    var daysLeft: Int
    /// It expires within `renewWithinDays`: renew it now.
    var expiringSoon: Bool
    var certificate: String
    var key: String

    init(name: String, identity: PeerIdentity, directory: TLSDirectory) {
        self.name = name
        self.role = identity.role.rawValue
        let formatter = ISO8601DateFormatter()
        self.notValidAfter = formatter.string(from: identity.notValidAfter)
        self.expired = identity.notValidAfter < Date()
        self.daysLeft = Int((identity.notValidAfter.timeIntervalSinceNow / 86_400).rounded(.down))
        self.expiringSoon = !expired && daysLeft < Self.renewWithinDays
        self.certificate = directory.certificateFile(for: name)
        self.key = directory.keyFile(for: name)
    }

    /// Prints a certificate just made (`verb`: issued, renewed), as JSON or as two lines.
    func printMade(_ verb: String, json: Bool) throws {
        if json {
            try printJSON(self)
        } else {
            print("\(verb) \(role) certificate '\(name)': \(certificate), key \(key)")
            print("valid until \(notValidAfter)")
        }
    }

    /// Certificates expiring within this many days are flagged for renewal.
    static let renewWithinDays = 30

    enum CodingKeys: String, CodingKey {
        case name, role, expired, certificate, key
        case notValidAfter = "not_valid_after"
        case daysLeft = "days_left"
        case expiringSoon = "expiring_soon"
    }
}

/// A CA and its certificates, as `camrig certs init` and `camrig certs list --json` print them.
struct InitOutput: Encodable {
    var ca: String
    var directory: String
    var certificates: [CertificateSummary]
    /// The serial numbers on the CA's revocation list (`certs list` only).
    var revoked: [RevokedSummary]? = nil
}

/// One entry of the CA's revocation list, as `certs list` shows it.
struct RevokedSummary: Encodable {
    var serial: String
    var revokedAt: String
    var reason: String?

    init(_ entry: RevocationList.Entry) {
        serial = entry.serialNumber.hexadecimal
        revokedAt = ISO8601DateFormatter().string(from: entry.revokedAt)
        reason = entry.reason?.description
    }

    enum CodingKeys: String, CodingKey {
        case serial, reason
        case revokedAt = "revoked_at"
    }
}
