import CamRigDeviceModel
/// Aligns a free-running camera without a frame-duration control by restarting its stream at chosen
/// instants: a pure state machine. Each restart measures the camera's start-up delay (first exposure
/// start minus when STREAMON really happened); the next restart is timed with the mean delay so that the first
/// exposure lands on a grid instant. After `maximumAttempts` restarts it reports what remains.
public struct RestartAligner: Sendable {
    /// What the aligner asks of the camera.
    public enum Action: Sendable, Equatable {
        /// Restart the stream at this host instant.
        case restart(at: Int64)
    }

    /// Where the alignment stands.
    public enum Outcome: Sendable, Equatable {
        /// Waiting for the first frame of a restart.
        case measuring
        /// The first exposure landed within tolerance.
        case aligned(error: Double)
        /// Attempts used up; this much phase error remains.
        case gaveUp(error: Double)
    }

    /// The grid the camera is aligned to (host clock).
    public var grid: PhaseGrid
    /// |phase error| within which a restart counts as aligned, in nanoseconds.
    public var tolerance: Double
    /// Restarts tried per alignment before giving up.
    public var maximumAttempts: Int
    /// How far ahead of now a restart is scheduled, beyond the expected start-up delay.
    public var lead: Int64

    /// Consecutive frames beyond the tolerance before an aligned camera is aligned again, so that
    /// timestamp jitter on single frames does not restart it.
    public var framesToRealign = 8

    /// Restarts made in the current alignment.
    public private(set) var attempts = 0
    private var framesOffGrid = 0
    /// The phase error when the last alignment gave up.
    private var errorWhenGivenUp: Double = 0
    /// The alignment's state.
    public private(set) var outcome = Outcome.measuring
    /// Start-up delays measured so far, in nanoseconds.
    public private(set) var delays: [Double] = []
    private var pending: (restartAt: Int64, previousStreamStart: Int64)?

    /// An aligner for `grid`, restarting at most `maximumAttempts` times, each `lead` ahead of now.
    public init(grid: PhaseGrid, tolerance: Double, maximumAttempts: Int = 8, lead: Int64 = 50_000_000) {
        self.grid = grid
        self.tolerance = tolerance
        self.maximumAttempts = maximumAttempts
        self.lead = lead
    }

    /// The delay the next restart is timed with: the mean of those measured.
    public var expectedDelay: Double { delays.isEmpty ? 0 : delays.reduce(0, +) / Double(delays.count) }

    /// Takes a frame: its exposure start and the start of the run it belongs to (host clock), seen at
    /// `now`. `mayRestart` is false while a restart would interrupt someone (a recording).
    public mutating func observe(exposureStart: Int64, streamStart: Int64, now: Int64, mayRestart: Bool) -> Action? {
        if let pending {
            // Frames of the run before the restart are still arriving.
            guard streamStart != pending.previousStreamStart else { return nil }
            self.pending = nil
            // The delay from when streaming really restarted (the run's start as the camera recorded it):
            // a restart carried out late must not make the next one aim late too.
            delays.append(Double(exposureStart - streamStart))
            let error = grid.error(of: exposureStart)
            if abs(error) <= tolerance {
                outcome = .aligned(error: error)
                return nil
            }
            if attempts >= maximumAttempts { errorWhenGivenUp = error }
            outcome = attempts >= maximumAttempts ? .gaveUp(error: error) : .measuring
        } else {
            let error = grid.error(of: exposureStart)
            switch outcome {
            case .measuring where abs(error) <= tolerance:
                outcome = .aligned(error: error)
                return nil
            case .aligned, .gaveUp:
                // Aligned and now off the grid, or given up and now further off than the last alignment
                // left it (so the error stays bounded rather than growing with the camera's rate error):
                // align again once that has held for `framesToRealign` frames.
                let gaveUp = if case .gaveUp = outcome { true } else { false }
                let drifted = gaveUp ? abs(error) > abs(errorWhenGivenUp) + tolerance : abs(error) > tolerance
                framesOffGrid = drifted ? framesOffGrid + 1 : 0
                guard drifted, framesOffGrid >= framesToRealign else {
                    outcome = gaveUp ? .gaveUp(error: error) : .aligned(error: error)
                    return nil
                }
                framesOffGrid = 0
                attempts = 0
                outcome = .measuring
            default:
                break
            }
        }
        guard mayRestart, attempts < maximumAttempts else {
            if attempts >= maximumAttempts {
                errorWhenGivenUp = grid.error(of: exposureStart)
                outcome = .gaveUp(error: errorWhenGivenUp)
            }
            return nil
        }
        attempts += 1
        let delay = Int64(expectedDelay.rounded())
        let target = grid.next(atOrAfter: now + lead + max(delay, 0))
        let restartAt = target - delay
        pending = (restartAt, streamStart)
        return .restart(at: restartAt)
    }

    /// The restart asked for could not be carried out: the next frame of the running stream is measured
    /// as if none had been asked for (the attempt still counts, so a camera that cannot be restarted
    /// gives up).
    public mutating func restartFailed() {
        pending = nil
    }

    /// A refreshed grid (the clock estimate moved): frames are judged against it from now on, keeping the
    /// delays measured; a camera already aligned restarts only if it is now off the new grid.
    public mutating func setGrid(_ grid: PhaseGrid) {
        self.grid = grid
    }
}
