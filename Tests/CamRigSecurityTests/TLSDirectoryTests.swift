import CamRigSecurity
import CamRigTestSupport
import Foundation
import Testing
import X509

@Suite("TLS directory and certificate authority", .timeLimit(.minutes(1)))
struct TLSDirectoryTests {
    @Test("init creates a CA, its private key (mode 0600) and a coordinator certificate with its role")
    func initialize() throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        let attributes = try FileManager.default.attributesOfItem(atPath: pki.path + "/ca-key.pem")
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
        let keyAttributes = try FileManager.default.attributesOfItem(atPath: pki.path + "/coordinator-key.pem")
        #expect((keyAttributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
        let entries = try pki.directory.entries()
        #expect(entries.map(\.name) == ["agent-1", "coordinator", "viewer-1"])
        #expect(entries.map(\.identity.role) == [.agent, .coordinator, .viewer])
    }

    @Test("init refuses to replace an existing CA")
    func initTwice() throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        let error = #expect(throws: SecurityError.self) { try pki.directory.initialize() }
        #expect(error?.message.contains("already exists") == true)
    }

    @Test("issuing refuses bad names and existing names")
    func issueNames() throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        for bad in ["", "ca", "../x", ".hidden", "a b", "x-key"] {
            #expect(throws: SecurityError.self) { try pki.directory.issue(name: bad, role: .agent) }
        }
        #expect(throws: SecurityError.self) { try pki.directory.issue(name: "agent-1", role: .agent) }
    }

    @Test("the identity to present is picked by role preference, and must be named when a role has several")
    func identitySelection() throws {
        let pki = try TestPKI(agents: ["agent-1", "agent-2"])
        defer { pki.remove() }
        #expect(try pki.directory.identity(named: nil, roles: [.coordinator, .viewer]).entry.name == "coordinator")
        #expect(try pki.directory.identity(named: nil, roles: [.viewer, .coordinator]).entry.name == "viewer-1")
        let ambiguous = #expect(throws: SecurityError.self) { try pki.directory.identity(named: nil, roles: [.agent]) }
        #expect(ambiguous?.message.contains("agent-1, agent-2") == true)
        #expect(ambiguous?.message.contains("--identity") == true)
        #expect(try pki.directory.identity(named: "agent-2", roles: [.agent]).entry.identity.role == .agent)
        let wrongRole = #expect(throws: SecurityError.self) { try pki.directory.identity(named: "viewer-1", roles: [.agent]) }
        #expect(wrongRole?.message.contains("role viewer") == true)
    }

    @Test("a missing directory or CA says how to create one")
    func missingCA() throws {
        let directory = TLSDirectory(path: NSTemporaryDirectory() + "camrig-none-\(UUID().uuidString)")
        let error = #expect(throws: SecurityError.self) { try directory.trustRoot() }
        #expect(error?.message.contains("camrig certs init") == true)
    }
}

@Suite("Peer certificate verification", .timeLimit(.minutes(1)))
struct PeerCertificateVerifierTests {
    func certificate(_ pki: TestPKI, _ name: String) throws -> Certificate {
        try Certificate(pemEncoded: String(contentsOfFile: pki.path + "/\(name).pem", encoding: .utf8))
    }

    func verifier(_ pki: TestPKI, accepting roles: Set<PeerRole> = [.coordinator, .viewer]) throws -> PeerCertificateVerifier {
        PeerCertificateVerifier(trustRoot: try pki.directory.trustRoot(), acceptedRoles: roles)
    }

    func refusal(_ outcome: PeerCertificateVerifier.Outcome) -> PeerRefusal? {
        if case .refused(let refusal) = outcome { return refusal }
        return nil
    }

