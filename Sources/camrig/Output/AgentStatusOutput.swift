import CamRigCoordinator
import Foundation

/// One agent as `camrig agents` and `camrig sync status` show it.
struct AgentStatusOutput: Encodable {
    var agent: String
    var address: String
    var status: String
    var reason: String?
    var software: String
    var lastSeen: String?
    var connectAttempts: Int
    var offsetUs: Double?
    var driftPpm: Double?
    var errorBoundUs: Double?
    var minRoundTripUs: Double?
    /// How fast the error bound grows away from the estimate's reference, ppm.
    var driftUncertaintyPpm: Double?
    /// Whether the estimate is settled: drift known well enough that the bound holds a second ahead.
    var clockSettled: Bool?
    var samples: Int
    var clockJumps: Int
    /// tls, udp or udp-kernel.
    var clockTransport: String?

    init(_ snapshot: RemoteAgent.Snapshot) {
        agent = snapshot.name
        address = snapshot.endpoint.description
        status = snapshot.status.name
        if case .down(let why, _) = snapshot.status { reason = why }
        software = snapshot.software
        lastSeen = snapshot.lastSeen.map { ISO8601DateFormatter().string(from: $0) }
        connectAttempts = snapshot.connectAttempts
        if let clock = snapshot.clock {
            offsetUs = clock.offsetNanoseconds / 1000
            driftPpm = clock.driftPPM
            errorBoundUs = clock.errorBoundNanoseconds / 1000
            minRoundTripUs = Double(clock.minimumRoundTrip) / 1000
            driftUncertaintyPpm = clock.driftUncertaintyPPM
            clockSettled = clock.isSettled()
        }
        samples = snapshot.clockSamples
        clockJumps = snapshot.clockJumps
        clockTransport = snapshot.clockTransport?.rawValue
    }
}
