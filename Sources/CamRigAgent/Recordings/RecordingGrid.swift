/// Which grid index each frame of a recorded track belongs to, and the gaps and duplicates between them.
///
/// A recording covers grid instants `start + k × period` (agent clock) for `k` in `0..<count`. A frame
/// belongs to the instant nearest its exposure start. An index passed with no frame is a gap; a second
/// frame on an index is a duplicate. Pure: the track recorder feeds it frames in arrival order and
/// writes what it returns.
struct RecordingGrid: Sendable, Equatable {
    var start: Int64
    var period: Double
    var count: Int64

    /// Where the grid's next frame is expected: every index below it has a frame or is a gap.
    private(set) var next: Int64 = 0
    private(set) var frames: Int64 = 0
    private(set) var gaps: Int64 = 0
    private(set) var duplicates: Int64 = 0
    /// The last index a frame was written at, if any.
    private(set) var lastIndex: Int64?
    private(set) var firstIndex: Int64?

    init(start: Int64, period: Double, count: Int64) {
        precondition(period > 0 && count > 0, "a recording grid needs a positive period and at least one instant")
        self.start = start
        self.period = period
        self.count = count
    }

    /// The grid instant with index `k`.
    func instant(_ k: Int64) -> Int64 { start &+ Int64((Double(k) * period).rounded()) }

    /// The index nearest `t`.
    func index(nearest t: Int64) -> Int64 { Int64((Double(t &- start) / period).rounded()) }

    enum Placement: Equatable {
        /// Exposed before the recording's first instant (by more than half a period): not recorded.
        case before
        /// Exposed after its last instant: the track is done.
        case after
        /// Recorded at `index`; `gaps` are the indexes it skipped (no frame), `duplicate` when the index
        /// already had one.
        case frame(index: Int64, gaps: Range<Int64>, duplicate: Bool)
    }

    /// Places a frame exposed at `exposureStart` and counts it.
    mutating func place(exposureStart: Int64) -> Placement {
        let k = index(nearest: exposureStart)
        if k < 0 { return .before }
        if k >= count { return .after }
        if let lastIndex, k <= lastIndex {
            // A second frame on an index (or, with jitter past half a period, on an earlier one): stored, flagged.
            frames += 1
            duplicates += 1
            return .frame(index: max(k, lastIndex), gaps: next..<next, duplicate: true)
        }
        let skipped = next..<k
        gaps += Int64(skipped.count)
        frames += 1
        next = k + 1
        lastIndex = k
        if firstIndex == nil { firstIndex = k }
        return .frame(index: k, gaps: skipped, duplicate: false)
    }

    /// The track ended: the indexes still ahead are gaps. Returns them.
    mutating func finish() -> Range<Int64> {
        let rest = next..<count
        gaps += Int64(rest.count)
        next = count
        return rest
    }

    /// Ends the recording before index `k` (a stop): no index from `k` on is recorded or counted as a gap.
    mutating func end(before k: Int64) {
        count = min(count, max(next, k))
    }

    /// Whether every index has been passed.
    var isComplete: Bool { next >= count }
}

/// The clock mapping a recording's timestamps go through: agent clock → rig clock, with the bound on
/// its error (the wire's `ClockMapping`).
struct RigClockMapping: Sendable, Equatable {
    var agentReference: Int64
    var rigReference: Int64
    var rigPerAgent: Double
    var uncertainty: Double
    var uncertaintyGrowthPPM: Double

    static let identity = RigClockMapping(agentReference: 0, rigReference: 0, rigPerAgent: 1, uncertainty: 0, uncertaintyGrowthPPM: 0)

    func rigTime(ofAgent t: Int64) -> Int64 {
        rigReference &+ Int64((Double(t &- agentReference) * rigPerAgent).rounded())
    }

    /// The bound on |rig-time error| at agent time `t`, plus the stamp's own uncertainty.
    func uncertainty(atAgent t: Int64, stamp: Int64) -> Int64 {
        Int64((uncertainty + abs(Double(t &- agentReference)) * uncertaintyGrowthPPM * 1e-6).rounded(.up)) + stamp
    }
}
