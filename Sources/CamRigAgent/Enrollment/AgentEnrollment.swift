import CamRigClock
import CamRigSecurity
import Crypto
import Foundation
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import X509

/// An agent's enrollment with `camrig serve`: joining with a token, renewing its certificate before it
/// expires, and fetching the rig's revocation list. The key is made on the host and never leaves it; what
/// the service issues is checked and installed in the agent's TLS directory (`TLSDirectory.install`).
public struct AgentEnrollment: Sendable {
    /// The service, https://HOST[:PORT].
    public let url: String
    public let directory: TLSDirectory
    /// The port this agent serves on, which the coordinator will connect to.
    public let port: Int
    let client: EnrollmentClient

    public init(url: String, directory: TLSDirectory, port: Int) throws {
        self.url = url
        self.directory = directory
        self.port = port
        client = try EnrollmentClient(url: url)
    }

    /// Joins the rig with `token`, asking for the certificate name `name`; `host` is the address the
    /// coordinator should connect to (default: the address the request comes from).
    public func enroll(token text: String, name: String, host: String? = nil) async throws -> EnrollmentState {
        let token = try JoinToken(text: text)
        try TLSDirectory.validateName(name)
        let ca = try await client.authority(pinned: token.caPin)
        let key = P256.Signing.PrivateKey()
        let csr = try Self.request(name: name, key: key)
        let issued = try await client.issue(
            "/enroll/v1/join", Enrollment.JoinRequest(token: text, name: name, csr: try csr.serializeAsPEM().pemString, port: port, host: host), trust: ca)
        return try directory.install(issued, key: key, caPin: token.caPin, url: url)
    }

    /// A new certificate for a new key, asked for with the current one.
    public func renew(_ state: EnrollmentState) async throws -> EnrollmentState {
        let ca = try directory.trustRoot()
        let (entry, keyPEM) = try directory.identity(named: state.name, roles: [.agent])
        let current = try P256.Signing.PrivateKey(pemRepresentation: keyPEM)
        let key = P256.Signing.PrivateKey()
        let csr = try Self.request(name: state.name, key: key)
        let proof = try current.signature(for: EnrollmentRegistrar.der(csr)).derRepresentation.base64EncodedString()
        let request = Enrollment.RenewRequest(
            certificate: try entry.certificate.serializeAsPEM().pemString, csr: try csr.serializeAsPEM().pemString, proof: proof, port: port)
        let issued = try await client.issue("/enroll/v1/renew", request, trust: ca)
        return try directory.install(issued, key: key, caPin: nil, url: state.url)
    }

    /// Fetches the rig's revocation list; whether it changed (and was installed).
    public func refreshRevocationList() async throws -> Bool {
        let ca = try directory.trustRoot()
        let response = try await client.request(.GET, "/enroll/v1/crl", trust: .rig(ca))
        if response.status == 204 { return false }
        guard response.status == 200 else {
            throw SecurityError("the service at \(url) did not give the revocation list (HTTP \(response.status): \(response.detail))")
        }
        return try directory.installRevocationList(String(decoding: response.body, as: UTF8.self), verifiedBy: ca)
    }

    /// The certificate request an agent named `name` sends for `key`.
    public static func request(name: String, key: P256.Signing.PrivateKey) throws -> CertificateSigningRequest {
        let subject = try DistinguishedName {
            OrganizationName("CamRig")
            OrganizationalUnitName(PeerRole.agent.rawValue)
            CommonName(name)
        }
        return try CertificateSigningRequest(
            version: .v1, subject: subject, privateKey: Certificate.PrivateKey(key), attributes: CertificateSigningRequest.Attributes())
    }

    /// A certificate name from a host name: lower case, and characters a name cannot hold replaced by '-'.
    public static func name(fromHost host: String) -> String {
        let allowed = Set("abcdefghijklmnopqrstuvwxyz0123456789._-")
        let short = host.split(separator: ".").first.map(String.init) ?? host
        let name = String(short.lowercased().map { allowed.contains($0) ? $0 : "-" }.prefix(64))
        return name.isEmpty || name.hasPrefix(".") ? "camrig-agent" : name
    }
}

/// Keeps an enrolled agent's certificate renewed (two thirds into its life) and its revocation list
/// current (asked for every `revocationInterval`), reloading the agent's TLS whenever either changes.
public struct EnrollmentMaintenance: Service {
    let enrollment: AgentEnrollment
    let revocationInterval: Duration
    let reload: @Sendable () async throws -> Void
    let logger: Logger

    public init(enrollment: AgentEnrollment, revocationInterval: Duration, logger: Logger, reload: @escaping @Sendable () async throws -> Void) {
        self.enrollment = enrollment
        self.revocationInterval = revocationInterval
        self.reload = reload
        self.logger = logger
    }

    /// Two thirds into the life of the certificate in the directory (which may be older than the state
    /// file says, if the agent stopped in the middle of installing a renewal).
    func renewalDue(_ state: EnrollmentState) -> Date {
        guard let entry = ((try? enrollment.directory.entries()) ?? []).first(where: { $0.name == state.name }) else { return state.renewAfter }
        // Certificates are dated five minutes back, against clocks a little behind.
        let issued = entry.certificate.notValidBefore.addingTimeInterval(300)
        return issued.addingTimeInterval(entry.certificate.notValidAfter.timeIntervalSince(issued) * 2 / 3)
    }

    public func run() async throws {
        guard var state = enrollment.directory.enrollmentState() else { return }
        var renewAt = min(state.renewAfter, renewalDue(state))
        var revocationAt = Date()
        var reloadOwed = false
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            let now = Date()
            if now >= renewAt {
                do {
                    state = try await enrollment.renew(state)
                    renewAt = min(state.renewAfter, renewalDue(state))
                    try await reload()
                    logger.notice(
                        "certificate renewed", metadata: ["name": "\(state.name)", "valid_until": "\(state.notValidAfter)", "renew_after": "\(state.renewAfter)"])
                } catch {
                    // Tried again soon, sooner as the end nears; the current certificate serves meanwhile.
                    let left = state.notValidAfter.timeIntervalSince(now)
                    if left <= 0 {
                        renewAt = .distantFuture
                        logger.error(
                            "the certificate expired before it could be renewed: enroll again with a new token (camrig-agent --enroll URL --token TOKEN)",
                            metadata: ["error": "\(error)", "valid_until": "\(state.notValidAfter)"])
                    } else {
                        renewAt = now.addingTimeInterval(min(300, max(2, left / 10)))
                        logger.warning("certificate renewal failed; trying again", metadata: ["error": "\(error)", "retry_at": "\(renewAt)", "valid_until": "\(state.notValidAfter)"])
                    }
                }
            }
            if now >= revocationAt {
                do {
                    // A list installed but not yet loaded (the reload failed) is loaded on the next round.
                    if try await enrollment.refreshRevocationList() || reloadOwed {
                        reloadOwed = true
                        try await reload()
                        reloadOwed = false
                        logger.notice("new revocation list from the service installed")
                    }
                } catch {
                    logger.warning("cannot fetch the revocation list from the service", metadata: ["error": "\(error)"])
                }
                revocationAt = Date().addingTimeInterval(revocationInterval.seconds)
            }
            let wait = max(0.05, min(renewAt, revocationAt).timeIntervalSinceNow)
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .milliseconds(Int64(wait * 1000))) }
        }
    }
}
