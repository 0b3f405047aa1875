import CamRigClock
import CamRigCoordinator
import CamRigTestSupport
import CamRigWire
import Foundation
import Testing

/// Pending triggers wait in one schedule on one thread: a full queue costs no threads.
@Suite("Trigger threads", .timeLimit(.minutes(3)))
struct TriggerThreadTests {
    /// The agent process's threads, from `/proc/PID/task`.
    func threads(of agent: AgentProcess) throws -> Int {
        try FileManager.default.contentsOfDirectory(atPath: "/proc/\(agent.process.processIdentifier)/task").count
    }

    @Test("an agent with 64 triggers scheduled 10 s ahead has no more threads than with none; the 65th is refused")
    func sixtyFourPending() async throws {
        let (pki, agent) = try await AgentProcess.secured(["--synthetic", "2"])
        defer {
            agent.terminate()
            pki.remove()
        }
        let client = try await agent.connect(pki)
        defer { Task { await client.close() } }
        _ = try await client.request(.listDevices(WireListDevices()))
        let before = try threads(of: agent)
        // The agent runs on this machine's own clock (no simulated offset).
        let fireAt = HostClock.monotonicNow() + 10_000_000_000
        for number in 0..<64 {
            var trigger = WireScheduleTrigger()
            trigger.triggerID = "pending-\(number)"
            trigger.action = .capturePhoto
            trigger.deviceIds = ["synthetic:SYN0001", "synthetic:SYN0002"]
            trigger.fireAtNs = fireAt + Int64(number) * 1_000_000
            let reply = try await client.request(.scheduleTrigger(trigger))
            guard case .triggerScheduled = reply.frame.envelope.body else {
                Issue.record("trigger \(number) was not scheduled: \(reply.frame.envelope.messageName)")
                return
            }
        }
        let after = try threads(of: agent)
        #expect(after <= before, "threads with no trigger: \(before); with 64 pending: \(after)")
        var extra = WireScheduleTrigger()
        extra.triggerID = "one-too-many"
        extra.action = .capturePhoto
        extra.deviceIds = ["synthetic:SYN0001"]
        extra.fireAtNs = fireAt
        let refusal = await #expect(throws: AgentClientError.self) { try await client.request(.scheduleTrigger(extra)) }
        #expect(refusal?.code == .queueFull)
    }

    @Test("a trigger still pending when the agent shuts down is answered SHUTTING_DOWN, not left waiting")
    func pendingAtShutdown() async throws {
        let (pki, agent) = try await AgentProcess.secured(["--synthetic", "1"])
        defer {
            agent.terminate()
            pki.remove()
        }
        let client = try await agent.connect(pki)
        var trigger = WireScheduleTrigger()
        trigger.triggerID = "never-fires"
        trigger.action = .capturePhoto
        trigger.deviceIds = ["synthetic:SYN0001"]
        trigger.fireAtNs = HostClock.monotonicNow() + 30_000_000_000
        var messages = client.stream(.scheduleTrigger(trigger)).makeAsyncIterator()
        let scheduled = try await messages.next()
        guard case .triggerScheduled = scheduled?.envelope.body else {
            Issue.record("expected TriggerScheduled, got \(scheduled?.envelope.messageName ?? "nothing")")
            return
        }
        let stopper = Task.detached { await agent.stop() }
        let answer = await #expect(throws: AgentClientError.self) { _ = try await messages.next() }
        #expect(answer?.code == .shuttingDown, "\(String(describing: answer))")
        _ = await stopper.value
    }
}

