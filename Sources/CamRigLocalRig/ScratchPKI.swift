import CamRigCoordinator
import CamRigSecurity
import Foundation
import X509

/// A throwaway rig CA in a directory of its own, for demos, benchmarks and tests.
///
/// `init` runs what `camrig certs init` runs (a CA and a `coordinator` certificate), then issues the
/// agent and viewer certificates asked for. `remove()` deletes it all.
public struct ScratchPKI: Sendable {
    /// The TLS directory: ca.pem, ca-key.pem, coordinator.pem and every issued NAME.pem and NAME-key.pem.
    public let directory: TLSDirectory

    /// The directory's path, as `--tls-dir` takes it.
    public var path: String { directory.path }

    /// Host names that agent certificates list by default: the loopback address and `localhost`.
    public static let loopbackHostnames = ["127.0.0.1", "localhost"]

    /// Creates the CA in `path` (default: a new temporary directory) and issues `agents` (agent
    /// certificates valid for `agentHostnames`) and `viewers` (viewer certificates).
    public init(
        path: String? = nil,
        caName: String? = nil,
        agents: [String] = ["agent-1"],
        agentHostnames: [String] = ["127.0.0.1"],
        viewers: [String] = ["viewer-1"]
    ) throws {
        directory = TLSDirectory(path: path ?? NSTemporaryDirectory() + "camrig-pki-" + UUID().uuidString)
        try directory.initialize(caName: caName)
        for agent in agents { try issueAgent(agent, hostnames: agentHostnames) }
        for viewer in viewers { try directory.issue(name: viewer, role: .viewer) }
    }

    /// Issues an agent certificate for `name`, valid for `hostnames`.
    public func issueAgent(_ name: String, hostnames: [String] = ScratchPKI.loopbackHostnames) throws {
        try directory.issue(name: name, role: .agent, hostnames: hostnames)
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

    /// A coordinator's (or viewer's) TLS settings with certificate `identity` of this CA.
    public func clientSecurity(identity: String = "coordinator") throws -> ClientSecurity {
        .tls(try MutualTLS.client(directory: directory, identityName: identity))
    }

    /// A new directory holding what a camera host holds: `ca.pem` and `name`'s pair (no CA key).
    public func hostDirectory(for name: String) throws -> TLSDirectory {
        let host = TLSDirectory(path: NSTemporaryDirectory() + "camrig-host-tls-" + UUID().uuidString)
        try FileManager.default.createDirectory(atPath: host.path, withIntermediateDirectories: true)
        for (from, to) in [
            (directory.caCertificatePath, host.caCertificatePath),
            (directory.certificateFile(for: name), host.certificateFile(for: name)),
            (directory.keyFile(for: name), host.keyFile(for: name)),
        ] {
            try FileManager.default.copyItem(atPath: from, toPath: to)
        }
        return host
    }

    /// Deletes the directory.
    public func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }
}
