import CamRigLocalRig
import CamRigSecurity
import CamRigTestSupport
import Foundation
import Testing
import X509

@Suite("Certificate revocation", .timeLimit(.minutes(1)))
struct RevocationTests {
    @Test("revoking lists the serial in a CA-signed crl.pem, moves the files aside and frees the name")
    func revoke() throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        let viewer = try #require(try pki.directory.entries().first { $0.name == "viewer-1" })
        let (certificate, list) = try pki.directory.revoke(name: "viewer-1", reason: .keyCompromise)
        #expect(certificate == viewer.certificate)
        #expect(list.number == 1)
        #expect(list.entries.map(\.serialNumber) == [viewer.certificate.serialNumber])

        let read = try #require(try pki.directory.revocationList(verifiedBy: pki.directory.trustRoot()))
        #expect(read.entries.map(\.serialNumber) == [viewer.certificate.serialNumber])
        #expect(read.entries.first?.reason == .keyCompromise)
        #expect(read.number == 1)
        #expect(read.issuer == (try pki.directory.trustRoot()).subject)
        #expect(!(try pki.directory.entries().map(\.name).contains("viewer-1")), "the revoked pair left the directory")
        let archived = try FileManager.default.contentsOfDirectory(atPath: pki.path + "/revoked")
        #expect(archived.count == 2 && archived.allSatisfy { $0.hasPrefix("viewer-1-") })

        // The name can be issued again; revoking a second one keeps the first and numbers the list up.
        try pki.directory.issue(name: "viewer-1", role: .viewer)
        let agent = try #require(try pki.directory.entries().first { $0.name == "agent-1" })
        let (_, second) = try pki.directory.revoke(name: "agent-1")
        #expect(second.number == 2)
        #expect(Set(second.entries.map(\.serialNumber)) == [viewer.certificate.serialNumber, agent.certificate.serialNumber])
        #expect(second.entries.first { $0.serialNumber == agent.certificate.serialNumber }?.reason == nil)

