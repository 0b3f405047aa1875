import CamRigWire

/// The life of one on-host recording, decided without I/O: which tracks are still open, when the ones
/// that stopped delivering are closed, which state file is written when, and when the recording has
/// ended. `AgentRecordings` feeds it events (a track closed, a deadline came, a state file is on disk, a
/// stop, a shutdown) and carries out the actions it returns.
///
///     recording ──(end + grace)──▶ closing ──(last track closed)──▶ finishing ──(final state durable)──▶ ended
///         └──────────────────────(last track closed)──────────────────┘
///
/// A deadline is an event the shell delivers at the time the machine asked for (`Action.wake(at:)`),
/// never a loop that sleeps and looks. Times are on the agent's clock (nanoseconds).
struct RecordingMachine: Sendable {
    enum State: Equatable, Sendable {
        /// Tracks are recording, before the recording's end.
        case recording
        /// Past the end (or a stop): an open track closes once it has delivered nothing for `grace`, and
        /// at `closeBy` whatever it does.
        case closing
        /// Every track has closed; the final state is being made durable.
        case finishing(WireRecordingState)
        /// The final state is on disk and the end was announced.
        case ended
    }

    enum Action: Equatable, Sendable {
        /// Write the recording's state file with `tracks` (durably); answer with `stateWritten`. The machine
        /// never asks for a second write before the first is done, so files are written in the order decided.
        case writeState(WireRecordingState, tracks: [WireRecordedTrack])
        /// The track of `deviceID` has closed: its camera's stream for this recording stops.
        case stopStream(deviceID: String)
        /// Close these tracks now (with `error`, if any, as their failure).
        case closeTracks([String], error: String?)
        /// The tracks record no grid instant after the one nearest `agentTime`.
        case stopTracks(at: Int64)
        /// Deliver `deadline(now:idle:)` at `at` (replaces any earlier wake-up of this recording).
        case wake(at: Int64)
        /// Announce the end to the recording's watchers: `RecordingEnded` with `tracks`.
        case announceEnded(WireRecordingState, tracks: [WireRecordedTrack])
    }

    /// How long an open track may go without a frame, after the end, before it is closed.
    static let grace: Int64 = 1_000_000_000
    /// How long after the end a track still delivering (behind) may stay open.
    static let lateLimit: Int64 = 10_000_000_000

    private(set) var state: State = .recording
    /// Every track in the request's order: as it closed, or as recording while open.
    private(set) var tracks: [WireRecordedTrack]
    /// When tracks that stopped delivering are closed: the last instant plus one period, plus `grace`.
    private(set) var end: Int64
    private let period: Double
    /// A state write is on its way to the disk; another is held until it is done.
    private var writing = false
    /// The tracks changed while a write was on its way: one more write when it is done.
    private var writeAgain = false
    /// Open tracks already asked to close: not asked again while their writers finish.
    private var closing: Set<String> = []
    /// Failed writes of the final state so far, and whether one waits for its retry.
    private var failedWrites = 0
    private var retryPending = false
    /// How often the final state is tried before the end is announced without it.
    static let writeAttempts = 5
    /// The wait before a failed final state is written again.
    static let retryDelay: Int64 = 1_000_000_000

    /// A recording of `tracks` (all open) whose last grid instant plus one period is `end`.
    init(tracks: [WireRecordedTrack], end: Int64, period: Double) {
        self.tracks = tracks
        self.end = end
        self.period = period
    }

    var openTracks: [String] { tracks.filter { $0.state == .recording }.map(\.deviceID) }

    /// The recording has started (its first state file, every track recording, is on disk before its
    /// files are made): it wakes at its end to close what is late.
    mutating func started() -> [Action] {
        [.wake(at: end + Self.grace)]
    }

