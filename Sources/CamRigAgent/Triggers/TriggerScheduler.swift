import CamRigClock
import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Fires every scheduled trigger of the agent from one dedicated thread.
///
/// The thread runs a `TriggerSchedule`: it sleeps until the earliest moment (a new, earlier trigger
/// wakes it), prepares triggers a lead before their instant, and spins the last stretch before an
/// instant so that it fires within microseconds of it. However many triggers are pending, there is this
/// one thread; the work done at each moment (`prepare`, `fire`) must be quick and hand anything slow
/// elsewhere.
///
/// Every wait is on `CLOCK_MONOTONIC` (`poll` timeouts, then `clock_nanosleep` for the last
/// millisecond), so a step of the wall clock, as chrony makes at boot, never delays a trigger. A new
/// trigger wakes the thread through a pipe, which keeps the wake-up until the thread reads it: none is
/// lost between deciding to sleep and sleeping.
public final class TriggerScheduler<Payload: Sendable>: Sendable {
    private struct State: Sendable {
        var schedule: TriggerSchedule<Payload>
        var started = false
        var stopped = false
    }

    private let state: NIOLockedValueBox<State>
    private let clock: HostClock
    private let prepare: @Sendable (Payload) -> Void
    private let fire: @Sendable (Payload, _ firedAt: Int64) -> Void
    private let finished = ConditionLock(value: false)
    private let realtime: Bool
    private let threadStarted: @Sendable (RealtimeScheduling.Outcome?) -> Void
    /// Read end (the thread polls it) and write end (`schedule` and `shutdown` write a byte).
    private let wakeRead: Int32
    private let wakeWrite: Int32

    /// A scheduler whose thread starts with `start()` or the first trigger.
    ///
    /// - Parameters:
    ///   - clock: the agent's clock; instants are its readings.
    ///   - capacity: the most triggers pending at once.
    ///   - lead: how long before its instant a trigger is prepared.
    ///   - spinWindow: how long before an instant the thread stops sleeping and spins.
    ///   - prepare: called on the scheduler's thread a lead before a trigger's instant (and always before
    ///     it fires, even when it arrived too close to its instant for the full lead).
    ///   - fire: called on the scheduler's thread at the instant, with the clock's reading when it fired.
    ///   - realtime: whether the thread asks for real-time priority and a 1 ns timer slack
    ///     (`RealtimeScheduling`); `threadStarted` is then told what it got (`nil` when not asked).
    public init(
        clock: HostClock,
        capacity: Int,
        lead: Int64,
        spinWindow: Int64 = 300_000,
        realtime: Bool = false,
        threadStarted: @escaping @Sendable (RealtimeScheduling.Outcome?) -> Void = { _ in },
        prepare: @escaping @Sendable (Payload) -> Void,
        fire: @escaping @Sendable (Payload, _ firedAt: Int64) -> Void
    ) {
        self.clock = clock
        self.realtime = realtime
        self.threadStarted = threadStarted
        self.prepare = prepare
        self.fire = fire
        state = NIOLockedValueBox(State(schedule: TriggerSchedule(capacity: capacity, lead: lead, spinWindow: spinWindow)))
        var ends: [Int32] = [-1, -1]
        if pipe(&ends) == 0 {
            _ = fcntl(ends[0], F_SETFL, O_NONBLOCK)
            _ = fcntl(ends[1], F_SETFL, O_NONBLOCK)
            _ = fcntl(ends[0], F_SETFD, FD_CLOEXEC)
            _ = fcntl(ends[1], F_SETFD, FD_CLOEXEC)
        }
        wakeRead = ends[0]
        wakeWrite = ends[1]
    }

    deinit {
        if wakeRead >= 0 { close(wakeRead) }
        if wakeWrite >= 0 { close(wakeWrite) }
    }

    /// Triggers pending.
    public var pendingCount: Int { state.withLockedValue { $0.schedule.count } }

    /// Starts the thread now (an agent does so when it starts serving), rather than with the first trigger.
    public func start() {
        let startNow = state.withLockedValue { state -> Bool in
            guard !state.started, !state.stopped else { return false }
            state.started = true
            return true
        }
        guard startNow else { return }
        let thread = Thread { [self] in self.loop() }
        thread.name = "camrig-triggers"
        thread.qualityOfService = .userInteractive
        thread.start()
    }

    /// Schedules `payload` for the instant `fireAt` (agent clock), or says why not.
    public func schedule(_ payload: Payload, fireAt: Int64) -> Result<Void, TriggerSchedule<Payload>.Refusal> {
        let now = clock.now()
        let added = state.withLockedValue { state -> Result<Void, TriggerSchedule<Payload>.Refusal> in
            guard !state.stopped else { return .failure(.stopped) }
            return state.schedule.add(fireAt: fireAt, payload: payload, now: now).map { _ in () }
        }
        if case .success = added {
            start()
            wake()
        }
        return added
    }

    /// Stops the thread and returns the triggers that never fired. Later triggers are refused (`.stopped`).
    public func shutdown() -> [Payload] {
        let (abandoned, running) = state.withLockedValue { state -> ([Payload], Bool) in
            let running = state.started && !state.stopped
            state.stopped = true
            return (state.schedule.removeAll().map(\.payload), running)
        }
        if running {
            wake()
            finished.lock(whenValue: true)
            finished.unlock()
        }
        return abandoned
    }

    private func wake() {
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
    }

    private func loop() {
        defer {
            finished.lock()
            finished.unlock(withValue: true)
        }
        threadStarted(realtime ? RealtimeScheduling.promoteCurrentThread() : nil)
        let yieldWhileSpinning = RealtimeScheduling.currentThreadIsRealtime
        while true {
            let now = clock.now()
            let (next, stopped) = state.withLockedValue { state in
                (state.stopped ? .idle : state.schedule.next(now: now), state.stopped)
            }
            if stopped { return }
            switch next {
            case .idle:
                wait(untilMonotonic: nil)
            case .sleep(let reading):
                wait(untilMonotonic: clock.monotonic(atReading: reading))
            case .spin(let reading):
                // A FIFO thread is never preempted by another of its priority: yielding lets another
                // agent's trigger thread on this core (a simulated rig) spin towards its instant too.
                while clock.now() < reading {
                    if yieldWhileSpinning { sched_yield() }
                }
            case .prepare(let entries):
                for entry in entries { prepare(entry.payload) }
            case .fire(let entries):
                for entry in entries { fire(entry.payload, clock.now()) }
            }
        }
    }

    /// Sleeps until `CLOCK_MONOTONIC` reaches `deadline` (until woken if nil), or until woken.
    private func wait(untilMonotonic deadline: Int64?) {
        var wakeUp = pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)
        if let deadline {
            let remaining = deadline - HostClock.monotonicNow()
            guard remaining > 0 else { return }
            if remaining < 2_000_000 {
                // The last stretch: precise to microseconds, too short to miss a new trigger for long.
                HostClock.sleep(untilMonotonic: deadline)
                return
            }
            // Linux measures poll's timeout on CLOCK_MONOTONIC; waking a millisecond early, the
            // schedule is asked again and the rest is slept precisely.
            _ = poll(&wakeUp, 1, Int32(clamping: remaining / 1_000_000 - 1))
        } else {
            _ = poll(&wakeUp, 1, -1)
        }
        drainWakeUps()
    }

    private func drainWakeUps() {
        var buffer = [UInt8](repeating: 0, count: 64)
        while read(wakeRead, &buffer, buffer.count) > 0 {}
    }
}