        let missing = #expect(throws: SecurityError.self) { try pki.directory.revoke(name: "nobody") }
        #expect(missing?.message.contains("no certificate 'nobody'") == true)
    }

    @Test("the verifier refuses a revoked certificate, naming it, and accepts the others")
    func verifierRefusesRevoked() async throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        let viewer = try #require(try pki.directory.entries().first { $0.name == "viewer-1" })
        let coordinator = try #require(try pki.directory.entries().first { $0.name == "coordinator" })
        let (_, list) = try pki.directory.revoke(name: "viewer-1", reason: .cessationOfOperation)
        let verifier = PeerCertificateVerifier(trustRoot: try pki.directory.trustRoot(), acceptedRoles: [.coordinator, .viewer], revocations: list)
        guard case .refused(let refusal) = await verifier.verify(chain: [viewer.certificate]) else {
            Issue.record("a revoked certificate was accepted")
            return
        }
        #expect(refusal.reason == .revoked)
        #expect(refusal.message.contains("'viewer-1'") && refusal.message.contains("revoked") && refusal.message.contains("cessation-of-operation"))
        guard case .accepted(let identity) = await verifier.verify(chain: [coordinator.certificate]) else {
            Issue.record("a certificate not on the list was refused")
            return
        }
        #expect(identity.name == "coordinator")
    }

    @Test("a list altered after signing, or signed by another CA, is refused and names the file")
    func forgedLists() throws {
        let pki = try TestPKI(caName: "Booth CA")
        defer { pki.remove() }
        try pki.directory.revoke(name: "viewer-1")
        let pem = try String(contentsOfFile: pki.directory.revocationListPath, encoding: .utf8)
        let root = try pki.directory.trustRoot()

        // Flip a byte inside the signed part (the issuer's name), keeping the DER well formed.
        let body = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
        var der = Array(try #require(Data(base64Encoded: body)))
        let camrig = Array("CamRig".utf8)
        let at = try #require((0..<(der.count - camrig.count)).first { Array(der[$0..<($0 + camrig.count)]) == camrig })
        der[at] ^= 0x20
        let altered = "-----BEGIN X509 CRL-----\n\(Data(der).base64EncodedString(options: .lineLength64Characters))\n-----END X509 CRL-----\n"
        let error = #expect(throws: SecurityError.self) { try RevocationList(pem: altered, verifiedBy: root, source: "crl.pem") }
        #expect(error?.message.contains("crl.pem") == true)

        // A list made by another rig's CA with the same name.
        let other = try CertificateAuthority.create(name: "Booth CA")
        let (_, foreign) = try RevocationList.issue(by: other, previous: nil, adding: [])
        let signature = #expect(throws: SecurityError.self) { try RevocationList(pem: foreign, verifiedBy: root, source: "crl.pem") }
        #expect(signature?.message.contains("does not verify") == true)

        // A peer does not start with a list it cannot trust.
        try Data(altered.utf8).write(to: URL(fileURLWithPath: pki.directory.revocationListPath))
        #expect(throws: SecurityError.self) { try MutualTLS.agent(directory: pki.directory) }

        let garbage = "-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n"
        #expect(throws: SecurityError.self) { try RevocationList(pem: garbage, verifiedBy: root, source: "crl.pem") }
    }

    @Test("openssl reads the list and verifies its signature with the rig's CA")
    func opensslAgrees() async throws {
        try #require(
            FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl"), "openssl is installed by ./scripts/bootstrap and ./scripts/test")
        let pki = try TestPKI()
        defer { pki.remove() }
        let viewer = try #require(try pki.directory.entries().first { $0.name == "viewer-1" })
        try pki.directory.revoke(name: "viewer-1", reason: .superseded)
        let result = try await ToolRunner.run(
            "/usr/bin/openssl", ["crl", "-in", pki.directory.revocationListPath, "-CAfile", pki.directory.caCertificatePath, "-noout", "-text"])
        // openssl crl prints "verify OK" on standard error and the list on standard output.
        let text = result.stdout + result.stderr
        #expect(result.status == 0, "\(text)")
        #expect(text.contains("verify OK"), "\(text)")
        let serial = viewer.certificate.serialNumber.bytes.map { String(format: "%02X", $0) }.joined()
        #expect(text.replacingOccurrences(of: ":", with: "").uppercased().contains(serial), "\(text)")
        #expect(text.contains("Superseded"), "\(text)")
        #expect(text.contains("X509v3 CRL Number") && text.contains("1"), "\(text)")
    }

    @Test("a host whose own certificate is revoked does not start, and says so")
    func ownCertificateRevoked() throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        // Keep a copy of the agent's pair, as a host that has not been told would.
        let host = try pki.hostDirectory(for: "agent-1")
        defer { try? FileManager.default.removeItem(atPath: host.path) }
        try pki.directory.revoke(name: "agent-1")
        try FileManager.default.copyItem(atPath: pki.directory.revocationListPath, toPath: host.revocationListPath)
        let error = #expect(throws: SecurityError.self) { try MutualTLS.agent(directory: host) }
        #expect(error?.message.contains("'agent-1' was revoked") == true)
    }
}

@Suite("Revocation list reload", .timeLimit(.minutes(1)))
struct RevocationReloadTests {
    @Test("a reload takes a newer list, and refuses an older one that would take revocations back")
    func olderListRefused() throws {
        let pki = try TestPKI(viewers: ["viewer-1", "viewer-2"])
        defer { pki.remove() }
        try pki.directory.revoke(name: "viewer-1")
        let first = try String(contentsOfFile: pki.directory.revocationListPath, encoding: .utf8)
        let tls = try MutualTLS.agent(directory: pki.directory)
        #expect(tls.verifier.revocations?.number == 1)
        try pki.directory.revoke(name: "viewer-2")
        let newer = try tls.reload()
        #expect(newer.revocationListNumber == 2 && newer.revokedCount == 2)
        try Data(first.utf8).write(to: URL(fileURLWithPath: pki.directory.revocationListPath))
        let error = #expect(throws: SecurityError.self) { try tls.reload() }
        #expect(error?.message.contains("older than the list in use") == true)
        #expect(tls.verifier.revocations?.number == 2, "the newer list stays in force")
    }
}
