import Crypto
import CamRigFiles
import Foundation
import NIOSSL
import X509

/// A directory of PEM files: the rig's CA and the identities issued by it.
///
/// Layout (what `camrig certs init` and `camrig certs issue` write):
///
///     ca.pem            the CA certificate: every peer's trust root
///     ca-key.pem        the CA private key (mode 0600): needed only where certificates are issued
///     NAME.pem          a certificate issued to NAME (its role is in the subject's OU)
///     NAME-key.pem      its private key (mode 0600)
///     crl.pem           the CA's revocation list, once a certificate was revoked (`camrig certs revoke`)
///     revoked/          revoked certificates and keys, kept as NAME-SERIAL.pem for the record
///
/// A camera host needs only `ca.pem` and its own `NAME.pem` / `NAME-key.pem`, plus `crl.pem` once
/// there is one.
public struct TLSDirectory: Sendable {
    public static let caCertificateFile = "ca.pem"
    public static let caKeyFile = "ca-key.pem"

    /// The directory.
    public let path: String

    public init(path: String) {
        self.path = path
    }

    /// A certificate with its file-system name and role.
    public struct Entry: Sendable {
        public let name: String
        public let identity: PeerIdentity
        public let certificate: Certificate
    }

    /// Names become file names: letters, digits, `.`, `_` and `-`, not starting with `.`, and not `ca`.
    public static func validateName(_ name: String) throws {
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
        guard !name.isEmpty, name.count <= 64, name.allSatisfy(allowed.contains), !name.hasPrefix("."),
            name != "ca", name != "crl", !name.hasSuffix("-key")
        else {
            throw SecurityError(
                "'\(name)' is not a usable certificate name: use 1–64 letters, digits, '.', '_' or '-', not starting with '.', not 'ca' or 'crl'"
            )
        }
    }

    func file(_ name: String) -> String { (path as NSString).appendingPathComponent(name) }
    public func certificateFile(for name: String) -> String { file("\(name).pem") }
    public func keyFile(for name: String) -> String { file("\(name)-key.pem") }
    public var caCertificatePath: String { file(Self.caCertificateFile) }
    public var revocationListPath: String { file(RevocationList.fileName) }

    // MARK: Revoking

    /// Revokes `name`'s certificate: adds its serial number to the CA's revocation list (`crl.pem`,
    /// re-signed, replaced by rename) and moves its files to `revoked/`, so the name can be issued again.
    /// Peers refuse it once they have the new `crl.pem` (copy it to each host's TLS directory; agents
    /// re-read theirs on SIGHUP).
    @discardableResult
    public func revoke(
        name: String,
        reason: RevocationList.Reason? = nil,
        now: Date = Date()
    ) throws -> (certificate: Certificate, list: RevocationList) {
        guard let entry = try entries().first(where: { $0.name == name }) else {
            throw SecurityError("no certificate '\(name)' in \(path): `camrig certs list --dir \(path)` lists them")
        }
        let authority = try loadAuthority()
        let previous = try revocationList(verifiedBy: authority.certificate)
        let (list, pem) = try RevocationList.issue(
            by: authority,
            previous: previous,
            adding: [RevocationList.Entry(serialNumber: entry.certificate.serialNumber, revokedAt: now, reason: reason)]
        )
        let staging = file(RevocationList.fileName + ".new-\(UInt32.random(in: 0...UInt32.max))")
        try write(pem: pem, to: staging, secret: false)
        try replace(staging, with: revocationListPath)
        let archive = file("revoked")
        try FileManager.default.createDirectory(atPath: archive, withIntermediateDirectories: true)
        let serial = entry.certificate.serialNumber.bytes.map { String(format: "%02x", $0) }.joined()
        let archived = (archive as NSString).appendingPathComponent("\(name)-\(serial)")
        for (from, to) in [(certificateFile(for: name), archived + ".pem"), (keyFile(for: name), archived + "-key.pem")]
        where FileManager.default.fileExists(atPath: from) {
            guard rename(from, to) == 0 else {
                throw SecurityError("revoked, but cannot move \(from) to \(to): \(String(cString: strerror(errno)))")
            }
        }
        return (entry.certificate, list)
    }

