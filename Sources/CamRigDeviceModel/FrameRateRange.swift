/// The frame durations a format allows, as a V4L2 driver declares them (AVFoundation's `AVFrameRateRange`).
///
/// The shortest duration is the highest frame rate.
public struct FrameRateRange: Hashable, Sendable, CustomStringConvertible {
    /// How the driver declared the durations.
    public enum Kind: Hashable, Sendable {
        /// Exactly one duration (`minFrameDuration == maxFrameDuration`).
        case discrete
        /// `min, min + step, …, max`.
        case stepwise(step: FrameDuration)
        /// Any duration in `[min, max]`.
        case continuous
    }

    public let minFrameDuration: FrameDuration
    public let maxFrameDuration: FrameDuration
    public let kind: Kind

    /// One discrete duration.
    public init(discrete duration: FrameDuration) {
        minFrameDuration = duration
        maxFrameDuration = duration
        kind = .discrete
    }

    /// A stepwise or continuous range; `nil` if `min > max`.
    public init?(min: FrameDuration, max: FrameDuration, kind: Kind) {
        guard min <= max else { return nil }
        minFrameDuration = min
        maxFrameDuration = max
        self.kind = min == max ? .discrete : kind
    }

    /// The highest frame rate of the range.
    public var maxFrameRate: Double { minFrameDuration.frameRate }
    /// The lowest frame rate of the range.
    public var minFrameRate: Double { maxFrameDuration.frameRate }

    /// Whether `duration` is one the range allows exactly.
    public func contains(_ duration: FrameDuration) -> Bool {
        guard duration >= minFrameDuration, duration <= maxFrameDuration else { return false }
        switch kind {
        case .discrete, .continuous:
            return true
        case .stepwise(let step):
            // (duration - min) must be a whole multiple of step, in exact arithmetic:
            // (d.n·m.d − m.n·d.d)·s.d  ≡ 0  (mod  s.n·d.d·m.d)
            let d = duration, m = minFrameDuration
            let numerator = (Int128(d.numerator) * Int128(m.denominator) - Int128(m.numerator) * Int128(d.denominator))
                * Int128(step.denominator)
            let denominator = Int128(step.numerator) * Int128(d.denominator) * Int128(m.denominator)
            return numerator % denominator == 0
        }
    }

    public var description: String {
        switch kind {
        case .discrete: "\(minFrameDuration)"
        case .stepwise(let step): "\(minFrameDuration) … \(maxFrameDuration) in steps of \(step.numerator)/\(step.denominator) s"
        case .continuous: "\(minFrameDuration) … \(maxFrameDuration)"
        }
    }
}
