import CamRigDeviceModel
/// Holds a free-running sensor on a frame grid by changing single frames' durations (rpicam's
/// software sync and libsoftwaresync do the same): a pure control loop, fed each frame's exposure
/// start, answering with the lines to set.
///
/// The sensor's frame duration is `lines × line duration`; a lines value set now applies to the first
/// frame that starts after it is set (as `V4L2_CID_VBLANK` does), or after the control's actuation delay
/// (libcamera's FrameDurationLimits ride on the next request queued), so the loop predicts, from the lines
/// in force, when the next frame starts and chooses the lines of the first frame it can still change
/// so that the phase error shrinks by `gain` per frame. The line duration on the host clock (sensor
/// crystal and host clock together, ±100 ppm of nominal) is learnt from how far each frame's start
/// missed its prediction, which absorbs the rate error continuously during long recordings.
public struct FrameDurationLoop: Sendable {
    /// The loop's gains and limits.
    public struct Configuration: Sendable {
        /// Fraction of the predicted phase error corrected per frame while pulling onto the grid.
        public var lockingGain = 0.7
        /// The same once locked (smaller: timestamp jitter is not chased).
        public var lockedGain = 0.3
        /// How much of a prediction miss goes into the line-duration estimate.
        public var rateGain = 0.02
        /// Largest change of one frame's duration while pulling, as a fraction of the period.
        public var maximumLockingStep = 0.45
        /// The same once locked.
        public var maximumLockedStep = 0.05
        /// A lines value must be set this long before the frame it is meant for starts, in nanoseconds.
        public var actuationMargin: Int64 = 2_000_000

        /// The defaults, tuned on the emulated sensor with 20 µs of timestamp jitter.
        public init() {}
    }

    /// Gains and limits.
    public var configuration: Configuration
    /// The grid the sensor is held on (host clock).
    public private(set) var grid: PhaseGrid
    /// The sensor's control as read when the loop started: nominal line duration, lines and their limits.
    public let control: FrameDurationControl
    /// The line duration on the host clock, as learnt.
    public private(set) var lineDuration: Double
    /// Lines set and when (host clock), newest last; the lines a frame has are the last set before it started.
    private var writes: [(at: Int64, lines: Int64)] = []
    private var last: (sequence: UInt64, start: Int64, lines: Int64)?

    /// A loop holding the sensor described by `control` on `grid`.
    public init(grid: PhaseGrid, control: FrameDurationControl, configuration: Configuration = Configuration()) {
        self.grid = grid
        self.control = control
        self.configuration = configuration
        lineDuration = control.lineDuration
    }

    /// The lines that make one grid period at the learnt line duration.
    public var nominalLines: Int64 { Int64((grid.period / lineDuration).rounded()) }

    /// The sensor's rate error on the host clock, in ppm: positive when its lines run long.
    public var rateErrorPPM: Double { (lineDuration / control.lineDuration - 1) * 1e6 }

    /// A new grid (a refreshed clock estimate): the loop keeps what it learnt about the sensor.
    public mutating func setGrid(_ grid: PhaseGrid) {
        self.grid = grid
    }

    /// Records that `lines` were set at host time `at` (in force from `at` plus the control's actuation delay).
    public mutating func didSet(lines: Int64, at: Int64) {
        writes.append((at + control.actuationDelay, lines))
        if writes.count > 16 { writes.removeFirst(writes.count - 16) }
    }

    /// The lines in force for a frame starting at `start`.
    func lines(forFrameStartingAt start: Int64) -> Int64 {
        writes.last(where: { $0.at < start })?.lines ?? control.lines
    }

    /// Takes a frame (its sequence number and exposure start, host clock) seen at host time `now`;
    /// returns the lines to set now, or `nil` to leave them. `locked` selects the gentler gain.
    public mutating func observe(sequence: UInt64, exposureStart start: Int64, now: Int64, locked: Bool) -> Int64? {
        let linesNow = lines(forFrameStartingAt: start)
        if let last, sequence == last.sequence + 1 {
            // How far the start missed its prediction tells how long a line really is.
            let predicted = Double(last.lines) * lineDuration
            let miss = Double(start - last.start) - predicted
            if abs(miss) < grid.period * 0.1 {
                lineDuration += configuration.rateGain * miss / Double(last.lines)
                let nominal = control.lineDuration
                lineDuration = min(max(lineDuration, nominal * 0.999), nominal * 1.001)
            }
        }
        last = (sequence, start, linesNow)

        // Walk forward to the first frame whose lines can still be set.
        let earliest = now + configuration.actuationMargin + control.actuationDelay
        var frameStart = start
        var frameLines = linesNow
        var nextStart = frameStart + Int64((Double(frameLines) * lineDuration).rounded())
        var steps = 0
        let maximumSteps = 4 + Int(Double(control.actuationDelay) / grid.period)
        while nextStart <= earliest && steps < maximumSteps {
            frameStart = nextStart
            frameLines = lines(forFrameStartingAt: frameStart + 1)
            nextStart = frameStart + Int64((Double(frameLines) * lineDuration).rounded())
            steps += 1
        }
        // `nextStart` is the start of the frame whose duration we now choose; land the one after it
        // closer to the grid.
        let error = grid.error(of: nextStart)
        let gain = locked ? configuration.lockedGain : configuration.lockingGain
        let maximumStep = (locked ? configuration.maximumLockedStep : configuration.maximumLockingStep) * grid.period
        let correction = min(max(-gain * error, -maximumStep), maximumStep)
        let wanted = Int64(((grid.period + correction) / lineDuration).rounded())
        let chosen = min(max(wanted, control.minimumLines), control.maximumLines)
        return chosen == lines(forFrameStartingAt: earliest) ? nil : chosen
    }
}
