import CamRigSecurity
import CamRigTestSupport
import Crypto
import Foundation
import NIOConcurrencyHelpers
import Testing
import X509

@Suite("Enrollment: join tokens and the service's registrar", .timeLimit(.minutes(1)))
struct EnrollmentRegistrarTests {
    /// A CA directory, its token list, a registrar whose clock the test sets, and a host's request.
    struct Rig {
        let pki: TestPKI
        let tokens: JoinTokenList
        let clock = NIOLockedValueBox(Date())
        let registrar: EnrollmentRegistrar

        init() throws {
            pki = try TestPKI()
            tokens = JoinTokenList(directory: pki.directory)
            let clock = self.clock
            registrar = try EnrollmentRegistrar(directory: pki.directory, validity: 90 * 86_400) { clock.withLockedValue { $0 } }
        }

        func request(_ token: JoinToken, name: String = "pi-07", key: P256.Signing.PrivateKey = .init()) throws -> Enrollment.JoinRequest {
            Enrollment.JoinRequest(token: token.text, name: name, csr: try Self.csr(name: name, key: key), port: 7450)
        }

        static func csr(name: String, key: P256.Signing.PrivateKey) throws -> String {
            let subject = try DistinguishedName { CommonName(name) }
            return try CertificateSigningRequest(
                version: .v1, subject: subject, privateKey: Certificate.PrivateKey(key), attributes: CertificateSigningRequest.Attributes()
            ).serializeAsPEM().pemString
        }

        /// A renewal of `certificate` (issued to `name`) for a new key, proved with the key `holder`.
        static func renewal(
            of certificate: String, name: String, newKey: P256.Signing.PrivateKey = .init(), provedBy holder: P256.Signing.PrivateKey, port: Int = 7450
        ) throws -> Enrollment.RenewRequest {
            let csrPEM = try csr(name: name, key: newKey)
            let der = try EnrollmentRegistrar.der(try CertificateSigningRequest(pemEncoded: csrPEM))
            return Enrollment.RenewRequest(certificate: certificate, csr: csrPEM, proof: try holder.signature(for: der).derRepresentation.base64EncodedString(), port: port)
        }

        func refusal(_ outcome: Result<(Enrollment.Issued, EnrollmentRegistrar.Member), EnrollmentRegistrar.Refusal>) -> String? {
            if case .failure(let refusal) = outcome { return refusal.reason }
            return nil
        }
    }

    @Test("a token reads back from its text; a damaged one says so and never echoes its secret")
    func tokenText() throws {
        let rig = try Rig()
        defer { rig.pki.remove() }
        let (token, record) = try rig.tokens.make(role: .agent, name: nil, prefix: "cam-", expires: Date() + 3600, uses: 3)
        #expect(try JoinToken(text: token.text + "\n") == token)
        #expect(token.caPin == JoinToken.pin(of: try rig.pki.directory.trustRoot()))
        let kept = String(decoding: try Data(contentsOf: rig.tokens.folder.appendingPathComponent("tokens.json")), as: UTF8.self)
        #expect(record.secretSHA256 == token.secretHash && !kept.contains(token.secret))
        #expect(!token.description.contains(token.secret))
        for damaged in [String(token.text.dropLast()), token.text.replacingOccurrences(of: ".", with: "-"), "k10abc::server:123"] {
            let error = #expect(throws: SecurityError.self) { try JoinToken(text: damaged) }
            #expect(error?.message.contains(token.secret) == false)
        }
    }

