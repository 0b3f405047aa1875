import CamRigCoordinator
import CamRigTestSupport
import CamRigWire
import Foundation
import Testing

/// Peers without a certificate flooding an agent's port cannot take the coordinator's place.
@Suite("Connection budgets against floods", .serialized, .timeLimit(.minutes(2)))
struct ConnectionFloodTests {
    @Test("idle and trickling connections from many addresses, reopened as fast as they are closed, do not keep the coordinator out")
    func floodDoesNotLockOut() async throws {
        let (pki, agent) = try await AgentProcess.secured(["--synthetic", "1"])
        defer { agent.terminate(); pki.remove() }
        // 150 silent connections from 50 addresses and 40 trickling a ClientHello from 20 more: far beyond
        // the 32 unauthenticated places, and beyond the 64 connections that once locked everyone out.
        let idle = ConnectionFlood(port: agent.port, addresses: 50, perAddress: 3)
        let slow = ConnectionFlood(port: agent.port, addresses: 20, perAddress: 2, trickle: true)
        defer { idle.stop(); slow.stop() }
        // Under way: every flooding connection has been opened at least once.
        let flooding = try await eventually(timeout: .seconds(10)) { idle.result.opened >= 150 && slow.result.opened >= 40 }
        #expect(flooding, "the flood did not get going: \(idle.result), \(slow.result)")

        let started = ContinuousClock.now
        let client: AgentClient
        do {
            client = try await agent.connect(pki)
        } catch {
            Issue.record("the coordinator could not connect during the flood: \(error)")
            return
        }
        let pong = try await client.request(.ping(WirePing()))
        let elapsed = ContinuousClock.now - started
        guard case .pong = pong.frame.envelope.body else {
            Issue.record("ping answered with \(pong.frame.envelope.messageName)")
            return
        }
        // Usually milliseconds; the limit is generous for a busy machine, and without the budgets the
        // coordinator never got in while the flood went on.
        #expect(elapsed < .seconds(5), "the coordinator connected after \(elapsed)")
        await client.close()

        // The silent connections never reach the agent (the kernel holds them until they send); the
        // trickling ones do, beyond the unauthenticated budget, and are closed to make room.
        #expect(idle.result.opened >= 150)
        let shed = try await eventually(timeout: .seconds(12)) { slow.result.closedByAgent > 0 }
        #expect(shed, "the agent closed unauthenticated connections to make room: \(slow.result)")
        #expect(try await eventually(timeout: .seconds(12)) { agent.log().contains("shedding connections") }, "what was shed is logged")
    }

    @Test("one address may hold only its share of unauthenticated connections")
    func perAddressShare() async throws {
        let (pki, agent) = try await AgentProcess.secured(["--max-unauthenticated-per-address", "2"])
        defer { agent.terminate(); pki.remove() }
        let flood = ConnectionFlood(port: agent.port, addresses: 1, perAddress: 6, trickle: true)
        defer { flood.stop() }
        #expect(try await eventually(timeout: .seconds(5)) { flood.result.closedByAgent >= 8 }, "\(flood.result)")
        // Its own address is not the coordinator's: it still gets in.
        let client = try await agent.connect(pki)
        await client.close()
        #expect(try await eventually(timeout: .seconds(12)) { agent.log().contains("refused_per_address") })
    }
}
