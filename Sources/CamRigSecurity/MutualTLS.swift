import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOSSL
import X509

/// TLS 1.3 with certificates on both sides, all issued by the rig's CA.
///
/// Each side verifies the other with `PeerCertificateVerifier` (not BoringSSL's own verifier) so a
/// refusal comes with a precise reason, reported through the `onVerification` callback of the handler
/// factories. Host names are not checked: peers are addressed by IP and identified by the name and role
/// in their certificate.
public struct MutualTLS: Sendable {
    /// This side's identity.
    public let identity: PeerIdentity
    /// Where this side's certificates came from, for `reload()`.
    private let source: Source
    /// The verifier and TLS context in use; `reload()` replaces both at once.
    private let loaded: NIOLockedValueBox<Loaded>

    private struct Source: Sendable {
        var directory: TLSDirectory
        var identityName: String
        var ownRoles: [PeerRole]
        var acceptedPeerRoles: Set<PeerRole>
        var server: Bool
    }

    private struct Loaded: Sendable {
        var verifier: PeerCertificateVerifier
        var context: NIOSSLContext
        var certificate: Certificate
    }

    /// How this side judges the peer: the rig's CA and its revocation list as last loaded.
    public var verifier: PeerCertificateVerifier { loaded.withLockedValue { $0.verifier } }
    var context: NIOSSLContext { loaded.withLockedValue { $0.context } }
    /// This side's own certificate as last loaded.
    public var certificate: Certificate { loaded.withLockedValue { $0.certificate } }

    /// What a reload found.
    public struct Reloaded: Sendable {
        /// This side's certificate now (a renewed one when `renewed`).
        public var certificate: Certificate
        public var renewed: Bool
        /// How many certificates the revocation list now names, and its number (0 without a list).
        public var revokedCount: Int
        public var revocationListNumber: Int
    }

    /// Reads the TLS directory again: this side's certificate and key (renewed with `camrig certs renew`),
    /// the CA and the revocation list. New connections use what was read; connections already open keep
    /// their TLS session (callers re-check their peers against the new `verifier`). On any error the
    /// previous set stays in use and the error says what to fix.
    @discardableResult
    public func reload() throws -> Reloaded {
        let fresh = try Self.load(source)
        guard fresh.identity.name == identity.name, fresh.identity.role == identity.role else {
            throw SecurityError(
                "\(source.directory.path) now holds certificate '\(fresh.identity.name)' (\(fresh.identity.role.rawValue)) where this process was started "
                    + "as '\(identity.name)' (\(identity.role.rawValue)): restart it to change identity"
            )
        }
        let loadedNumber = loaded.withLockedValue { $0.verifier.revocations?.number ?? 0 }
        let freshNumber = fresh.loaded.verifier.revocations?.number ?? 0
        guard freshNumber >= loadedNumber else {
            throw SecurityError(
                "\(source.directory.revocationListPath) is number \(freshNumber), older than the list in use (number \(loadedNumber)): "
                    + "it would take back revocations; copy the rig's newest crl.pem"
            )
        }
        let previous = loaded.withLockedValue { current in
            let previous = current.certificate
            current = fresh.loaded
            return previous
        }
        let list = fresh.loaded.verifier.revocations
        return Reloaded(
            certificate: fresh.loaded.certificate,
            renewed: previous.serialNumber != fresh.loaded.certificate.serialNumber,
            revokedCount: list?.entries.count ?? 0,
            revocationListNumber: list?.number ?? 0
        )
    }

    /// The agent's side: presents an agent certificate; accepts coordinators and viewers.
    public static func agent(directory: TLSDirectory, identityName: String? = nil) throws -> MutualTLS {
        try make(
            directory: directory,
            identityName: identityName,
            ownRoles: [.agent],
            acceptedPeerRoles: [.coordinator, .viewer],
            server: true
        )
    }

    /// A client's side: presents a coordinator certificate (or, when the directory has none, a viewer
    /// certificate); accepts only agents.
    public static func client(
        directory: TLSDirectory,
        identityName: String? = nil,
        roles: [PeerRole] = [.coordinator, .viewer]
    ) throws -> MutualTLS {
        try make(
            directory: directory,
            identityName: identityName,
            ownRoles: roles,
            acceptedPeerRoles: [.agent],
            server: false
        )
    }

    static func make(
        directory: TLSDirectory,
        identityName: String?,
        ownRoles: [PeerRole],
        acceptedPeerRoles: Set<PeerRole>,
        server: Bool
    ) throws -> MutualTLS {
        // The name is fixed at the first load, so that a reload reads the same identity.
        let name = try identityName ?? directory.identity(named: nil, roles: ownRoles).entry.name
        let source = Source(
            directory: directory,
            identityName: name,
            ownRoles: ownRoles,
            acceptedPeerRoles: acceptedPeerRoles,
            server: server
        )
        let first = try load(source)
        return MutualTLS(identity: first.identity, source: source, loaded: NIOLockedValueBox(first.loaded))
    }