    @Test("a host joins: its certificate is for the key it kept, signed by the rig's CA, named with the token's prefix, in the agent role, valid 90 days, renewed two thirds in")
    func joins() throws {
        let rig = try Rig()
        defer { rig.pki.remove() }
        let (token, _) = try rig.tokens.make(role: .agent, name: nil, prefix: "cam-", expires: Date() + 3600, uses: 2)
        let key = P256.Signing.PrivateKey()
        let (issued, member) = try rig.registrar.join(try rig.request(token, key: key), from: "10.0.0.7").get()
        let certificate = try Certificate(pemEncoded: issued.certificate)
        let ca = try rig.pki.directory.trustRoot()
        #expect(certificate.publicKey == Certificate.PublicKey(key.publicKey))
        #expect(ca.publicKey.isValidSignature(certificate.signature, for: certificate))
        let identity = try PeerIdentity(certificate: certificate)
        #expect(identity.name == "cam-pi-07" && identity.role == .agent && issued.name == "cam-pi-07")
        let now = rig.clock.withLockedValue { $0 }
        #expect(abs(certificate.notValidAfter.timeIntervalSince(now) - 90 * 86_400) < 2)
        #expect(abs(issued.renewAfter.timeIntervalSince(now) - 60 * 86_400) < 2)
        #expect(member.endpoint == "10.0.0.7:7450")
        // Kept beside the CA without its key, so that `camrig certs list` and `revoke` see it.
        #expect(try rig.pki.directory.entries().contains { $0.name == "cam-pi-07" })
        #expect(!FileManager.default.fileExists(atPath: rig.pki.directory.keyFile(for: "cam-pi-07")))
        #expect(rig.registrar.records.first?.state == .pending)
        rig.registrar.connected(["10.0.0.7:7450"])
        #expect(rig.registrar.records.first?.state == .joined)
    }

    @Test("wrong secret, expiry, used up (kept across a restart of the service), revoked, another rig's CA, a tampered request: each refused with its reason")
    func refusals() throws {
        let rig = try Rig()
        defer { rig.pki.remove() }
        let (token, _) = try rig.tokens.make(role: .agent, name: "pi-01", prefix: nil, expires: Date() + 60, uses: 1)
        var wrong = token
        wrong.secret = String(token.secret.reversed())
        #expect(rig.refusal(rig.registrar.join(try rig.request(wrong), from: "10.0.0.1"))?.contains("wrong secret") == true)
        _ = try rig.registrar.join(try rig.request(token), from: "10.0.0.1").get()
        #expect(rig.refusal(rig.registrar.join(try rig.request(token), from: "10.0.0.2"))?.contains("used up (1 of 1 uses)") == true)
        let restarted = try EnrollmentRegistrar(directory: rig.pki.directory)
        #expect(rig.refusal(restarted.join(try rig.request(token), from: "10.0.0.2"))?.contains("used up") == true)

        let (expiring, _) = try rig.tokens.make(role: .agent, name: nil, prefix: nil, expires: Date() + 60, uses: 5)
        rig.clock.withLockedValue { $0 += 61 }
        #expect(rig.refusal(rig.registrar.join(try rig.request(expiring), from: "10.0.0.3"))?.contains("expired") == true)

        let (revoked, _) = try rig.tokens.make(role: .agent, name: nil, prefix: nil, expires: Date() + 3600, uses: 5)
        try rig.tokens.revoke(id: revoked.id)
        #expect(rig.refusal(rig.registrar.join(try rig.request(revoked), from: "10.0.0.4"))?.contains("was revoked") == true)

        let other = try TestPKI()
        defer { other.remove() }
        let (foreign, _) = try JoinTokenList(directory: other.directory).make(role: .agent, name: nil, prefix: nil, expires: Date() + 3600, uses: 5)
        #expect(rig.refusal(rig.registrar.join(try rig.request(foreign), from: "10.0.0.5"))?.contains("another rig's CA") == true)

        let (valid, _) = try rig.tokens.make(role: .agent, name: nil, prefix: nil, expires: Date() + 3600, uses: 5)
        var tampered = try rig.request(valid)
        // The request's name changed after it was signed: its signature no longer verifies.
        var der = try EnrollmentRegistrar.der(try CertificateSigningRequest(pemEncoded: try Rig.csr(name: "pi-07", key: .init())))
        let at = try #require(der.indices.first { der[$0...].starts(with: Array("pi-07".utf8)) })
        der[at + 4] = UInt8(ascii: "8")
        tampered.csr = "-----BEGIN CERTIFICATE REQUEST-----\n\(Data(der).base64EncodedString(options: .lineLength64Characters))\n-----END CERTIFICATE REQUEST-----\n"
        #expect(rig.refusal(rig.registrar.join(tampered, from: "10.0.0.6"))?.contains("signature does not verify") == true)
        #expect(rig.refusal(rig.registrar.join(try rig.request(valid, name: "coordinator"), from: "10.0.0.6"))?.contains("already has a certificate") == true)
        _ = try rig.registrar.join(try rig.request(valid, name: "pi-09"), from: "10.0.0.9").get()
        #expect(rig.refusal(rig.registrar.join(try rig.request(valid, name: "pi-09"), from: "10.0.0.10"))?.contains("already enrolled from 10.0.0.9") == true)
        // Names the rig already gave otherwise, or that are its own files, are not taken by a token's holder.
        #expect(rig.refusal(rig.registrar.join(try rig.request(valid, name: "agent-1"), from: "10.0.0.11"))?.contains("already has a certificate") == true)
        #expect(rig.refusal(rig.registrar.join(try rig.request(valid, name: "crl"), from: "10.0.0.12"))?.contains("not a usable certificate name") == true)
        #expect(rig.registrar.records.filter { $0.state == .refused }.count == 10)
        #expect(rig.registrar.records.allSatisfy { !($0.reason ?? "").contains(valid.secret) })
    }

