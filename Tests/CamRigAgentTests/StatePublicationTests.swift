import CamRigWire
import Testing

@testable import CamRigAgent

/// What the agent pushes to subscribers instead of being polled: the spool's figures when they change,
/// each phase lock's status every tick while held and once as it ends.
@Suite("State published to subscribers", .timeLimit(.minutes(1)))
struct StatePublicationTests {
    func status(_ device: String, _ state: WirePhaseLockState, frames: UInt64 = 0) -> WirePhaseStatus {
        var status = WirePhaseStatus()
        status.deviceID = device
        status.state = state
        status.frames = frames
        return status
    }

    @Test("the spool's figures go out first and then only when they change")
    func spoolWhenChanged() {
        var publication = StatePublication()
        let empty = StatePublication.Spool(usedBytes: 0, capacityBytes: 1000, results: 0)
        let first = publication.tick(spool: empty, phases: nil)
        #expect(first.map(\.kind) == [.spoolStatus])
        #expect(first.first?.spool.capacityBytes == 1000)
        #expect(publication.tick(spool: empty, phases: nil).isEmpty, "unchanged figures are not sent again")
        let stored = StatePublication.Spool(usedBytes: 400, capacityBytes: 1000, results: 2)
        let second = publication.tick(spool: stored, phases: nil)
        #expect(second.count == 1 && second[0].spool.results == 2 && second[0].spool.usedBytes == 400)
        #expect(publication.tick(spool: stored, phases: nil).isEmpty)
        // Acknowledged and deleted: back to empty, which is a change.
        #expect(publication.tick(spool: empty, phases: nil).map(\.spool.results) == [0])
        // An agent without a spool sends none.
        var spoolless = StatePublication()
        #expect(spoolless.tick(spool: nil, phases: nil).isEmpty)
    }

    @Test("a held phase lock's status goes out every tick with its figures; a lock that ends, once as UNLOCKED")
    func phasesWhileHeld() {
        var publication = StatePublication()
        #expect(publication.tick(spool: nil, phases: []).isEmpty)
        let one = publication.tick(spool: nil, phases: [status("cam0", .locking, frames: 3), status("cam1", .locked, frames: 9)])
        #expect(one.map(\.kind) == [.phaseStatus, .phaseStatus])
        #expect(one.map(\.deviceID) == ["cam0", "cam1"])
        #expect(one.map(\.phase.state) == [.locking, .locked])
        // The next tick sends them again, with the frames counted since.
        let two = publication.tick(spool: nil, phases: [status("cam0", .locked, frames: 33), status("cam1", .locked, frames: 39)])
        #expect(two.map(\.phase.frames) == [33, 39])
        // cam0's lock ended: UNLOCKED once, then nothing more of it.
        let three = publication.tick(spool: nil, phases: [status("cam1", .locked, frames: 69)])
        #expect(three.map(\.deviceID) == ["cam1", "cam0"])
        #expect(three.last?.phase.state == .unlocked && three.last?.phase.deviceID == "cam0")
        let four = publication.tick(spool: nil, phases: [status("cam1", .locked, frames: 99)])
        #expect(four.map(\.deviceID) == ["cam1"])
    }

    @Test("while nobody takes phase statuses none are built or sent, and a later subscriber is not told of locks that ended before it")
    func phasesOnlyForSubscribers() {
        var publication = StatePublication()
        _ = publication.tick(spool: nil, phases: [status("cam0", .locked)])
        // Nobody subscribed any more: nothing sent, nothing remembered.
        #expect(publication.tick(spool: nil, phases: nil).isEmpty)
        // A subscriber again: cam0's lock ended meanwhile; no UNLOCKED for a lock it never heard of.
        #expect(publication.tick(spool: nil, phases: []).isEmpty)
    }
}
