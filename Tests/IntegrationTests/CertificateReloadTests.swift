import CamRigCoordinator
import CamRigSecurity
import CamRigTestSupport
import CamRigWire
import Foundation
import NIOConcurrencyHelpers
import Testing

/// Revocation and renewal reaching a running `camrig-agent` through SIGHUP.
@Suite("Certificate reload on SIGHUP", .serialized, .timeLimit(.minutes(3)))
struct CertificateReloadTests {
    @Test("a revoked viewer is cut off on SIGHUP and refused after, naming why; the coordinator's connection carries on")
    func revokeAndReload() async throws {
        let (pki, agent) = try await AgentProcess.secured(["--identity", "agent-1"])
        defer {
            agent.terminate()
            pki.remove()
        }
        // The viewer keeps its own copy of its pair, as a lost laptop would.
        let laptop = try pki.hostDirectory(for: "viewer-1")
        defer { try? FileManager.default.removeItem(atPath: laptop.path) }
        let endpoint = AgentEndpoint(host: agent.host, port: agent.port)
        let coordinator = try await AgentClient.connect(to: endpoint, security: .tls(try MutualTLS.client(directory: pki.directory)))
        let viewer = try await AgentClient.connect(to: endpoint, security: .tls(try MutualTLS.client(directory: laptop, identityName: "viewer-1")))
        _ = try await viewer.ping()
        let viewerClosed = NIOLockedValueBox(false)
        let watcher = Task {
            await viewer.closed
            viewerClosed.withLockedValue { $0 = true }
        }
        defer { watcher.cancel() }

        try pki.directory.revoke(name: "viewer-1", reason: .keyCompromise)
        #expect(kill(agent.process.processIdentifier, SIGHUP) == 0)

        let cut = try await eventually(timeout: .seconds(10)) { viewerClosed.withLockedValue { $0 } }
        #expect(cut, "the revoked viewer's connection is closed after SIGHUP")
        _ = try await coordinator.ping()  // untouched
        let log = agent.log()
        #expect(log.contains("reloaded TLS directory"), "\(log)")
        #expect(log.contains("closing a connection whose certificate is now refused") && log.contains("'viewer-1'"), "\(log)")

        // A new connection with the revoked certificate is refused; the agent's log says it was revoked.
        await #expect(throws: (any Error).self) {
            let again = try await AgentClient.connect(to: endpoint, security: .tls(try MutualTLS.client(directory: laptop, identityName: "viewer-1")))
            _ = try await again.ping()
        }
        let refused = try await eventually(timeout: .seconds(5)) { agent.log().contains("reason=revoked") || agent.log().contains("reason: revoked") }
        #expect(refused, "\(agent.log())")
        _ = try await coordinator.ping()
        await coordinator.close()

        // The other way round: the coordinator refuses an agent whose certificate was revoked.
        try pki.directory.revoke(name: "agent-1")
        let ping = try await Executables.run("camrig", ["ping", "--agent", agent.address, "--tls-dir", pki.path, "--count", "1"])
        #expect(ping.status != 0)
        #expect(ping.stderr.contains("'agent-1'") && ping.stderr.contains("revoked"), "\(ping.stderr)")
    }

    @Test("a renewed agent certificate is presented to new connections after SIGHUP, with open ones kept; a forged crl.pem is refused and the old set stays")
    func renewAndReload() async throws {
        let (pki, agent) = try await AgentProcess.secured(["--identity", "agent-1"])
        defer {
            agent.terminate()
            pki.remove()
        }
        let endpoint = AgentEndpoint(host: agent.host, port: agent.port)
        let security = ClientSecurity.tls(try MutualTLS.client(directory: pki.directory))
        let first = try await AgentClient.connect(to: endpoint, security: security)
        let before = try #require(first.agentIdentity?.notValidAfter)

        let renewed = try pki.directory.renew(name: "agent-1", validFor: 1000)
        #expect(kill(agent.process.processIdentifier, SIGHUP) == 0)
        let reloaded = try await eventually(timeout: .seconds(10)) { agent.log().contains("renewed=true") || agent.log().contains("renewed: true") }
        #expect(reloaded, "\(agent.log())")
        let second = try await AgentClient.connect(to: endpoint, security: security)
        let after = try #require(second.agentIdentity?.notValidAfter)
        #expect(after > before.addingTimeInterval(100 * 86_400), "the new connection sees the renewed certificate")
        #expect(abs(after.timeIntervalSince(renewed.identity.notValidAfter)) < 2)
        _ = try await first.ping()  // the connection made before the reload is still served

        // A crl.pem not signed by the rig's CA: the reload fails, loudly, and nothing changes.
        let other = try CertificateAuthority.create(name: "Somebody else")
        let (_, forged) = try RevocationList.issue(by: other, previous: nil, adding: [])
        try Data(forged.utf8).write(to: URL(fileURLWithPath: pki.directory.revocationListPath))
        #expect(kill(agent.process.processIdentifier, SIGHUP) == 0)
        let failed = try await eventually(timeout: .seconds(10)) { agent.log().contains("TLS reload failed") }
        #expect(failed, "\(agent.log())")
        #expect(agent.isRunning)
        let third = try await AgentClient.connect(to: endpoint, security: security)
        _ = try await third.ping()
        _ = try await first.ping()
        for client in [first, second, third] { await client.close() }
    }
}
