/// Percentiles of a sample, in the sample's unit (nearest rank: the smallest value with at least
/// that share of the sample at or below it).
public struct Distribution: Encodable, Sendable {
    /// How many values.
    public var count: Int
    /// The smallest value.
    public var min: Double
    /// The median.
    public var p50: Double
    /// The 99th percentile.
    public var p99: Double
    /// The 99.9th percentile.
    public var p999: Double
    /// The largest value.
    public var max: Double
    /// The arithmetic mean.
    public var mean: Double

    /// The percentiles of `values`; each is NaN when there are none.
    public init(_ values: [Double]) {
        let sorted = values.sorted()
        count = sorted.count
        func at(_ q: Double) -> Double {
            guard !sorted.isEmpty else { return .nan }
            let index = Swift.max(0, Int((q * Double(sorted.count)).rounded(.up)) - 1)
            return sorted[Swift.min(sorted.count - 1, index)]
        }
        min = sorted.first ?? .nan
        p50 = at(0.5)
        p99 = at(0.99)
        p999 = at(0.999)
        max = sorted.last ?? .nan
        mean = sorted.isEmpty ? .nan : sorted.reduce(0, +) / Double(sorted.count)
    }

    private enum CodingKeys: String, CodingKey { case count, min, p50, p99, p999, max, mean }

    /// JSON has no NaN: the figures of an empty distribution are written as `null`.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(count, forKey: .count)
        for (key, value) in [(CodingKeys.min, min), (.p50, p50), (.p99, p99), (.p999, p999), (.max, max), (.mean, mean)] {
            if value.isFinite { try container.encode(value, forKey: key) } else { try container.encodeNil(forKey: key) }
        }
    }
}