    @Test("a certificate of this rig with an accepted role is accepted with its name and role")
    func accepted() async throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        let outcome = try await verifier(pki).verify(chain: [try certificate(pki, "viewer-1")])
        guard case .accepted(let identity) = outcome else {
            Issue.record("refused: \(outcome)")
            return
        }
        #expect(identity.name == "viewer-1")
        #expect(identity.role == .viewer)
    }

    @Test("no certificate")
    func none() async throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        let refusal = refusal(try await verifier(pki).verify(chain: []))
        #expect(refusal?.reason == .noCertificate)
        #expect(refusal?.message == "presented no certificate")
    }

    @Test("an expired certificate is refused saying when it expired")
    func expired() async throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        try pki.issueExpired(name: "old", role: .coordinator)
        let refusal = refusal(try await verifier(pki).verify(chain: [try certificate(pki, "old")]))
        #expect(refusal?.reason == .expired)
        #expect(refusal?.message.contains("'old' expired at") == true)
    }

    @Test("a certificate not yet valid is refused pointing at the clock")
    func notYetValid() async throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        let refusal = refusal(
            try await verifier(pki).verify(chain: [try certificate(pki, "viewer-1")], at: Date().addingTimeInterval(-86_400))
        )
        #expect(refusal?.reason == .notYetValid)
        #expect(refusal?.message.contains("clock") == true)
    }

    @Test("a certificate from another CA is refused naming both CAs")
    func otherCA() async throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        try pki.issueFromOtherCA(name: "stranger", role: .coordinator)
        let refusal = refusal(try await verifier(pki).verify(chain: [try certificate(pki, "stranger")]))
        #expect(refusal?.reason == .unknownAuthority)
        #expect(refusal?.message.contains("Other Rig CA") == true)
        #expect(refusal?.message.contains(try pki.caSubject) == true)
    }

    @Test("a certificate from another CA with the same name fails the signature check")
    func impostorCA() async throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        let ourName = try pki.directory.trustRoot().subject.description
        let cn = ourName.split(separator: ",").first!.dropFirst(3)  // "CN=…"
        try pki.issueFromOtherCA(name: "impostor", role: .coordinator, caName: String(cn))
        let refusal = refusal(try await verifier(pki).verify(chain: [try certificate(pki, "impostor")]))
        #expect(refusal?.reason == .unknownAuthority)
        #expect(refusal?.message.contains("does not verify") == true)
    }

    @Test("a role this side does not accept is refused naming the roles it does")
    func wrongRole() async throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        let refusal = refusal(try await verifier(pki).verify(chain: [try certificate(pki, "agent-1")]))
        #expect(refusal?.reason == .roleNotAccepted)
        #expect(refusal?.message.contains("has role agent, but only coordinator or viewer may connect") == true)
    }

    @Test("renewing re-issues a certificate with the same name, role and host names, a new key and a later expiry; a missing name is named")
    func renew() throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        let old = try pki.directory.issue(name: "cam-07", role: .agent, hostnames: ["cam-07.rig.lan", "10.1.2.7"], validFor: 10)
        let renewed = try pki.directory.renew(name: "cam-07", validFor: 400)
        #expect(renewed.identity.name == "cam-07" && renewed.identity.role == .agent)
        #expect(renewed.identity.notValidAfter > old.identity.notValidAfter.addingTimeInterval(300 * 86_400))
        #expect(renewed.certificate.publicKey != old.certificate.publicKey, "a renewed certificate has a new key")
        let entry = try #require(try pki.directory.entries().first { $0.name == "cam-07" })
        #expect(entry.certificate == renewed.certificate, "the files on disk are the renewed ones")
        let names = try #require(try entry.certificate.extensions.subjectAlternativeNames)
        #expect(names.contains(.dnsName("cam-07.rig.lan")))
        #expect(names.contains(.dnsName("cam-07")))
        #expect(names.count == 3, "the name and the two host names, none twice: \(names)")
        #expect(try pki.directory.entries().map(\.name).filter { $0.contains("renewing") }.isEmpty)
        let error = #expect(throws: SecurityError.self) { try pki.directory.renew(name: "cam-99") }
        #expect(error?.message.contains("cam-99") == true)
    }
}
