#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The clock a host stamps frames with: `CLOCK_MONOTONIC`, optionally skewed by a fixed offset and a
/// drift so that several simulated hosts on one machine disagree the way real ones do.
///
/// `now = monotonic + offset + drift × (monotonic − epoch)`, with drift in parts per million.
public struct HostClock: Sendable, Hashable {
    public var offsetNanoseconds: Int64
    public var driftPPM: Double
    /// The monotonic instant from which drift accumulates.
    public var epoch: Int64
    /// A step (as when someone sets the clock): from `stepAtMonotonic` on, the clock reads
    /// `stepNanoseconds` more. No step by default.
    public var stepAtMonotonic: Int64 = .max
    public var stepNanoseconds: Int64 = 0

    /// The machine's own clock, unskewed.
    public static let system = HostClock(offsetNanoseconds: 0, driftPPM: 0, epoch: 0)

    public init(offsetNanoseconds: Int64, driftPPM: Double, epoch: Int64 = HostClock.monotonicNow()) {
        self.offsetNanoseconds = offsetNanoseconds
        self.driftPPM = driftPPM
        self.epoch = epoch
    }

    /// This clock's reading now.
    public func now() -> Int64 { reading(atMonotonic: Self.monotonicNow()) }

    /// This clock's reading at a given instant of `CLOCK_MONOTONIC`.
    public func reading(atMonotonic monotonic: Int64) -> Int64 {
        let step = monotonic >= stepAtMonotonic ? stepNanoseconds : 0
        guard driftPPM != 0 else { return monotonic + offsetNanoseconds + step }
        let drift = Double(monotonic - epoch) * driftPPM / 1_000_000
        return monotonic + offsetNanoseconds + step + Int64(drift.rounded())
    }

    /// The first `CLOCK_MONOTONIC` instant at which this clock reads `reading` or later (the inverse of
    /// `reading(atMonotonic:)`, rounded up where drift makes the inverse inexact). A reading skipped by
    /// a forward step maps to the step's instant.
    public func monotonic(atReading reading: Int64) -> Int64 {
        let before = unstepped(reading)
        if before < stepAtMonotonic { return before }
        let after = unstepped(reading - stepNanoseconds)
        return max(after, stepAtMonotonic)
    }

    private func unstepped(_ reading: Int64) -> Int64 {
        let scale = 1 + driftPPM / 1_000_000
        var monotonic = epoch + Int64((Double(reading - offsetNanoseconds - epoch) / scale).rounded())
        let unsteppedReading = { (m: Int64) in m + offsetNanoseconds + Int64((Double(m - epoch) * driftPPM / 1_000_000).rounded()) }
        while unsteppedReading(monotonic) < reading { monotonic += 1 }
        return monotonic
    }

    /// `CLOCK_MONOTONIC` in nanoseconds.
    @inline(__always)
    public static func monotonicNow() -> Int64 {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return Int64(spec.tv_sec) * 1_000_000_000 + Int64(spec.tv_nsec)
    }

    /// Sleeps until `CLOCK_MONOTONIC` reaches `deadline` (absolute, so no drift accumulates).
    public static func sleep(untilMonotonic deadline: Int64) {
        var spec = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &spec, nil) == EINTR {}
    }
}

extension HostClock {
    /// A plausible clock error for simulated host `index` (demos and benchmarks): offsets of a few
    /// milliseconds either way, drifts of tens of ppm, as unsynchronized crystals show. Distinct for
    /// the first eight hosts; later hosts repeat them with larger offsets.
    public static func simulatedError(host index: Int) -> (offsetMicroseconds: Double, driftPPM: Double) {
        let offsets: [Double] = [1_250, -3_400, 7_900, -12_600, 450, 21_300, -6_050, 15_500]
        let drifts: [Double] = [35, -20, 12, -48, 5, 27, -9, 44]
        return (offsets[index % offsets.count] * Double(index / offsets.count + 1), drifts[index % drifts.count])
    }
}