    /// A track closed (its last instant, its stream ended, a failure, or a close asked for).
    mutating func trackClosed(_ track: WireRecordedTrack) -> [Action] {
        guard let index = tracks.firstIndex(where: { $0.deviceID == track.deviceID }), tracks[index].state == .recording else {
            return []
        }
        switch state {
        case .recording, .closing: break
        case .finishing, .ended: return []
        }
        var closed = track
        if closed.state == .recording || closed.state == .unspecified { closed.state = .failed }
        tracks[index] = closed
        var actions: [Action] = [.stopStream(deviceID: track.deviceID)]
        if openTracks.isEmpty { state = .finishing(finalState) }
        actions += write()
        return actions
    }

    /// The state file asked for last is on disk (`written`), or could not be written. A recording's state
    /// that could not be written while it records is left: the next write carries it, and a crash leaves
    /// the state before it, which the next start repairs. The final state is tried again a second later,
    /// `writeAttempts` times in all, before the end is announced all the same (its files are then offered
    /// only once the next start has closed the recording).
    mutating func stateWritten(_ written: Bool = true, now: Int64 = 0) -> [Action] {
        writing = false
        if writeAgain {
            writeAgain = false
            return write()
        }
        guard case .finishing(let final) = state else { return [] }
        if !written {
            failedWrites += 1
            if failedWrites < Self.writeAttempts {
                retryPending = true
                return [.wake(at: now + Self.retryDelay)]
            }
        }
        state = .ended
        return [.announceEnded(final, tracks: tracks)]
    }

    /// A deadline asked for came. `idle` is, per open track, how long since its stream last handed it a
    /// frame of this recording (nil: never).
    mutating func deadline(now: Int64, idle: [String: Int64]) -> [Action] {
        switch state {
        case .recording:
            guard now >= end + Self.grace else { return [.wake(at: end + Self.grace)] }
            state = .closing
        case .closing: break
        case .finishing:
            guard retryPending else { return [] }
            retryPending = false
            return write()
        case .ended: return []
        }
        let closeBy = end + Self.lateLimit
        var late: [String] = []
        var nextWake = closeBy
        let waiting = openTracks.filter { !closing.contains($0) }
        for deviceID in waiting {
            let quiet = idle[deviceID] ?? .max
            if quiet >= Self.grace || now >= closeBy {
                late.append(deviceID)
            } else {
                // Behind but delivering: looked at again when it would have been quiet for `grace`.
                nextWake = min(nextWake, now + (Self.grace - quiet))
            }
        }
        var actions: [Action] = []
        if !late.isEmpty { actions.append(.closeTracks(late, error: nil)) }
        closing.formUnion(late)
        if late.count < waiting.count { actions.append(.wake(at: nextWake)) }
        return actions
    }

    /// `StopRecording` at `now`: no instant after the nearest one is recorded; a camera that has stopped
    /// delivering is closed two periods and `grace` after the stop.
    mutating func stop(now: Int64) -> [Action] {
        guard state == .recording || state == .closing else { return [] }
        end = min(end, now + Int64(2 * period))
        return [.stopTracks(at: now), .wake(at: end + Self.grace)]
    }

    /// The agent shuts down: every open track closes as it is.
    mutating func shutdown() -> [Action] {
        // Tracks asked to close before are asked again: the shutdown's reason is theirs if they had not closed yet.
        let open = openTracks
        guard !open.isEmpty, state == .recording || state == .closing else { return [] }
        closing.formUnion(open)
        return [.closeTracks(open, error: "the agent shut down during the recording")]
    }

    /// Every track complete: complete; any failed or cut short: failed.
    private var finalState: WireRecordingState {
        tracks.allSatisfy { $0.state == .complete } ? .complete : .failed
    }

    private mutating func write() -> [Action] {
        guard !writing else {
            writeAgain = true
            return []
        }
        writing = true
        let recordingState: WireRecordingState = if case .finishing(let final) = state { final } else { .recording }
        return [.writeState(recordingState, tracks: tracks)]
    }
}
