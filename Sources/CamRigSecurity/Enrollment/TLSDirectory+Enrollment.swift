import CamRigFiles
import Crypto
import Foundation
import X509

/// What an enrolled agent keeps of its enrollment, beside its certificate: `enrollment.json` in its TLS
/// directory. It is how the agent renews its certificate and fetches the revocation list on its own.
public struct EnrollmentState: Codable, Sendable, Hashable {
    /// The service it enrolled with (https://HOST:PORT).
    public var url: String
    /// The certificate's name.
    public var name: String
    public var notValidAfter: Date
    public var renewAfter: Date

    public init(url: String, name: String, notValidAfter: Date, renewAfter: Date) {
        self.url = url
        self.name = name
        self.notValidAfter = notValidAfter
        self.renewAfter = renewAfter
    }

    public static let fileName = "enrollment.json"
}

extension TLSDirectory {
    /// Whether the directory holds a certificate of `role` (an agent that has one does not enroll again).
    public func hasIdentity(role: PeerRole) -> Bool {
        ((try? entries()) ?? []).contains { $0.identity.role == role }
    }

    /// Checks what the service issued for the key `key` and installs it: the key, the certificate, the
    /// CA certificate, the revocation list and `enrollment.json`, each written durably (the key first, the
    /// state last, so that an agent stopped midway enrolls again rather than running half-enrolled).
    @discardableResult
    public func install(_ issued: Enrollment.Issued, key: P256.Signing.PrivateKey, caPin: String?, url: String) throws -> EnrollmentState {
        let ca: Certificate
        let certificate: Certificate
        do {
            ca = try Certificate(pemEncoded: issued.ca)
            certificate = try Certificate(pemEncoded: issued.certificate)
        } catch {
            throw SecurityError("the service answered with certificates that cannot be read: \(error)")
        }
        if let caPin, JoinToken.pin(of: ca) != caPin {
            throw SecurityError("the service answered with a CA that is not the one the token pins: refusing it")
        }
        if let current = try? trustRoot(), current != ca {
            throw SecurityError("\(caCertificatePath) holds another rig's CA: this directory belongs to another rig")
        }
        guard certificate.issuer == ca.subject, ca.publicKey.isValidSignature(certificate.signature, for: certificate) else {
            throw SecurityError("the certificate the service sent was not signed by the rig's CA")
        }
        guard certificate.publicKey == Certificate.PublicKey(key.publicKey) else {
            throw SecurityError("the certificate the service sent is not for this host's key")
        }
        let identity = try PeerIdentity(certificate: certificate)
        guard identity.name == issued.name, identity.role == .agent else {
            throw SecurityError("the certificate the service sent is for '\(identity.name)' (\(identity.role.rawValue)), not the agent '\(issued.name)'")
        }
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        // The state first: a certificate in the directory always has the enrollment that renews it (an
        // agent stopped before the certificate is in place enrolls again).
        let state = EnrollmentState(url: url, name: issued.name, notValidAfter: issued.notValidAfter, renewAfter: issued.renewAfter)
        try DurableFile.write(Array(try JoinTokenList.encoder.encode(state)), to: URL(fileURLWithPath: file(EnrollmentState.fileName)), permissions: 0o600)
        try write(pem: issued.ca, to: caCertificatePath, secret: false)
        let suffix = ".enrolling-\(UInt32.random(in: 0...UInt32.max))"
        try write(pem: key.pemRepresentation, to: keyFile(for: issued.name + suffix), secret: true)
        try write(pem: issued.certificate, to: certificateFile(for: issued.name + suffix), secret: false)
        try replace(keyFile(for: issued.name + suffix), with: keyFile(for: issued.name))
        try replace(certificateFile(for: issued.name + suffix), with: certificateFile(for: issued.name))
        // A list that does not verify is left out (the previous one stays); the next fetch tries again.
        if let crl = issued.crl { _ = try? installRevocationList(crl, verifiedBy: ca) }
        return state
    }

    /// Finishes an install that stopped part way, before the identity is loaded: `install` puts the new
    /// key in place, then the new certificate, each by a rename from a temporary name, and a power cut
    /// between the two leaves the new key beside the old certificate (a pair TLS cannot use). When the key
    /// in place is the one the waiting certificate is for, the certificate follows it; the files of an
    /// attempt that never got its key in place are removed (the pair in place is whole). Returns the names
    /// whose install was finished.
    @discardableResult
    public func finishInterruptedInstall() throws -> [String] {
        let marker = ".enrolling-"
        let files = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
        var finished: [String] = []
        for file in files.sorted() where file.contains(marker) && file.hasSuffix(".pem") && !file.hasSuffix("-key.pem") {
            let temporary = String(file.dropLast(".pem".count))
            guard let range = temporary.range(of: marker) else { continue }
            let name = String(temporary[..<range.lowerBound])
            let waitingCertificate = self.file(file)
            let waitingKey = keyFile(for: temporary)
            if !FileManager.default.fileExists(atPath: waitingKey),
                let keyPEM = try? String(contentsOfFile: keyFile(for: name), encoding: .utf8),
                let key = try? P256.Signing.PrivateKey(pemRepresentation: keyPEM),
                let pem = try? String(contentsOfFile: waitingCertificate, encoding: .utf8),
                let certificate = try? Certificate(pemEncoded: pem),
                certificate.publicKey == Certificate.PublicKey(key.publicKey)
            {
                try replace(waitingCertificate, with: certificateFile(for: name))
                finished.append(name)
            } else {
                try? FileManager.default.removeItem(atPath: waitingCertificate)
                try? FileManager.default.removeItem(atPath: waitingKey)
            }
        }
        // A key written before the power cut, its certificate not yet: nothing was put in place.
        for file in files where file.contains(marker) && file.hasSuffix("-key.pem") {
            let certificate = self.file(String(file.dropLast("-key.pem".count)) + ".pem")
            if !FileManager.default.fileExists(atPath: certificate) { try? FileManager.default.removeItem(atPath: self.file(file)) }
        }
        return finished
    }

    /// The agent's enrollment, if it enrolled.
    public func enrollmentState() -> EnrollmentState? {
        guard let data = FileManager.default.contents(atPath: file(EnrollmentState.fileName)) else { return nil }
        return try? JoinTokenList.decoder.decode(EnrollmentState.self, from: data)
    }

    /// Installs a revocation list fetched from the service, once its signature verifies against the
    /// rig's CA; returns whether it differs from the one kept before.
    @discardableResult
    public func installRevocationList(_ pem: String, verifiedBy ca: Certificate) throws -> Bool {
        _ = try RevocationList(pem: pem, verifiedBy: ca, source: "the service's revocation list")
        if let current = try? String(contentsOfFile: revocationListPath, encoding: .utf8), current == pem { return false }
        try write(pem: pem, to: revocationListPath, secret: false)
        return true
    }
}
