import CamRigClock
import CamRigTestSupport
import Foundation
import NIOConcurrencyHelpers
import Testing

@testable import CamRigAgent

@Suite("Trigger schedule", .timeLimit(.minutes(1)))
struct TriggerScheduleTests {
    let millisecond: Int64 = 1_000_000
    /// A schedule with a 100 ms lead and a 300 µs spin, as the agent's.
    func schedule(capacity: Int = 64) -> TriggerSchedule<String> {
        TriggerSchedule(capacity: capacity, lead: 100 * millisecond, spinWindow: 300_000)
    }

    @Test("a trigger is prepared a lead before its instant, spun to in the last stretch, and fired at it")
    func moments() throws {
        let clock = ManualClock(startingAt: 0)
        var schedule = schedule()
        _ = try schedule.add(fireAt: 1_000 * millisecond, payload: "t", now: clock.now()).get()
        guard case .sleep(let until) = schedule.next(now: clock.now()) else {
            Issue.record("with a trigger a second away, the thread sleeps")
            return
        }
        #expect(until == 900 * millisecond, "it wakes to prepare")
        clock.set(to: until)
        let prepared = schedule.next(now: clock.now())
        guard case .prepare(let entries) = prepared else {
            Issue.record("at T − lead the trigger is prepared, got \(prepared)")
            return
        }
        #expect(entries.map(\.payload) == ["t"])
        guard case .sleep(let spinFrom) = schedule.next(now: clock.now()) else {
            Issue.record("after preparing, the thread sleeps again")
            return
        }
        #expect(spinFrom == 1_000 * millisecond - 300_000)
        clock.set(to: spinFrom)
        guard case .spin(let to) = schedule.next(now: clock.now()) else {
            Issue.record("the last stretch is spun")
            return
        }
        #expect(to == 1_000 * millisecond)
        clock.set(to: to)
        guard case .fire(let fired) = schedule.next(now: clock.now()) else {
            Issue.record("at T the trigger fires")
            return
        }
        #expect(fired.map(\.payload) == ["t"])
        #expect(schedule.count == 0)
        guard case .idle = schedule.next(now: clock.now()) else {
            Issue.record("with nothing pending the thread waits for a trigger")
            return
        }
    }

    @Test("triggers fire in time order whatever order they arrive in; equal instants fire together")
    func order() throws {
        var schedule = schedule()
        for (name, at) in [("c", 3_000), ("a", 1_000), ("b", 2_000), ("a2", 1_000)] {
            _ = try schedule.add(fireAt: Int64(at) * millisecond, payload: name, now: 0).get()
        }
        var fired: [[String]] = []
        var now: Int64 = 0
        while schedule.count > 0 {
            switch schedule.next(now: now) {
            case .fire(let entries): fired.append(entries.map(\.payload))
            case .sleep(let until), .spin(let until): now = until
            case .prepare: continue
            case .idle: Issue.record("idle with triggers pending"); return
            }
        }
        #expect(fired == [["a", "a2"], ["b"], ["c"]])
    }

    @Test("a trigger added ahead of the one being slept for moves the wake-up earlier")
    func earlierTrigger() throws {
        var schedule = schedule()
        _ = try schedule.add(fireAt: 10_000 * millisecond, payload: "late", now: 0).get()
        guard case .sleep(let first) = schedule.next(now: 0) else { Issue.record("expected a sleep"); return }
        #expect(first == 9_900 * millisecond)
        _ = try schedule.add(fireAt: 500 * millisecond, payload: "early", now: 0).get()
        guard case .sleep(let second) = schedule.next(now: 0) else { Issue.record("expected a sleep"); return }
        #expect(second == 400 * millisecond)
    }