    /// The CA's revocation list, verified against `trustRoot`; `nil` when there is no `crl.pem`.
    ///
    /// - Throws: when the file exists but is not a list the rig's CA signed: a peer must not run on with
    ///   a revocation list it cannot trust.
    public func revocationList(verifiedBy trustRoot: Certificate) throws -> RevocationList? {
        guard FileManager.default.fileExists(atPath: revocationListPath) else { return nil }
        guard let pem = try? String(contentsOfFile: revocationListPath, encoding: .utf8) else {
            throw SecurityError("cannot read \(revocationListPath)")
        }
        return try RevocationList(pem: pem, verifiedBy: trustRoot, source: revocationListPath)
    }

    // MARK: Creating

    /// Creates the directory, a new CA and a coordinator certificate named `coordinatorName`.
    ///
    /// Refuses to overwrite an existing CA: a new CA would orphan every certificate issued by the old one.
    @discardableResult
    public func initialize(
        caName: String? = nil,
        coordinatorName: String = "coordinator",
        coordinatorHostnames: [String] = TLSDirectory.localHostnames(),
        validFor days: Int = 3650
    ) throws -> (authority: CertificateAuthority, coordinator: CertificateAuthority.IssuedCertificate) {
        if FileManager.default.fileExists(atPath: file(Self.caCertificateFile)) {
            throw SecurityError(
                "\(file(Self.caCertificateFile)) already exists: this directory has a CA. Issue more certificates with "
                    + "`camrig certs issue --dir \(path) --name NAME --role ROLE`, or choose another directory"
            )
        }
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        // A unique default name lets a refusal say "issued by another rig's CA" by name.
        let name = caName ?? "CamRig CA \(String(UInt32.random(in: 0...UInt32.max), radix: 16))"
        let authority = try CertificateAuthority.create(name: name, validFor: days)
        try write(pem: try authority.certificate.serializeAsPEM().pemString, to: file(Self.caCertificateFile), secret: false)
        try write(pem: authority.privateKey.pemRepresentation, to: file(Self.caKeyFile), secret: true)
        let coordinator = try issue(name: coordinatorName, role: .coordinator, hostnames: coordinatorHostnames, authority: authority)
        return (authority, coordinator)
    }

    /// The names this machine is reached by locally, which a coordinator certificate carries so that
    /// HTTPS clients checking host names (curl, browsers) accept `camrig serve`'s address: localhost,
    /// 127.0.0.1, ::1 and the host's name.
    public static func localHostnames() -> [String] {
        var names = ["localhost", "127.0.0.1", "::1"]
        let host = ProcessInfo.processInfo.hostName
        if !host.isEmpty, !names.contains(host) { names.append(host) }
        return names
    }

    /// Issues a certificate with this directory's CA and writes it as `NAME.pem` and `NAME-key.pem`.
    @discardableResult
    public func issue(
        name: String,
        role: PeerRole,
        hostnames: [String] = [],
        validFor days: Int = 825,
        authority: CertificateAuthority? = nil
    ) throws -> CertificateAuthority.IssuedCertificate {
        try Self.validateName(name)
        if FileManager.default.fileExists(atPath: certificateFile(for: name)) {
            throw SecurityError("\(certificateFile(for: name)) already exists: choose another name or remove it first")
        }
        let authority = try authority ?? loadAuthority()
        let issued = try authority.issue(name: name, role: role, hostnames: hostnames, validFor: days)
        try write(issued, as: name)
        return issued
    }

