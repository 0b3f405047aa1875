import CamRigClock
import CamRigCoordinator
import CamRigWire

/// An agent process on this machine whose host clock is simulated: the truth its clock estimates
/// are judged by is known. `LoopbackRig.Member` and `NetworkedRig.Member` are ones.
public protocol SimulatedAgent: Sendable {
    /// The agent's name: its certificate and agent id.
    var name: String { get }
    /// The running process.
    var process: LocalAgentProcess { get }
    /// Where the coordinator dials it.
    var endpoint: AgentEndpoint { get }
    /// The host clock it stamps frames with.
    var clock: HostClock { get }
}

extension SimulatedAgent {
    /// How far `estimate` is from this agent's true offset (agent − coordinator) at coordinator instant
    /// `t`, in nanoseconds.
    public func offsetError(of estimate: ClockEstimate, at t: Int64 = HostClock.monotonicNow()) -> Double {
        estimate.offset(atCoordinator: t) - Double(clock.reading(atMonotonic: t) - t)
    }
}

extension Sequence where Element: SimulatedAgent {
    /// Every agent's log (the last `limit` characters of each), for a failure message.
    func logs(limit: Int) -> String {
        map { "\($0.name): \($0.process.log().suffix(limit))" }.joined(separator: "\n")
    }
}
