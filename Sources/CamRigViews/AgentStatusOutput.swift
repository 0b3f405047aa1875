import CamRigCoordinator
import Foundation

/// One agent as `camrig agents` and `camrig sync status` show it.
public struct AgentStatusOutput: Codable, Sendable {
    public var agent: String
    public var address: String
    public var status: String
    public var reason: String?
    public var software: String
    public var lastSeen: String?
    public var connectAttempts: Int
    public var offsetUs: Double?
    public var driftPpm: Double?
    public var errorBoundUs: Double?
    public var minRoundTripUs: Double?
    /// How fast the error bound grows away from the estimate's reference, ppm.
    public var driftUncertaintyPpm: Double?
    /// Whether the estimate is settled: drift known well enough that the bound holds a second ahead.
    public var clockSettled: Bool?
    public var samples: Int
    public var clockJumps: Int
    /// tls, udp or udp-kernel.
    public var clockTransport: String?

    public init(_ snapshot: RemoteAgent.Snapshot) {
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