    /// Re-issues `name`'s certificate before it expires: the same name, role and host names, a new key,
    /// valid for `days` from now. The new files replace the old ones by rename, so a peer reading the
    /// directory never sees half of each; peers load it when they restart.
    @discardableResult
    public func renew(name: String, validFor days: Int = 825) throws -> CertificateAuthority.IssuedCertificate {
        guard let entry = try entries().first(where: { $0.name == name }) else {
            throw SecurityError("no certificate '\(name)' in \(path): `camrig certs list --dir \(path)` lists them")
        }
        let authority = try loadAuthority()
        let hostnames: [String] = (try? entry.certificate.extensions.subjectAlternativeNames)??.compactMap { name in
            switch name {
            case .dnsName(let host): host
            case .ipAddress(let address): IPAddressBytes.text(Array(address.bytes))
            default: nil
            }
        } ?? []
        let issued = try authority.issue(name: name, role: entry.identity.role, hostnames: hostnames, validFor: days)
        let staging = TLSDirectory(path: path)
        let suffix = ".renewing-\(UInt32.random(in: 0...UInt32.max))"
        try staging.write(issued, as: name + suffix)
        for (from, to) in [(keyFile(for: name + suffix), keyFile(for: name)), (certificateFile(for: name + suffix), certificateFile(for: name))] {
            try replace(from, with: to)
        }
        return issued
    }

    /// Writes a certificate and key under `name` (used by `issue`, and by tests that need odd certificates).
    public func write(_ issued: CertificateAuthority.IssuedCertificate, as name: String) throws {
        try write(pem: issued.privateKey.pemRepresentation, to: keyFile(for: name), secret: true)
        try write(pem: try issued.certificate.serializeAsPEM().pemString, to: certificateFile(for: name), secret: false)
    }

    /// Writes `pem` durably (whole or absent after a crash, kept after a power cut), keys readable by the owner only.
    func write(pem: String, to file: String, secret: Bool) throws {
        do {
            try DurableFile.write(Array(pem.utf8), to: URL(fileURLWithPath: file), permissions: secret ? 0o600 : 0o644)
        } catch {
            throw SecurityError("cannot write \(file): \(error); check the directory exists and is writable")
        }
    }

    /// Renames `from` to `to` and flushes the directory, so that the new name survives a power cut.
    func replace(_ from: String, with to: String) throws {
        guard rename(from, to) == 0 else {
            throw SecurityError("cannot replace \(to): \(String(cString: strerror(errno)))")
        }
        try? DurableFile.flushDirectory(URL(fileURLWithPath: to).deletingLastPathComponent())
    }

    // MARK: Loading

    /// The CA with its key, for issuing.
    public func loadAuthority() throws -> CertificateAuthority {
        let certificate = try trustRoot()
        let keyPath = file(Self.caKeyFile)
        guard let keyPEM = try? String(contentsOfFile: keyPath, encoding: .utf8) else {
            throw SecurityError("no CA key at \(keyPath): issue certificates where `camrig certs init` was run")
        }
        do {
            return try CertificateAuthority(certificate: certificate, privateKey: P256.Signing.PrivateKey(pemRepresentation: keyPEM))
        } catch {
            throw SecurityError("cannot read the CA key \(keyPath): \(error)")
        }
    }

    /// The CA certificate every peer trusts.
    public func trustRoot() throws -> Certificate {
        let caPath = file(Self.caCertificateFile)
        guard let pem = try? String(contentsOfFile: caPath, encoding: .utf8) else {
            throw SecurityError(
                "no CA certificate at \(caPath): create one with `camrig certs init --dir \(path)` or copy the rig's ca.pem there"
            )
        }
        do {
            return try Certificate(pemEncoded: pem)
        } catch {
            throw SecurityError("\(caPath) is not a PEM certificate: \(error)")
        }
    }

    /// Every certificate in the directory except the CA's, sorted by name.
    public func entries() throws -> [Entry] {
        let files: [String]
        do {
            files = try FileManager.default.contentsOfDirectory(atPath: path)
        } catch {
            throw SecurityError("cannot read TLS directory \(path): \(error.localizedDescription)")
        }
        return files.sorted().compactMap { file -> Entry? in
            guard file.hasSuffix(".pem"), !file.hasSuffix("-key.pem"), file != Self.caCertificateFile else { return nil }
            let name = String(file.dropLast(4))
            guard let pem = try? String(contentsOfFile: certificateFile(for: name), encoding: .utf8),
                let certificate = try? Certificate(pemEncoded: pem),
                let identity = try? PeerIdentity(certificate: certificate)
            else { return nil }
            return Entry(name: name, identity: identity, certificate: certificate)
        }
    }

