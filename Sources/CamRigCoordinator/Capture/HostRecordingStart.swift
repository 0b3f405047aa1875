import CamRigDeviceModel

/// The grid instant an on-host recording starts at: the first one every camera can still make.
///
/// Between the choice and a camera's first frame, the request crosses the network, the agent checks the
/// recording again (as its pre-flight check did), writes the request and its state to disk, opens a file
/// per track, answers, and then starts its cameras one after another. A camera that starts exposing on
/// command is started on the first grid instant still a few milliseconds ahead of that moment; a
/// free-running one needs its first frame read before the instant. An instant chosen with only a
/// trigger's lead (50 ms) is often already behind: the camera's first frame lands on instant 1 and set 0
/// is incomplete. So the lead covers the trigger's lead, the slowest agent's pre-flight check (which the
/// agent repeats), a set-up allowance per agent and per further track, and one frame period, and the
/// instant is snapped onto the rig's grid.
///
/// Pure: the time and the measurements come in.
public struct HostRecordingStart: Sendable, Hashable {
    /// What an agent takes, past its check, to set a recording up and start its first camera: two to
    /// three files flushed to disk, a muxer opened per track, a camera stream started (measured: tens of
    /// milliseconds on an idle machine, well over 100 ms on a loaded two-core one in a debug build).
    public static let setUpAllowance: Int64 = 200_000_000
    /// Per further track of one agent: its cameras start one after another.
    public static let perTrackAllowance: Int64 = 40_000_000

    /// When the choice was made (coordinator clock).
    public var plannedAt: Int64
    /// The first grid instant of the recording (coordinator clock).
    public var startAt: Int64

    /// How far ahead of `plannedAt` the recording starts.
    public var lead: Duration { .nanoseconds(startAt - plannedAt) }

    /// The start for a recording planned at `now`.
    ///
    /// - Parameters:
    ///   - triggerLead: the lead a trigger needs to reach every agent in time (`CapturePlan.lead`).
    ///   - checkDurations: each agent's pre-flight check, from request to answer, in nanoseconds.
    ///   - tracksPerAgent: the most cameras one agent records.
    ///   - framePeriod: the rig's frame period, in nanoseconds.
    ///   - grid: the rig's frame grid when it is phase-locked: the start is one of its instants.
    public init(now: Int64, triggerLead: Duration, checkDurations: [Int64], tracksPerAgent: Int, framePeriod: Double, grid: PhaseGrid?) {
        let check = max(0, checkDurations.max() ?? 0)
        let tracks = Int64(max(0, tracksPerAgent - 1)) * Self.perTrackAllowance
        let earliest = now + triggerLead.nanoseconds + check + Self.setUpAllowance + tracks + Int64(framePeriod.rounded(.up))
        plannedAt = now
        startAt = grid?.next(atOrAfter: earliest) ?? earliest
    }
}