    @Test("renewal: a new certificate for a new key with proof of the current key; a proof by any other key is refused; the certificate a renewal replaced renews until a newer one has")
    func renews() throws {
        let rig = try Rig()
        defer { rig.pki.remove() }
        let (token, _) = try rig.tokens.make(role: .agent, name: "pi-02", prefix: nil, expires: Date() + 3600, uses: 1)
        let key = P256.Signing.PrivateKey()
        let (issued, _) = try rig.registrar.join(try rig.request(token, key: key), from: "10.0.0.2").get()
        let next = P256.Signing.PrivateKey()
        let csrPEM = try Rig.csr(name: "pi-02", key: next)
        let der = try EnrollmentRegistrar.der(try CertificateSigningRequest(pemEncoded: csrPEM))
        rig.clock.withLockedValue { $0 += 61 * 86_400 }
        func renewal(signedBy signer: P256.Signing.PrivateKey) throws -> Enrollment.RenewRequest {
            Enrollment.RenewRequest(
                certificate: issued.certificate, csr: csrPEM, proof: try signer.signature(for: der).derRepresentation.base64EncodedString(), port: 7450)
        }
        #expect(rig.refusal(rig.registrar.renew(try renewal(signedBy: next), from: "10.0.0.2"))?.contains("does not hold its key") == true)
        let (renewed, _) = try rig.registrar.renew(try renewal(signedBy: key), from: "10.0.0.2").get()
        let certificate = try Certificate(pemEncoded: renewed.certificate)
        #expect(certificate.publicKey == Certificate.PublicKey(next.publicKey))
        #expect(try PeerIdentity(certificate: certificate).name == "pi-02")
        #expect(certificate.notValidAfter > (try Certificate(pemEncoded: issued.certificate)).notValidAfter)
        // The answer may never have reached the agent: the certificate that renewal replaced renews once more…
        let (again, _) = try rig.registrar.renew(try renewal(signedBy: key), from: "10.0.0.2").get()
        // …until the agent renews with a certificate issued after it: then it is refused, whoever holds its key.
        _ = try rig.registrar.renew(try Rig.renewal(of: again.certificate, name: "pi-02", provedBy: next), from: "10.0.0.2").get()
        #expect(rig.refusal(rig.registrar.renew(try renewal(signedBy: key), from: "10.0.0.2"))?.contains("not the one this rig last issued") == true)
        rig.clock.withLockedValue { $0 += 200 * 86_400 }
        #expect(rig.refusal(rig.registrar.renew(try renewal(signedBy: key), from: "10.0.0.2"))?.contains("expired") == true)
    }

