import CamRigViews
import Foundation
import Testing

@testable import CamRigService

/// The supervisor's decisions from snapshots alone: no agent, no socket, time passed in.
@Suite("Rig supervisor", .timeLimit(.minutes(1)))
struct RigSupervisorTests {
    typealias Supervisor = RigSupervisor
    let start = ContinuousClock.now
    let since = Date(timeIntervalSince1970: 1_000)

    func agent(_ name: String, _ status: String = "connected", since: Date? = nil, reason: String? = nil) -> Supervisor.AgentObservation {
        .init(name: name, endpoint: "127.0.0.1:\(name.count)", status: status, reason: reason, connectedSince: status == "connected" ? since ?? self.since : nil)
    }

    func camera(_ name: String, connected: Bool = true, lease: String? = nil, phase: String = "unlocked") -> Supervisor.DeviceObservation {
        .init(name: name, agent: String(name.split(separator: "/")[0]), localizedName: "Synthetic", connected: connected, lease: lease, phase: phase)
    }

    func snapshot(_ agents: [Supervisor.AgentObservation], _ devices: [Supervisor.DeviceObservation], at seconds: Int = 0) -> Supervisor.Snapshot {
        .init(agents: agents, devices: devices, now: start + .seconds(seconds))
    }

    func events(_ actions: [Supervisor.Action]) -> [ServiceEvent] {
        actions.compactMap { if case .emit(let event) = $0 { event } else { nil } }
    }

    func rebuilds(_ actions: [Supervisor.Action]) -> [Set<String>] {
        actions.compactMap { if case .rebuildSession(let cameras) = $0 { cameras } else { nil } }
    }