    private static func load(_ source: Source) throws -> (identity: PeerIdentity, loaded: Loaded) {
        let directory = source.directory
        let server = source.server
        let trustRoot = try directory.trustRoot()
        let revocations = try directory.revocationList(verifiedBy: trustRoot)
        let (entry, certificate, key, root) = try directory.nioIdentity(named: source.identityName, roles: source.ownRoles)
        do {
            var configuration: TLSConfiguration
            if server {
                configuration = TLSConfiguration.makeServerConfiguration(
                    certificateChain: [.certificate(certificate)],
                    privateKey: .privateKey(key)
                )
            } else {
                configuration = TLSConfiguration.makeClientConfiguration()
                configuration.certificateChain = [.certificate(certificate)]
                configuration.privateKey = .privateKey(key)
            }
            configuration.minimumTLSVersion = .tlsv13
            configuration.maximumTLSVersion = .tlsv13
            // Requests (server) and requires a peer certificate; the chain itself is checked by `verifier`.
            configuration.certificateVerification = .noHostnameVerification
            configuration.trustRoots = .certificates([root])
            let loaded = Loaded(
                verifier: PeerCertificateVerifier(trustRoot: trustRoot, acceptedRoles: source.acceptedPeerRoles, revocations: revocations),
                context: try NIOSSLContext(configuration: configuration),
                certificate: entry.certificate
            )
            return (entry.identity, loaded)
        } catch let error as SecurityError {
            throw error
        } catch {
            throw SecurityError("cannot set up TLS with certificate '\(entry.name)' from \(directory.path): \(error)")
        }
    }

    /// A server handler for one accepted connection; the verdict on the client lands in `record`.
    public func makeServerHandler(recordingInto record: PeerVerificationRecord) -> NIOSSLServerHandler {
        NIOSSLServerHandler(context: context, customVerificationCallback: verificationCallback(record))
    }

    /// A client handler for one outgoing connection; the verdict on the agent lands in `record`.
    public func makeClientHandler(recordingInto record: PeerVerificationRecord) throws -> NIOSSLClientHandler {
        try NIOSSLClientHandler(context: context, serverHostname: nil, customVerificationCallback: verificationCallback(record))
    }

    private func verificationCallback(_ record: PeerVerificationRecord) -> NIOSSLCustomVerificationCallback {
        let loaded = self.loaded
        return { certificates, promise in
            // Read when the peer's certificate arrives, not when the connection was accepted: a list
            // reloaded in between applies.
            let verifier = loaded.withLockedValue { $0.verifier }
            let chain: [Certificate]
            do {
                chain = try certificates.map { try Certificate(derEncoded: try $0.toDERBytes()) }
            } catch {
                record.outcome = .refused(PeerRefusal(.invalid, "presented a certificate that cannot be parsed: \(error)"))
                promise.succeed(.failed)
                return
            }
            record.chain = chain
            promise.completeWithTask {
                let outcome = await verifier.verify(chain: chain)
                record.outcome = outcome
                if case .accepted = outcome { return .certificateVerified }
                return .failed
            }
        }
    }

    /// Explains a TLS failure seen on a connection, for logs: why the handshake did not complete.
    public static func explain(_ error: any Error) -> String {
        let text = String(describing: error)
        let known: [(String, String)] = [
            ("PEER_DID_NOT_RETURN_A_CERTIFICATE", "presented no certificate"),
            ("EOF during handshake", "closed the connection during the TLS handshake"),
            ("CERTIFICATE_REQUIRED", "the peer requires a certificate and this side presented none"),
            ("WRONG_VERSION_NUMBER", "did not speak TLS (plaintext or garbage on a TLS port?)"),
            ("HTTP_REQUEST", "sent HTTP, not TLS"),
            ("UNSUPPORTED_PROTOCOL", "offered no TLS 1.3 (CamRig requires TLS 1.3)"),
            ("TLSV1_ALERT_PROTOCOL_VERSION", "refused TLS 1.3 (CamRig requires TLS 1.3)"),
            ("CERTIFICATE_EXPIRED", "the peer says this side's certificate has expired"),
            ("CERTIFICATE_REVOKED", "the peer says this side's certificate was revoked"),
            ("ALERT_UNKNOWN_CA", "the peer does not trust this side's CA"),
            ("ALERT_BAD_CERTIFICATE", "the peer refused this side's certificate (see the peer's log for why)"),
            ("ALERT_CERTIFICATE_UNKNOWN", "the peer refused this side's certificate (see the peer's log for why)"),
            ("CERTIFICATE_VERIFY_FAILED", "the peer's certificate failed verification"),
        ]
        for (marker, explanation) in known where text.contains(marker) {
            return explanation
        }
        if let ssl = error as? NIOSSLError, case .uncleanShutdown = ssl {
            return "the peer closed the connection without ending TLS"
        }
        return text
    }
}

/// Where a connection's certificate verdict is kept: written by the TLS verification callback (on any
/// thread), read by the connection's handlers once TLS completes or fails.
public final class PeerVerificationRecord: Sendable {
    private let box = NIOLockedValueBox<PeerCertificateVerifier.Outcome?>(nil)
    private let chainBox = NIOLockedValueBox<[Certificate]>([])

    public init() {}

    /// The chain the peer presented, kept so that it can be judged again after a reload.
    public var chain: [Certificate] {
        get { chainBox.withLockedValue { $0 } }
        set { chainBox.withLockedValue { $0 = newValue } }
    }

    /// The verdict, once the peer's certificate was judged.
    public var outcome: PeerCertificateVerifier.Outcome? {
        get { box.withLockedValue { $0 } }
        set { box.withLockedValue { $0 = newValue } }
    }

    /// The peer's identity, if its certificate was accepted.
    public var acceptedIdentity: PeerIdentity? {
        if case .accepted(let identity) = outcome { return identity }
        return nil
    }

    /// Why the peer's certificate was refused, if it was.
    public var refusal: PeerRefusal? {
        if case .refused(let refusal) = outcome { return refusal }
        return nil
    }
}