    @Test("a renewal stopped by a power cut between putting its key and its certificate in place is finished before the agent loads its identity; one stopped before its key leaves the old pair")
    func interruptedRenewal() throws {
        let rig = try Rig()
        defer { rig.pki.remove() }
        let (token, _) = try rig.tokens.make(role: .agent, name: "pi-03", prefix: nil, expires: Date() + 3600, uses: 1)
        let key = P256.Signing.PrivateKey()
        let (issued, _) = try rig.registrar.join(try rig.request(token, key: key), from: "10.0.0.3").get()
        let host = TLSDirectory(path: FileManager.default.temporaryDirectory.appendingPathComponent("camrig-host-\(UUID().uuidString)").path)
        defer { try? FileManager.default.removeItem(atPath: host.path) }
        _ = try host.install(issued, key: key, caPin: token.caPin, url: "https://127.0.0.1:8443")
        let next = P256.Signing.PrivateKey()
        let (renewed, _) = try rig.registrar.renew(try Rig.renewal(of: issued.certificate, name: "pi-03", newKey: next, provedBy: key), from: "10.0.0.3").get()
        func write(_ text: String, _ file: String, secret: Bool) {
            #expect(FileManager.default.createFile(atPath: file, contents: Data(text.utf8), attributes: [.posixPermissions: secret ? 0o600 : 0o644]))
        }
        func inPlace() throws -> Certificate { try #require(try host.entries().first { $0.name == "pi-03" }).certificate }

        // Stopped before its key went in place: both files of the attempt are there; the old pair serves.
        write(next.pemRepresentation, host.keyFile(for: "pi-03.enrolling-1"), secret: true)
        write(renewed.certificate, host.certificateFile(for: "pi-03.enrolling-1"), secret: false)
        #expect(try host.finishInterruptedInstall() == [])
        #expect(try inPlace().publicKey == Certificate.PublicKey(key.publicKey))
        #expect(try FileManager.default.contentsOfDirectory(atPath: host.path).allSatisfy { !$0.contains(".enrolling-") })
        _ = try MutualTLS.agent(directory: host, identityName: "pi-03")

        // Stopped between the two renames: the new key is in place beside the old certificate, which TLS
        // cannot use; the renewed certificate waits under its temporary name.
        write(next.pemRepresentation, host.keyFile(for: "pi-03"), secret: true)
        write(renewed.certificate, host.certificateFile(for: "pi-03.enrolling-2"), secret: false)
        #expect(throws: (any Error).self, "a key and a certificate that do not belong together") { try MutualTLS.agent(directory: host, identityName: "pi-03") }
        #expect(try host.finishInterruptedInstall() == ["pi-03"])
        #expect(try inPlace().publicKey == Certificate.PublicKey(next.publicKey))
        #expect(try inPlace().serialNumber == (try Certificate(pemEncoded: renewed.certificate)).serialNumber)
        let tls = try MutualTLS.agent(directory: host, identityName: "pi-03")
        #expect(tls.identity.name == "pi-03")
        #expect(try host.finishInterruptedInstall() == [], "nothing is left to finish")
    }

    @Test("a member that renews from another address or port is reached there; one that joined naming its host keeps it; a revoked name can join again from another host")
    func membersMove() throws {
        let rig = try Rig()
        defer { rig.pki.remove() }
        let (token, _) = try rig.tokens.make(role: .agent, name: nil, prefix: nil, expires: Date() + 3600, uses: 3)
        func renew(_ issued: Enrollment.Issued, key: P256.Signing.PrivateKey, from address: String, port: Int) throws -> (Enrollment.Issued, EnrollmentRegistrar.Member) {
            try rig.registrar.renew(try Rig.renewal(of: issued.certificate, name: issued.name, provedBy: key, port: port), from: address).get()
        }
        let key = P256.Signing.PrivateKey()
        let (issued, member) = try rig.registrar.join(try rig.request(token, name: "pi-04", key: key), from: "10.0.0.4").get()
        #expect(member.endpoint == "10.0.0.4:7450")
        let (_, moved) = try renew(issued, key: key, from: "10.0.0.44", port: 7451)
        #expect(moved.endpoint == "10.0.0.44:7451")
        #expect(rig.registrar.members.first { $0.name == "pi-04" }?.endpoint == "10.0.0.44:7451")

        // Joined naming the host the coordinator should use (behind NAT, say): renewals keep it.
        let named = P256.Signing.PrivateKey()
        var request = try rig.request(token, name: "pi-05", key: named)
        request.host = "pi-05.rig.example"
        let (issuedNamed, memberNamed) = try rig.registrar.join(request, from: "10.0.0.5").get()
        #expect(memberNamed.endpoint == "pi-05.rig.example:7450")
        let (_, renewedNamed) = try renew(issuedNamed, key: named, from: "192.168.1.5", port: 7452)
        #expect(renewedNamed.endpoint == "pi-05.rig.example:7452")

        // Another host may not take an enrolled name; once the name is revoked, it may.
        #expect(rig.refusal(rig.registrar.join(try rig.request(token, name: "pi-04"), from: "10.0.0.99"))?.contains("already enrolled") == true)
        try rig.pki.directory.revoke(name: "pi-04", reason: .keyCompromise)
        let (_, rejoined) = try rig.registrar.join(try rig.request(token, name: "pi-04"), from: "10.0.0.99").get()
        #expect(rejoined.endpoint == "10.0.0.99:7450")
    }
}
