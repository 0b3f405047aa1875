/// An exact duration as a fraction of seconds, as V4L2 (`struct v4l2_fract`) and AVFoundation (`CMTime`)
/// express frame intervals: 1/30 s is 30 frames per second, never 0.0333….
public struct FrameDuration: Hashable, Sendable, Comparable, CustomStringConvertible {
    public let numerator: UInt32
    public let denominator: UInt32

    /// Creates a duration; `nil` when the denominator is 0 or the numerator is 0 (no frame takes no time).
    public init?(numerator: UInt32, denominator: UInt32) {
        guard numerator > 0, denominator > 0 else { return nil }
        self.numerator = numerator
        self.denominator = denominator
    }

    /// The duration of one frame at `framesPerSecond` (an integer rate).
    public init?(framesPerSecond: UInt32) {
        self.init(numerator: 1, denominator: framesPerSecond)
    }

    /// Seconds, for display and arithmetic where exactness no longer matters.
    public var seconds: Double { Double(numerator) / Double(denominator) }

    /// Frames per second, the reciprocal.
    public var frameRate: Double { Double(denominator) / Double(numerator) }

    /// Nanoseconds, rounded to the nearest.
    public var nanoseconds: Int64 {
        Int64((UInt64(numerator) * 1_000_000_000 + UInt64(denominator) / 2) / UInt64(denominator))
    }

    /// The same value in lowest terms: 2/60 becomes 1/30.
    public var reduced: FrameDuration {
        var a = numerator
        var b = denominator
        while b != 0 { (a, b) = (b, a % b) }
        return FrameDuration(numerator: numerator / a, denominator: denominator / a)!
    }

    /// Equal values compare equal whatever their terms (2/60 == 1/30).
    public static func == (lhs: FrameDuration, rhs: FrameDuration) -> Bool {
        UInt64(lhs.numerator) * UInt64(rhs.denominator) == UInt64(rhs.numerator) * UInt64(lhs.denominator)
    }

    public func hash(into hasher: inout Hasher) {
        let value = reduced
        hasher.combine(value.numerator)
        hasher.combine(value.denominator)
    }

    public static func < (lhs: FrameDuration, rhs: FrameDuration) -> Bool {
        UInt64(lhs.numerator) * UInt64(rhs.denominator) < UInt64(rhs.numerator) * UInt64(lhs.denominator)
    }

    public var description: String {
        let rate = frameRate
        let fps = rate == rate.rounded() ? String(Int(rate)) : String((rate * 1000).rounded() / 1000)
        return "\(numerator)/\(denominator) s (\(fps) fps)"
    }
}
