import CamRigSecurity
import Foundation
import X509

/// A throwaway rig CA in a temporary directory, with the certificates tests need.
///
/// `init()` runs what `camrig certs init` runs, then issues `agent-1` (agent) and `viewer-1` (viewer).
public struct TestPKI: Sendable {
    /// The TLS directory (ca.pem, ca-key.pem, coordinator.pem, agent-1.pem, viewer-1.pem and keys).
    public let directory: TLSDirectory
    public var path: String { directory.path }

    public init(agents: [String] = ["agent-1"]) throws {
        let path = NSTemporaryDirectory() + "camrig-pki-" + UUID().uuidString
        directory = TLSDirectory(path: path)
        try directory.initialize()
        for agent in agents {
            try directory.issue(name: agent, role: .agent, hostnames: ["127.0.0.1"])
        }
        try directory.issue(name: "viewer-1", role: .viewer)
    }

    /// Issues a certificate that expired a day ago.
    public func issueExpired(name: String, role: PeerRole) throws {
        let authority = try directory.loadAuthority()
        let issued = try authority.issue(
            name: name,
            role: role,
            notValidBefore: Date().addingTimeInterval(-10 * 86_400),
            notValidAfter: Date().addingTimeInterval(-86_400)
        )
        try directory.write(issued, as: name)
    }

    /// Issues a certificate for `name` from a different CA and stores it in this directory, as if someone
    /// brought a certificate from another rig.
    public func issueFromOtherCA(name: String, role: PeerRole, caName: String? = nil) throws {
        let other = try CertificateAuthority.create(name: caName ?? "Other Rig CA")
        try directory.write(try other.issue(name: name, role: role), as: name)
    }

    /// The subject of this rig's CA, e.g. `CN=CamRig CA 1a2b3c,O=CamRig`.
    public var caSubject: String {
        get throws { "\(try directory.trustRoot().subject)" }
    }

    public func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }
}
