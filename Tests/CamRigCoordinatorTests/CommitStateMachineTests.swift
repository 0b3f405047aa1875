import CamRigCoordinator
import Testing

/// The two-phase commit's decisions, path by path: what gets applied, rolled back and released.
@Suite("Two-phase commit across agents", .timeLimit(.minutes(1)))
struct CommitStateMachineTests {
    @Test("all devices prepare and apply: committed, leases kept, nothing released")
    func happyPath() {
        var machine = CommitStateMachine(deviceCount: 3)
        #expect(machine.start() == .prepare([0, 1, 2]))
        #expect(machine.prepared(2, leased: true, failure: nil) == .wait)
        #expect(machine.prepared(0, leased: true, failure: nil) == .wait)
        #expect(machine.prepared(1, leased: true, failure: nil) == .apply([0, 1, 2]))
        #expect(machine.applied(1, failure: nil) == .wait)
        #expect(machine.applied(0, failure: nil) == .wait)
        #expect(machine.applied(2, failure: nil) == .finish(.committed))
    }

    @Test("one device refuses in phase one: nothing is applied anywhere, and exactly the leases taken are released")
    func prepareRefused() {
        var machine = CommitStateMachine(deviceCount: 3)
        _ = machine.start()
        #expect(machine.prepared(0, leased: true, failure: nil) == .wait)
        // Device 1's lease is held by someone else: no lease, failure.
        #expect(machine.prepared(1, leased: false, failure: "lease held by alice") == .wait)
        #expect(machine.prepared(2, leased: true, failure: nil) == .release([0, 2]))
        #expect(machine.released(2) == .wait)
        #expect(machine.released(0) == .finish(.aborted(failures: [.init(device: 1, message: "lease held by alice")], rollbackFailures: [])))
    }

    @Test("a device that leased but failed validation is released too")
    func validationRefused() {
        var machine = CommitStateMachine(deviceCount: 2)
        _ = machine.start()
        #expect(machine.prepared(0, leased: true, failure: "60 fps out of range") == .wait)
        #expect(machine.prepared(1, leased: true, failure: nil) == .release([0, 1]))
        #expect(machine.released(0) == .wait)
        guard case .finish(.aborted(let failures, _)) = machine.released(1) else {
            Issue.record("expected an abort")
            return
        }
        #expect(failures.map(\.device) == [0])
    }

    @Test("phase two fails on one device: the devices already changed are rolled back, then every lease released")
    func applyFailed() {
        var machine = CommitStateMachine(deviceCount: 3)
        _ = machine.start()
        for device in 0..<2 { _ = machine.prepared(device, leased: true, failure: nil) }
        #expect(machine.prepared(2, leased: true, failure: nil) == .apply([0, 1, 2]))
        #expect(machine.applied(0, failure: nil) == .wait)
        #expect(machine.applied(1, failure: "device disconnected") == .wait)
        #expect(machine.applied(2, failure: nil) == .rollBack([0, 2]))
        #expect(machine.rolledBack(2, failure: nil) == .wait)
        #expect(machine.rolledBack(0, failure: nil) == .release([0, 1, 2]))
        for device in 0..<2 { #expect(machine.released(device) == .wait) }
        #expect(machine.released(2) == .finish(.aborted(failures: [.init(device: 1, message: "device disconnected")], rollbackFailures: [])))
    }

    @Test("a rollback that fails is reported separately, so the operator knows which device to check")
    func rollbackFailed() {
        var machine = CommitStateMachine(deviceCount: 2)
        _ = machine.start()
        _ = machine.prepared(0, leased: true, failure: nil)
        _ = machine.prepared(1, leased: true, failure: nil)
        _ = machine.applied(0, failure: nil)
        #expect(machine.applied(1, failure: "timeout") == .rollBack([0]))
        #expect(machine.rolledBack(0, failure: "agent gone") == .release([0, 1]))
        _ = machine.released(0)
        #expect(machine.released(1) == .finish(.aborted(failures: [.init(device: 1, message: "timeout")], rollbackFailures: [.init(device: 0, message: "agent gone")])))
    }

    @Test("every device fails to apply: nothing to roll back, leases released")
    func allApplyFailed() {
        var machine = CommitStateMachine(deviceCount: 2)
        _ = machine.start()
        _ = machine.prepared(0, leased: true, failure: nil)
        _ = machine.prepared(1, leased: true, failure: nil)
        _ = machine.applied(0, failure: "a")
        #expect(machine.applied(1, failure: "b") == .release([0, 1]))
    }

    @Test("leases the session already held (leased: false) are never released by a failed re-commit")
    func existingLeasesKept() {
        var machine = CommitStateMachine(deviceCount: 2)
        _ = machine.start()
        _ = machine.prepared(0, leased: false, failure: nil)
        #expect(machine.prepared(1, leased: false, failure: "out of range") == .finish(.aborted(failures: [.init(device: 1, message: "out of range")], rollbackFailures: [])))
    }

    @Test("an empty session commits at once")
    func empty() {
        var machine = CommitStateMachine(deviceCount: 0)
        #expect(machine.start() == .finish(.committed))
    }
}