    @Test("the first look at a rig with cameras announces them and builds a session over the connected ones")
    func firstLook() {
        var supervisor = Supervisor()
        let actions = supervisor.observe(snapshot([agent("a")], [camera("a/cam0"), camera("a/cam1", connected: false)]))
        #expect(events(actions) == [
            .agentUp(agent: "a", endpoint: "127.0.0.1:1"),
            .deviceAdded(agent: "a", device: "a/cam0", localizedName: "Synthetic"),
            .deviceAdded(agent: "a", device: "a/cam1", localizedName: "Synthetic"),
        ])
        #expect(rebuilds(actions) == [["a/cam0"]])
        #expect(supervisor.activity == .rebuildingSession)
        // Nothing else is decided while the rebuild runs.
        #expect(rebuilds(supervisor.observe(snapshot([agent("a")], [camera("a/cam0")]))) == [])
    }

    @Test("no camera, no session; a committed session stays until its cameras or agents change")
    func sessionFollowsTheRig() {
        var supervisor = Supervisor()
        #expect(rebuilds(supervisor.observe(snapshot([agent("a")], []))) == [])
        _ = supervisor.observe(snapshot([agent("a")], [camera("a/cam0")]))
        let committed = supervisor.sessionCommitted(id: "s1", added: ["a/cam0"], skipped: [], agents: ["a": since])
        #expect(events(committed) == [.sessionCommitted(session: "s1", cameras: 1, leftOut: [])])
        #expect(supervisor.activity == nil)
        #expect(supervisor.session == .committed(inputs: ["a/cam0"], agents: ["a": since], relockAt: nil))
        #expect(rebuilds(supervisor.observe(snapshot([agent("a")], [camera("a/cam0")], at: 1))) == [])

        // A camera plugged in: rebuilt over both.
        let plugged = supervisor.observe(snapshot([agent("a")], [camera("a/cam0"), camera("a/cam1")], at: 2))
        #expect(rebuilds(plugged) == [["a/cam0", "a/cam1"]])
        _ = supervisor.sessionCommitted(id: "s2", added: ["a/cam0", "a/cam1"], skipped: [], agents: ["a": since])

        // The agent reconnected (it forgot the session's leases): rebuilt over the same cameras.
        let later = since.addingTimeInterval(60)
        let restarted = supervisor.observe(snapshot([agent("a", since: later)], [camera("a/cam0"), camera("a/cam1")], at: 3))
        #expect(rebuilds(restarted) == [["a/cam0", "a/cam1"]])
    }

    @Test("a failed build is tried again only after the backoff, and says why meanwhile")
    func backoff() {
        var supervisor = Supervisor(configuration: .init(rebuildBackoff: .seconds(5)))
        _ = supervisor.observe(snapshot([agent("a")], [camera("a/cam0")]))
        let failed = supervisor.sessionFailed(reason: "no camera can join the session", now: start)
        #expect(events(failed) == [.sessionFailed(reason: "no camera can join the session")])
        #expect(supervisor.sessionError == "no camera can join the session")
        #expect(supervisor.activity == nil)
        #expect(rebuilds(supervisor.observe(snapshot([agent("a")], [camera("a/cam0")], at: 4))) == [])
        #expect(rebuilds(supervisor.observe(snapshot([agent("a")], [camera("a/cam0")], at: 5))) == [["a/cam0"]])
    }

    @Test("one activity at a time: a capture refuses a settings change and a rebuild waits for it")
    func mutualExclusion() {
        var supervisor = Supervisor()
        _ = supervisor.observe(snapshot([agent("a")], [camera("a/cam0")]))
        _ = supervisor.sessionCommitted(id: "s1", added: ["a/cam0"], skipped: [], agents: ["a": since])
        let capture = RigActivity.capturing(job: "job-1", kind: .photo)
        #expect(supervisor.begin(capture) == nil)
        #expect(supervisor.begin(.changingSettings(device: "a/cam0")) == "a photo (job-1) is under way")
        // A camera came meanwhile: the rebuild waits until the capture is over.
        #expect(rebuilds(supervisor.observe(snapshot([agent("a")], [camera("a/cam0"), camera("a/cam1")], at: 1))) == [])
        supervisor.end(.changingSettings(device: "a/cam0"))
        #expect(supervisor.activity == capture, "ending another activity leaves the one under way")
        supervisor.end(capture)
        #expect(rebuilds(supervisor.observe(snapshot([agent("a")], [camera("a/cam0"), camera("a/cam1")], at: 2))) == [["a/cam0", "a/cam1"]])
    }

    @Test("a relock that fails is announced once, retried every 10 s, and its success announced")
    func relock() {
        var supervisor = Supervisor()
        _ = supervisor.observe(snapshot([agent("a")], [camera("a/cam0")]))
        _ = supervisor.sessionCommitted(id: "s1", added: ["a/cam0"], skipped: [], agents: ["a": since])
        #expect(supervisor.relocked() == [], "a relock that was not overdue is not news")
        #expect(events(supervisor.relockFailed(reason: "camera a/cam0 did not settle", now: start)) == [.phaseFailed(reason: "camera a/cam0 did not settle")])
        #expect(supervisor.sessionError == "phase lock lost after a change: camera a/cam0 did not settle")
        #expect(supervisor.observe(snapshot([agent("a")], [camera("a/cam0")], at: 9)).contains(.relock) == false)
        #expect(supervisor.observe(snapshot([agent("a")], [camera("a/cam0")], at: 10)).contains(.relock))
        #expect(supervisor.activity == .relocking)
        #expect(events(supervisor.relockFailed(reason: "again", now: start + .seconds(10))) == [], "announced once")
        supervisor.end(.relocking)
        #expect(supervisor.observe(snapshot([agent("a")], [camera("a/cam0")], at: 20)).contains(.relock))
        #expect(events(supervisor.relocked()) == [.phaseRelocked])
        #expect(supervisor.sessionError == nil)
    }

    @Test("agents and cameras coming and going are events, each once")
    func changes() {
        var supervisor = Supervisor()
        _ = supervisor.observe(snapshot([agent("a"), agent("bb", "down", reason: "connection refused")], [camera("a/cam0")]))
        _ = supervisor.sessionCommitted(id: "s1", added: ["a/cam0"], skipped: [], agents: ["a": since])
        let changed = supervisor.observe(
            snapshot([agent("a", "down", reason: "timed out"), agent("bb")], [camera("a/cam0", connected: false, lease: "coordinator", phase: "locked")], at: 1))
        #expect(events(changed) == [
            .agentDown(agent: "a", status: "down", reason: "timed out"),
            .agentUp(agent: "bb", endpoint: "127.0.0.1:2"),
            .deviceDisconnected(agent: "a", device: "a/cam0"),
            .deviceLease(agent: "a", device: "a/cam0", holder: "coordinator"),
            .phaseState(agent: "a", device: "a/cam0", state: "locked"),
        ])
        let gone = supervisor.observe(snapshot([agent("a", "down", reason: "timed out"), agent("bb")], [], at: 2))
        #expect(events(gone) == [.deviceRemoved(device: "a/cam0")])
        #expect(events(supervisor.observe(snapshot([agent("a", "down", reason: "timed out"), agent("bb")], [], at: 3))) == [])
    }
}