    @Test("a trigger whose instant has passed, or one beyond the capacity, is refused")
    func refusals() throws {
        var schedule = schedule(capacity: 2)
        #expect(schedule.add(fireAt: 5, payload: "x", now: 10).failure == .late(byNanoseconds: 5))
        _ = try schedule.add(fireAt: 100, payload: "a", now: 0).get()
        _ = try schedule.add(fireAt: 200, payload: "b", now: 0).get()
        #expect(schedule.add(fireAt: 300, payload: "c", now: 0).failure == .full(capacity: 2))
        #expect(schedule.removeAll().map(\.payload) == ["a", "b"])
        #expect(schedule.count == 0)
    }

    @Test("a trigger less than a lead ahead is prepared at once")
    func shortLead() throws {
        var schedule = schedule()
        _ = try schedule.add(fireAt: 50 * millisecond, payload: "soon", now: 0).get()
        guard case .prepare(let entries) = schedule.next(now: 0) else { Issue.record("expected prepare at once"); return }
        #expect(entries.map(\.payload) == ["soon"])
    }
}

@Suite("Trigger scheduler thread", .timeLimit(.minutes(1)))
struct TriggerSchedulerTests {
    @Test("many triggers share one thread, fire at or after their instants, in order; shutdown returns the rest")
    func firesOnOneThread() async throws {
        let fired = FiredLog()
        let clock = HostClock.system
        let scheduler = TriggerScheduler<Int>(
            clock: clock,
            capacity: 64,
            lead: 20_000_000,
            prepare: { _ in },
            fire: { number, firedAt in fired.append(number, at: firedAt, thread: UInt(pthread_self())) }
        )
        let start = clock.now()
        // Scheduled in reverse: they must still fire in time order.
        for number in (0..<10).reversed() {
            _ = try scheduler.schedule(number, fireAt: start + 50_000_000 + Int64(number) * 5_000_000).get()
        }
        _ = try scheduler.schedule(99, fireAt: start + 60_000_000_000).get()
        let done = try await eventually(timeout: .seconds(10)) { fired.count == 10 }
        #expect(done, "10 triggers fired within 10 s, got \(fired.count)")
        let entries = fired.entries
        #expect(entries.map(\.number) == Array(0..<10))
        for entry in entries {
            #expect(entry.firedAt >= start + 50_000_000 + Int64(entry.number) * 5_000_000, "never early")
        }
        #expect(Set(entries.map(\.thread)).count == 1, "every trigger fired from the one scheduler thread")
        #expect(scheduler.pendingCount == 1)
        #expect(scheduler.shutdown() == [99])
        #expect(scheduler.schedule(1, fireAt: clock.now() + 1_000_000_000).failure != nil, "a stopped scheduler takes nothing")
    }
}

/// What fired, from the scheduler's thread.
final class FiredLog: Sendable {
    struct Entry: Sendable {
        var number: Int
        var firedAt: Int64
        var thread: UInt
    }
    private let box = NIOLockedValueBox<[Entry]>([])
    func append(_ number: Int, at firedAt: Int64, thread: UInt) { box.withLockedValue { $0.append(Entry(number: number, firedAt: firedAt, thread: thread)) } }
    var count: Int { box.withLockedValue { $0.count } }
    var entries: [Entry] { box.withLockedValue { $0 } }
}

extension Result {
    /// The error, if this is a failure.
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}

@Suite("Trigger schedule, late thread", .timeLimit(.minutes(1)))
struct TriggerScheduleLateTests {
    @Test("a trigger whose instant passed before it was prepared is prepared first, then fired")
    func preparedBeforeFiring() throws {
        var schedule = TriggerSchedule<String>(capacity: 4, lead: 100_000_000, spinWindow: 300_000)
        _ = try schedule.add(fireAt: 1_000_000_000, payload: "t", now: 0).get()
        // The thread wakes only after the instant (held up by load).
        guard case .prepare(let prepared) = schedule.next(now: 1_200_000_000) else {
            Issue.record("an unprepared due trigger is prepared first")
            return
        }
        #expect(prepared.map(\.payload) == ["t"])
        guard case .fire(let fired) = schedule.next(now: 1_200_000_100) else {
            Issue.record("then it fires")
            return
        }
        #expect(fired.map(\.payload) == ["t"])
    }
}
