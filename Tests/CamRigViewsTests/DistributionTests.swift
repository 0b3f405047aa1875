import CamRigViews
import Foundation
import Testing

/// The percentiles `camrig` and `camrig-bench` print (skews, round trips, latencies) and their JSON.
@Suite("Distributions of measurements", .timeLimit(.minutes(1)))
struct DistributionTests {
    @Test("percentiles by nearest rank: the smallest value with at least that share of the sample at or below it")
    func nearestRank() {
        let values = (1...1000).map(Double.init).shuffled()
        let distribution = Distribution(values)
        #expect(distribution.count == 1000)
        #expect(distribution.min == 1 && distribution.max == 1000)
        #expect(distribution.p50 == 500)
        #expect(distribution.p99 == 990)
        #expect(distribution.p999 == 999)
        #expect(distribution.mean == 500.5)
        // Small samples: the 99th percentile of four values is the largest, never between two of them.
        #expect(Distribution([4, 1, 3, 2]).p99 == 4)
        #expect(Distribution([4, 1, 3, 2]).p50 == 2)
    }

    @Test("an empty sample is written as nulls in JSON, which has no NaN")
    func emptyIsNull() throws {
        let json = try JSONSerialization.jsonObject(with: try JSONEncoder().encode(Distribution([]))) as? [String: Any]
        #expect(json?["count"] as? Int == 0)
        for key in ["min", "p50", "p99", "p999", "max", "mean"] {
            #expect(json?[key] is NSNull, "\(key): \(String(describing: json?[key]))")
        }
        let one = try JSONSerialization.jsonObject(with: try JSONEncoder().encode(Distribution([7]))) as? [String: Any]
        #expect(one?["p999"] as? Double == 7)
    }
}