    /// Picks the identity to present: `name` when given; otherwise the only certificate of the first role
    /// in `roles` (in order of preference) that has any.
    public func identity(named name: String?, roles: [PeerRole]) throws -> (entry: Entry, keyPEM: String) {
        let roleList = roles.map(\.rawValue).joined(separator: " or ")
        let entry: Entry
        if let name {
            guard let found = try entries().first(where: { $0.name == name }) else {
                throw SecurityError("no certificate \(certificateFile(for: name)): issue one with `camrig certs issue --dir \(path) --name \(name) --role ...`")
            }
            guard roles.contains(found.identity.role) else {
                throw SecurityError("certificate '\(name)' has role \(found.identity.role.rawValue), but this program needs \(roleList)")
            }
            entry = found
        } else {
            let all = try entries()
            guard let role = roles.first(where: { role in all.contains { $0.identity.role == role } }) else {
                throw SecurityError(
                    "no \(roleList) certificate in \(path): issue one with `camrig certs issue --dir \(path) --name NAME --role \(roles[0].rawValue)`"
                )
            }
            let candidates = all.filter { $0.identity.role == role }
            guard candidates.count == 1 else {
                throw SecurityError(
                    "\(path) holds several \(role.rawValue) certificates (\(candidates.map(\.name).joined(separator: ", "))): choose one with --identity NAME"
                )
            }
            entry = candidates[0]
        }
        guard let keyPEM = try? String(contentsOfFile: keyFile(for: entry.name), encoding: .utf8) else {
            throw SecurityError("no private key \(keyFile(for: entry.name)) for certificate '\(entry.name)'")
        }
        return (entry, keyPEM)
    }
}

extension TLSDirectory {
    /// The identity `name` (or the directory's only one of `roles`) and the CA's certificate, as
    /// swift-nio-ssl takes them; an identity that was revoked or has expired is an error saying what to do.
    public func nioIdentity(named name: String?, roles: [PeerRole]) throws -> (entry: Entry, certificate: NIOSSLCertificate, key: NIOSSLPrivateKey, trustRoot: NIOSSLCertificate) {
        let root = try trustRoot()
        let revocations = try revocationList(verifiedBy: root)
        let (entry, keyPEM) = try identity(named: name, roles: roles)
        if let revoked = revocations?.entry(for: entry.certificate.serialNumber) {
            throw SecurityError(
                "this host's certificate '\(entry.name)' was revoked on \(PeerCertificateVerifier.format(revoked.revokedAt)) "
                    + "(\(revocationListPath)): issue a new one with `camrig certs issue --dir DIR --name \(entry.name) --role \(entry.identity.role.rawValue)` and copy it here"
            )
        }
        if entry.certificate.notValidAfter < Date() {
            throw SecurityError(
                "this host's certificate '\(entry.name)' expired at \(PeerCertificateVerifier.format(entry.certificate.notValidAfter)): "
                    + "issue a new one with `camrig certs issue --dir DIR --name \(entry.name) --role \(entry.identity.role.rawValue)`"
            )
        }
        do {
            let certificate = try NIOSSLCertificate(bytes: Array(try entry.certificate.serializeAsPEM().pemString.utf8), format: .pem)
            let key = try NIOSSLPrivateKey(bytes: Array(keyPEM.utf8), format: .pem)
            let nioRoot = try NIOSSLCertificate(bytes: Array(try root.serializeAsPEM().pemString.utf8), format: .pem)
            return (entry, certificate, key, nioRoot)
        } catch {
            throw SecurityError("cannot set up TLS with certificate '\(entry.name)' from \(path): \(error)")
        }
    }
}
