import CamRigClock
import Foundation
import NIOConcurrencyHelpers

/// Fires every scheduled trigger of the agent from one dedicated thread.
///
/// The thread runs a `TriggerSchedule`: it sleeps until the earliest moment (a new, earlier trigger
/// wakes it), prepares triggers a lead before their instant, and spins the last stretch before an
/// instant so that it fires within microseconds of it. However many triggers are pending, there is this
/// one thread; the work done at each moment (`prepare`, `fire`) must be quick and hand anything slow
/// elsewhere.
public final class TriggerScheduler<Payload: Sendable>: Sendable {
    private struct State: Sendable {
        var schedule: TriggerSchedule<Payload>
        /// Bumped on every change, so the thread never sleeps through one.
        var generation: UInt64 = 0
        var stopped = false
    }

    private let state: NIOLockedValueBox<State>
    private let wakeUp = NSCondition()
    private let clock: HostClock
    private let prepare: @Sendable (Payload) -> Void
    private let fire: @Sendable (Payload, _ firedAt: Int64) -> Void
    private let finished = ConditionLock(value: false)

    /// Starts the scheduler's thread.
    ///
    /// - Parameters:
    ///   - clock: the agent's clock; instants are its readings.
    ///   - capacity: the most triggers pending at once.
    ///   - lead: how long before its instant a trigger is prepared.
    ///   - spinWindow: how long before an instant the thread stops sleeping and spins.
    ///   - prepare: called on the scheduler's thread a lead before a trigger's instant.
    ///   - fire: called on the scheduler's thread at the instant, with the clock's reading when it fired.
    public init(
        clock: HostClock,
        capacity: Int,
        lead: Int64,
        spinWindow: Int64 = 300_000,
        prepare: @escaping @Sendable (Payload) -> Void,
        fire: @escaping @Sendable (Payload, _ firedAt: Int64) -> Void
    ) {
        self.clock = clock
        self.prepare = prepare
        self.fire = fire
        state = NIOLockedValueBox(State(schedule: TriggerSchedule(capacity: capacity, lead: lead, spinWindow: spinWindow)))
        let thread = Thread { [self] in self.loop() }
        thread.name = "camrig-triggers"
        thread.qualityOfService = .userInteractive
        thread.start()
    }

    /// Triggers pending.
    public var pendingCount: Int { state.withLockedValue { $0.schedule.count } }

    /// Schedules `payload` for the instant `fireAt` (agent clock), or says why not.
    public func schedule(_ payload: Payload, fireAt: Int64) -> Result<Void, TriggerSchedule<Payload>.Refusal> {
        let now = clock.now()
        let added = state.withLockedValue { state -> Result<Void, TriggerSchedule<Payload>.Refusal> in
            guard !state.stopped else { return .failure(.full(capacity: 0)) }
            let result = state.schedule.add(fireAt: fireAt, payload: payload, now: now).map { _ in () }
            state.generation &+= 1
            return result
        }
        signal()
        return added
    }

    /// Stops the thread and returns the triggers that never fired.
    public func shutdown() -> [Payload] {
        let abandoned = state.withLockedValue { state -> [Payload] in
            state.stopped = true
            state.generation &+= 1
            return state.schedule.removeAll().map(\.payload)
        }
        signal()
        finished.lock(whenValue: true)
        finished.unlock()
        return abandoned
    }

    private func signal() {
        wakeUp.lock()
        wakeUp.signal()
        wakeUp.unlock()
    }

    private func loop() {
        defer {
            finished.lock()
            finished.unlock(withValue: true)
        }
        while true {
            let now = clock.now()
            let (next, generation, stopped) = state.withLockedValue { state in
                (state.stopped ? .idle : state.schedule.next(now: now), state.generation, state.stopped)
            }
            if stopped { return }
            switch next {
            case .idle:
                wait(generation: generation, until: nil)
            case .sleep(let reading):
                wait(generation: generation, until: clock.monotonic(atReading: reading))
            case .spin(let reading):
                while clock.now() < reading {}
            case .prepare(let entries):
                for entry in entries { prepare(entry.payload) }
            case .fire(let entries):
                for entry in entries { fire(entry.payload, clock.now()) }
            }
        }
    }

    /// Sleeps until `CLOCK_MONOTONIC` reaches `deadline` (forever if nil) unless the schedule changed
    /// since `generation` was read.
    private func wait(generation: UInt64, until deadline: Int64?) {
        wakeUp.lock()
        defer { wakeUp.unlock() }
        // Checked under the condition's lock: a change after this check signals a thread already waiting.
        guard state.withLockedValue({ $0.generation }) == generation else { return }
        if let deadline {
            let seconds = Double(deadline - HostClock.monotonicNow()) / 1e9
            if seconds > 0 { _ = wakeUp.wait(until: Date(timeIntervalSinceNow: seconds)) }
        } else {
            wakeUp.wait()
        }
    }
}
