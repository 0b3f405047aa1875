/// One track's life, decided without I/O: where each frame goes on the recording's grid, when the track
/// closes, and which grid indexes are left as gaps when it does. `TrackRecorder` feeds it the frames in
/// the order they arrive, on its writer's queue, and writes what it decides.
///
///     recording ──(a frame past the last instant, the last instant filled, a stop passed, the stream ended, a close)──▶ closed
struct TrackMachine: Sendable, Equatable {
    enum State: Sendable, Equatable {
        case recording
        case closed
    }

    enum FrameAction: Sendable, Equatable {
        /// Exposed before the recording's first instant (or after the track closed): not the recording's.
        case ignore
        /// Write gap rows for `gaps`, then the frame at `index`; close the track after it when `thenClose`.
        case write(index: Int64, gaps: Range<Int64>, duplicate: Bool, thenClose: Range<Int64>?)
        /// Past the last instant: close the track, with gap rows for `trailingGaps`.
        case close(trailingGaps: Range<Int64>)
    }

    private(set) var state: State = .recording
    private(set) var grid: RecordingGrid

    init(grid: RecordingGrid) {
        self.grid = grid
    }

    /// A frame exposed at `exposureStart` (agent clock) reached the writer.
    mutating func frame(exposureStart: Int64) -> FrameAction {
        guard state == .recording else { return .ignore }
        switch grid.place(exposureStart: exposureStart) {
        case .before:
            return .ignore
        case .after:
            return .close(trailingGaps: close()!)
        case .frame(let index, let gaps, let duplicate):
            return .write(index: index, gaps: gaps, duplicate: duplicate, thenClose: grid.isComplete ? close() : nil)
        }
    }

    /// A stop at `agentTime`: no index after the nearest one is recorded. Returns the trailing gaps when
    /// the track closes at once (its grid is complete already), nil while it waits for its last frame.
    mutating func stop(at agentTime: Int64) -> Range<Int64>? {
        guard state == .recording else { return nil }
        grid.end(before: grid.index(nearest: agentTime) + 1)
        return grid.isComplete ? close() : nil
    }

    /// Closes the track (its time is up, its stream ended, the agent stops): the indexes still ahead are
    /// gaps. Nil when it was closed already.
    mutating func close() -> Range<Int64>? {
        guard state == .recording else { return nil }
        state = .closed
        return grid.finish()
    }
}

/// Frames waiting between a camera's stream and a track's writer, decided under the recorder's lock: the
/// stream never waits for the disk or an encoder.
struct TrackIntake: Sendable, Equatable {
    enum Admission: Sendable, Equatable {
        /// The track is closed, or `maxQueued` frames already wait: the frame is let go (its index becomes a gap).
        case refuse
        /// Queued as lent by the driver.
        case keep
        /// Queued as a copy: the driver lends only a few buffers, and this one would wait behind others.
        case copy
    }

    let maxQueued: Int
    /// Frames the driver may keep lent while they wait; more are copied.
    let lentFrames: Int
    private(set) var queued = 0
    private(set) var closed = false

    init(maxQueued: Int, lentFrames: Int) {
        self.maxQueued = maxQueued
        self.lentFrames = lentFrames
    }

    mutating func admit() -> Admission {
        guard !closed, queued < maxQueued else { return .refuse }
        queued += 1
        return queued > lentFrames ? .copy : .keep
    }

    /// The writer took a queued frame.
    mutating func taken() {
        queued -= 1
    }

    /// The track closed: nothing more is queued.
    mutating func close() {
        closed = true
    }
}
