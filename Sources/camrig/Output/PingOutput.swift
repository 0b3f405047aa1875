import CamRigViews
import CamRigCLI

/// Round trips in microseconds, summarized.
struct RoundTripSummary: Encodable {
    var minUs: Double
    var p50Us: Double
    var meanUs: Double
    var maxUs: Double

    init(_ samples: [Double]) {
        let distribution = Distribution(samples)
        minUs = distribution.min
        p50Us = distribution.p50
        meanUs = distribution.mean
        maxUs = distribution.max
    }
}

/// What `camrig ping --json` prints (keys in snake case).
struct PingOutput: Encodable {
    struct Agent: Encodable {
        var id: String
        var address: String
        var protocolVersion: UInt32
        var software: String
        var capabilities: [String]
    }

    struct Client: Encodable {
        var name: String
        var role: String
    }

    var agent: Agent
    var client: Client
    var rttUs: [Double]
    var summary: RoundTripSummary
}
