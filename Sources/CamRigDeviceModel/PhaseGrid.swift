/// A frame grid on one host's clock: instants `anchor + k × period` for every integer k.
public struct PhaseGrid: Sendable, Hashable {
    /// Any instant on the grid, in nanoseconds.
    public var anchor: Int64
    /// The grid period, in nanoseconds of the same clock.
    public var period: Double

    /// The grid through `anchor` with `period`; the period must be positive.
    public init(anchor: Int64, period: Double) {
        precondition(period > 0, "a grid needs a positive period")
        self.anchor = anchor
        self.period = period
    }

    /// The index of the grid instant nearest `t`.
    public func index(nearest t: Int64) -> Int64 {
        Int64((Double(t &- anchor) / period).rounded())
    }

    /// The grid instant with index `k`.
    public func instant(_ k: Int64) -> Int64 {
        anchor &+ Int64((Double(k) * period).rounded())
    }

    /// `t` minus the nearest grid instant: in `[-period/2, period/2]`, negative when early.
    public func error(of t: Int64) -> Double {
        let phase = Double(t &- anchor) / period
        return (phase - phase.rounded()) * period
    }

    /// The first grid instant at or after `t`.
    public func next(atOrAfter t: Int64) -> Int64 {
        var k = Int64((Double(t &- anchor) / period).rounded(.up))
        while instant(k) < t { k += 1 }
        return instant(k)
    }
}

/// Whether a camera is on its grid (the wire's `PhaseLockState`).
public enum PhaseLockState: String, Sendable, Hashable {
    case locking
    case locked
    case cannotLock = "cannot-lock"
}

/// Recent phase errors of a camera: the lock state with hysteresis, and the bound over a window.
public struct PhaseErrorTracker: Sendable {
    /// |error| at or below which a frame counts as on the grid, in nanoseconds.
    public var tolerance: Double
    /// Consecutive frames on the grid before the camera counts as locked.
    public var framesToLock: Int
    /// Consecutive frames off the grid before a locked camera counts as locking again.
    public var framesToUnlock: Int
    /// How many recent frames the bound covers.
    public var window: Int

    /// Whether the camera counts as on the grid now.
    public private(set) var isLocked = false
    /// The newest frame's phase error, in nanoseconds.
    public private(set) var lastError: Double = 0
    /// Frames observed so far.
    public private(set) var frames: UInt64 = 0
    private var onGrid = 0
    private var offGrid = 0
    private var recent: [Double] = []
    private var next = 0

    /// A tracker judging frames against `tolerance` (nanoseconds), with the given hysteresis and window.
    public init(tolerance: Double, framesToLock: Int = 8, framesToUnlock: Int = 3, window: Int = 32) {
        self.tolerance = tolerance
        self.framesToLock = framesToLock
        self.framesToUnlock = framesToUnlock
        self.window = window
    }

    /// Takes one frame's phase error; returns true when the lock state changed.
    @discardableResult
    public mutating func observe(_ error: Double) -> Bool {
        frames += 1
        lastError = error
        if recent.count < window { recent.append(error) } else { recent[next] = error }
        next = (next + 1) % window
        if abs(error) <= tolerance {
            onGrid += 1
            offGrid = 0
        } else {
            offGrid += 1
            onGrid = 0
        }
        let was = isLocked
        if !isLocked && onGrid >= framesToLock { isLocked = true }
        if isLocked && offGrid >= framesToUnlock { isLocked = false }
        return was != isLocked
    }

    /// Starts over (a new grid or a restarted stream).
    public mutating func reset() {
        isLocked = false
        onGrid = 0
        offGrid = 0
        recent.removeAll()
        next = 0
    }

    /// The largest |error| over the recent frames (0 before any).
    public var bound: Double { recent.map(abs).max() ?? 0 }
}
