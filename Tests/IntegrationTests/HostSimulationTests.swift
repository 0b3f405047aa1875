import CamRigCoordinator
import CamRigLocalRig
import CamRigTestSupport
import CamRigWire
import Foundation
import Testing

/// `camrig-agent --hosts N`: several whole agents in one process, as a coordinator meets them.
@Suite("Simulated hosts in one agent process", .timeLimit(.minutes(2)))
struct HostSimulationTests {
    @Test("each simulated host is an agent of its own: its listener, its certificate, its cameras, its leases")
    func hostsAreSeparateAgents() async throws {
        let rig = try LoopbackRig(executable: Executables.url("camrig-agent"))
        try await rig.run {
            let members = try await rig.startHostSimulation(count: 3, cameras: 2)
            #expect(members.map(\.name) == ["agent-1", "agent-2", "agent-3"])
            #expect(Set(members.map(\.endpoint.port)).count == 3)
            // One process serves them all.
            #expect(LoopbackRig.processes(of: members).count == 1)

            var clients: [AgentClient] = []
            for member in members {
                let client = try await AgentClient.connect(to: member.endpoint, security: try rig.clientSecurity())
                #expect(client.agentIdentity?.name == member.name)
                #expect(client.welcome.agentID == member.name)
                let reply = try await client.request(.listDevices(WireListDevices()))
                guard case .deviceList(let list) = reply.frame.envelope.body else {
                    Issue.record("\(member.name) answered \(reply.frame.envelope.messageName)")
                    continue
                }
                #expect(list.devices.count == 2)
                #expect(list.devices.allSatisfy { $0.agentID == member.name })
                clients.append(client)
            }
            // A lease on one host's camera leaves the same camera of the others free.
            var lock = WireLock()
            lock.deviceID = "synthetic:SYN0001"
            lock.durationMs = 5_000
            _ = try await clients[0].request(.lock(lock))
            _ = try await clients[1].request(.lock(lock))
            for client in clients { await client.close() }
        }
    }
}
