/// Whom a phase lock answers to: the coordinator that locked the camera, or, once that coordinator has
/// let go (its lease ended: it was killed, lost its connection, or unlocked) while the agent records the
/// camera, that recording until it ends.
///
/// A recording runs on the agent whatever happens to its coordinator, and its frames are matched by grid
/// index: a free-running sensor released in the middle of one drifts off the grid at its crystal's rate
/// (60 µs a second at 60 ppm; half a frame in minutes). So the lock keeps steering the camera on the last
/// grid it was sent (already in the agent's clock, at the agent's rate as its coordinator estimated it)
/// until the recording's last track has closed, and only then lets go.
///
/// Pure: the shell says what happened and when (`now`, agent clock), and carries out the answer.
struct PhaseLockTenure: Sendable, Equatable {
    enum Holder: Sendable, Equatable {
        /// Under its coordinator's lease.
        case coordinator
        /// The coordinator let go at `since` while a recording of the camera ran: held for the recording.
        case recording(since: Int64)
    }

    enum Action: Sendable, Equatable {
        /// Go on steering the camera on its grid.
        case keep
        /// Release the lock: frame duration back to nominal, the hold on the stream given up.
        case release
    }

    /// How often a lock held for a recording asks whether the recording still runs. Frames drive the
    /// asking (a held lock watches the camera's frames), so a recording's end is noticed within this.
    static let recordingCheckInterval: Int64 = 500_000_000

    private(set) var holder: Holder = .coordinator
    /// When it last asked whether the recording still runs.
    private var lastCheck: Int64 = 0

    var isHeldForRecording: Bool {
        if case .recording = holder { return true }
        return false
    }

    /// The coordinator let go (`UnlockPhase`, or its lease ended). `recording`: a recording of the camera
    /// runs on the agent now; `steers`: the lock steers a free-running camera and has not ended (a camera
    /// that starts exposing on command has nothing to hold: its recording started it on the grid).
    mutating func coordinatorLeft(recording: Bool, steers: Bool, now: Int64) -> Action {
        guard recording, steers else { return .release }
        if case .coordinator = holder { holder = .recording(since: now) }
        lastCheck = now
        return .keep
    }

    /// A coordinator locked the camera again: the lock answers to its lease from now on.
    mutating func relocked() {
        holder = .coordinator
    }

    /// Whether to ask, on a frame at `now`, if the recording still runs: only for a lock held for one, at
    /// most every `recordingCheckInterval`.
    mutating func shouldAskAboutRecording(now: Int64) -> Bool {
        guard case .recording = holder, now - lastCheck >= Self.recordingCheckInterval else { return false }
        lastCheck = now
        return true
    }

    /// The answer to `shouldAskAboutRecording`: `recording` says whether a recording of the camera still
    /// runs; `steers` whether the lock still steers it (its stream may have ended meanwhile).
    func recordingAnswered(recording: Bool, steers: Bool) -> Action {
        guard case .recording = holder else { return .keep }
        return recording && steers ? .keep : .release
    }
}
