import NIOConcurrencyHelpers

/// A clock read in whole nanoseconds: the host's (`HostClock`) or a test's (`ManualClock`).
///
/// Whatever keeps time on its own (lease expiry, reconnect backoff, trigger schedules) takes one of
/// these, so that tests move time by hand instead of sleeping.
public protocol NanosecondClock: Sendable {
    /// The reading now, in nanoseconds.
    func now() -> Int64
}

extension HostClock: NanosecondClock {}

/// A clock that moves only when told to, for tests.
public final class ManualClock: NanosecondClock {
    private let reading: NIOLockedValueBox<Int64>

    public init(startingAt start: Int64 = 1_000_000_000) {
        reading = NIOLockedValueBox(start)
    }

    public func now() -> Int64 { reading.withLockedValue { $0 } }

    /// Moves the clock forward by `nanoseconds`.
    public func advance(by nanoseconds: Int64) {
        reading.withLockedValue { $0 += nanoseconds }
    }

    /// Moves the clock forward by `duration`.
    public func advance(by duration: Duration) {
        advance(by: duration.nanoseconds)
    }

    /// Sets the clock to `nanoseconds` (never backwards).
    public func set(to nanoseconds: Int64) {
        reading.withLockedValue { $0 = max($0, nanoseconds) }
    }
}

extension Duration {
    /// The duration in whole nanoseconds.
    public var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }

    /// The duration in seconds, as a floating-point number (for rates, tables and APIs that take seconds).
    public var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }

    /// The duration in microseconds, as a floating-point number.
    public var microseconds: Double { Double(components.seconds) * 1e6 + Double(components.attoseconds) / 1e12 }
}
