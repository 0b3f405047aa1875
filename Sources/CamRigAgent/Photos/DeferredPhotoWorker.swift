import Logging

/// Makes the finals of deferred photos (also those an earlier run left) while the agent is idle.
///
/// It sleeps until something happens: the agent wakes it whenever a photo begins or ends a stage, a
/// capture is stored, or a device's readiness changes. Each time it decides with `step(…)` what to do:
/// nothing until the next wake-up (no photo waits, or the agent is busy), sleep until the agent has been
/// idle long enough, or make the oldest waiting photo's final. A final that fails is retried after the
/// others; after `maxFailures` the photo's proxy becomes its final.
final class DeferredPhotoWorker: Sendable {
    /// What the worker does next.
    enum Step: Equatable, Sendable {
        /// Nothing until it is woken.
        case waitForWakeUp
        /// Nothing until this reading of the agent's clock (the agent idle long enough by then, unless woken).
        case sleep(until: Int64)
        /// Make this photo's final now.
        case make(String)
    }

    /// What the agent is doing, as the worker sees it.
    struct Activity: Sendable {
        /// A capture is in flight or a device's pipeline is capturing or processing.
        var busy: Bool
        /// When a photo last began or ended a stage (agent clock).
        var lastActivity: Int64
    }

    /// How long the agent must have been idle before a final is made.
    static let idleBeforeFinal: Int64 = 1_000_000_000
    /// Failures after which a photo's proxy becomes its final.
    static let maxFailures = 3
    /// How long after a failed final the worker waits before the next.
    static let retryDelay: Duration = .seconds(1)

    /// The next step, from the photos waiting (oldest first), what the agent is doing and the time now.
    static func step(waiting: [String], activity: Activity, now: Int64) -> Step {
        guard let next = waiting.first, !activity.busy else { return .waitForWakeUp }
        let idleFrom = activity.lastActivity + idleBeforeFinal
        return now >= idleFrom ? .make(next) : .sleep(until: idleFrom)
    }

    private let finalizer: PhotoFinalizer
    private let now: @Sendable () -> Int64
    private let activity: @Sendable () -> Activity
    private let logger: Logger
    private let wakeUps: AsyncStream<Void>
    private let wakeUpContinuation: AsyncStream<Void>.Continuation

    /// - Parameters:
    ///   - now: the agent clock's reading.
    ///   - activity: what the agent is doing now.
    init(
        finalizer: PhotoFinalizer, now: @escaping @Sendable () -> Int64, activity: @escaping @Sendable () -> Activity,
        logger: Logger
    ) {
        self.finalizer = finalizer
        self.now = now
        self.activity = activity
        self.logger = logger
        // One pending wake-up is enough: the worker looks at everything again when it wakes.
        (wakeUps, wakeUpContinuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// Tells the worker that something changed; it looks again. Never blocks.
    func wakeUp() {
        wakeUpContinuation.yield()
    }

    /// Makes finals until cancelled; `made` is told of each final made (the device's processing estimate
    /// learns from it).
    func run(made: (PhotoFinalizer.Made) -> Void) async {
        var failures: [String: Int] = [:]
        var wakeUps = self.wakeUps.makeAsyncIterator()
        while !Task.isCancelled {
            switch Self.step(waiting: finalizer.deferred.ids, activity: activity(), now: now()) {
            case .waitForWakeUp:
                // `nil` when the task is cancelled.
                guard await wakeUps.next() != nil else { return }
            case .sleep(let until):
                // A wake-up meanwhile is kept, and looked at once the sleep ends.
                try? await Task.sleep(for: .nanoseconds(max(until - now(), 0)))
            case .make(let photoID):
                do {
                    if let final = try await finalizer.makeFinal(photoID) { made(final) }
                    failures[photoID] = nil
                } catch {
                    // The others are made first; after `maxFailures` the photo's proxy becomes its final.
                    let count = failures[photoID, default: 0] + 1
                    failures[photoID] = count
                    logger.error(
                        "cannot make a deferred photo's final",
                        metadata: ["photo": "\(photoID)", "attempt": "\(count)", "error": "\(error)"])
                    finalizer.deferred.moveToBack(photoID)
                    if count >= Self.maxFailures {
                        await finalizer.giveUp(photoID, error: error)
                        failures[photoID] = nil
                    }
                    try? await Task.sleep(for: Self.retryDelay)
                }
            }
        }
    }
}
