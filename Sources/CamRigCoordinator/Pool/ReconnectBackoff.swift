/// How long to wait before reconnecting to an agent: exponential from `initial` up to `maximum`,
/// each wait jittered by ±20% so that a rack of agents that failed together does not retry in
/// lockstep. Pure: the jitter is a parameter, so tests check every wait without sleeping.
public struct ReconnectBackoff: Sendable, Equatable {
    public let initial: Duration
    public let maximum: Duration
    /// The wait before jitter for the next attempt.
    public private(set) var current: Duration

    public init(initial: Duration, maximum: Duration) {
        self.initial = initial
        self.maximum = maximum
        current = initial
    }

    /// The wait before the next attempt, with `jitter` in 0.8...1.2 (a uniform draw by default); the
    /// wait after it doubles, up to `maximum`.
    public mutating func next(jitter: Double = Double.random(in: 0.8...1.2)) -> Duration {
        let wait = current * min(max(jitter, 0.8), 1.2)
        current = min(current * 2, maximum)
        return wait
    }

    /// After a successful connection the next failure waits `initial` again.
    public mutating func reset() {
        current = initial
    }
}
