import CamRigCLI
import Foundation
import NIOConcurrencyHelpers

/// Runs `body` and returns what it returns (or throws what it throws), unless `timeout` passes first:
/// then `body` is cancelled and a `CommandFailure` saying "`what`: nothing within `timeout`" is thrown.
///
/// Every wait of a benchmark goes through this, so that a benchmark never hangs: a stream that never
/// ends, a reply that never comes or a child that never answers becomes an error naming what was
/// awaited (and the agent or camera, which `what` should say) and for how long.
///
/// `body` runs in a task of its own, raced against a timer, so this returns at the deadline even when
/// `body` ignores cancellation (it is cancelled and left to end on its own; nothing waits for it). The
/// caller's cancellation cancels `body` too; this then returns once `body` has ended, or at the
/// deadline, whichever is first. `what` is only evaluated when the deadline passes.
///
/// Not a task group: a group waits for all of its children, and a body that ignores cancellation must
/// be left behind, not waited for. The wait itself runs on the caller's actor (`isolation`), so an actor
/// or the main actor may call this with a `what` that reads its state.
func withDeadline<T: Sendable>(
    _ timeout: Duration, _ what: @autoclosure () -> String, isolation: isolated (any Actor)? = #isolation,
    _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    let race = DeadlineRace<T>()
    let work = Task {
        do {
            race.settle(.finished(.success(try await body())))
        } catch {
            race.settle(.finished(.failure(error)))
        }
    }
    let timer = Task {
        do {
            try await Task.sleep(for: timeout)
        } catch {
            return  // cancelled: the body finished first
        }
        race.settle(.expired)
    }
    let outcome = await withTaskCancellationHandler {
        await race.outcome()
    } onCancel: {
        work.cancel()
    }
    timer.cancel()
    switch outcome {
    case .finished(let result):
        return try result.get()
    case .expired:
        work.cancel()
        throw CommandFailure("\(what()): nothing within \(describeTimeout(timeout))")
    }
}

/// A timeout as a person reads it: "250 ms", "60 s", "2.5 s".
func describeTimeout(_ timeout: Duration) -> String {
    let (seconds, attoseconds) = timeout.components
    if seconds == 0 { return "\(attoseconds / 1_000_000_000_000_000) ms" }
    if attoseconds == 0 { return "\(seconds) s" }
    return String(format: "%.1f s", Double(seconds) + Double(attoseconds) / 1e18)
}

/// Which came first, a body's outcome or its deadline: settled once, by the first; later settlements
/// are ignored. Its one waiter is resumed exactly once, whether it starts waiting before or after.
private final class DeadlineRace<T: Sendable>: Sendable {
    enum Outcome: Sendable {
        case finished(Result<T, any Error>)
        case expired
    }

    private struct State {
        var outcome: Outcome?
        var waiter: CheckedContinuation<Outcome, Never>?
    }

    private let state = NIOLockedValueBox(State())

    /// Settles the race with `outcome`, unless it is settled already.
    func settle(_ outcome: Outcome) {
        let waiter = state.withLockedValue { state -> CheckedContinuation<Outcome, Never>? in
            guard state.outcome == nil else { return nil }
            state.outcome = outcome
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: outcome)
    }

    /// The first outcome, once there is one.
    func outcome() async -> Outcome {
        await withCheckedContinuation { continuation in
            let known = state.withLockedValue { state -> Outcome? in
                if state.outcome == nil { state.waiter = continuation }
                return state.outcome
            }
            if let known { continuation.resume(returning: known) }
        }
    }
}
