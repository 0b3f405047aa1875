import CamRigDeviceModel
/// How a camera's exposures can be brought onto a time grid (the rig's frames `T₀ + k × period`).
public enum PhaseSteering: Sendable, Hashable {
    /// The camera starts exposing on command (`FrameAlignableBackend`): a trigger at T puts its
    /// exposures on the grid, and nothing needs holding between captures.
    case triggered
    /// A free-running sensor whose frame duration can be changed frame by frame (raw sensors'
    /// `V4L2_CID_VBLANK`): single frames are lengthened or shortened until its exposures start on the grid.
    case frameDuration(FrameDurationControl)
    /// A free-running camera without such a control (a plain UVC webcam): only restarting its stream at a
    /// chosen instant moves its phase.
    case restart
}

/// A sensor's frame duration in lines: `duration = lines × lineDuration`, with
/// `lines = active height + vertical blanking` and `lineDuration = line length / pixel rate`.
public struct FrameDurationControl: Sendable, Hashable {
    /// One line (active width + horizontal blanking) at the pixel rate, in nanoseconds of the sensor's clock.
    public var lineDuration: Double
    /// Lines per frame now in force.
    public var lines: Int64
    /// Fewest lines a frame may have (active height + the smallest vertical blanking).
    public var minimumLines: Int64
    /// Most lines a frame may have.
    public var maximumLines: Int64
    /// How long after lines are set they can first shape a frame, in nanoseconds: 0 for VBLANK (the next
    /// frame to start has them); for libcamera's per-request FrameDurationLimits, the requests already
    /// queued ahead of the one that carries them.
    public var actuationDelay: Int64

    /// A control with these figures.
    public init(lineDuration: Double, lines: Int64, minimumLines: Int64, maximumLines: Int64, actuationDelay: Int64 = 0) {
        self.lineDuration = lineDuration
        self.lines = lines
        self.minimumLines = minimumLines
        self.maximumLines = maximumLines
        self.actuationDelay = actuationDelay
    }

    /// The frame duration now in force, in nanoseconds.
    public var frameDuration: Double { Double(lines) * lineDuration }
}

/// A camera that runs on its own oscillator once streaming (V4L2 sensors and webcams), and what can
/// move its phase.
public protocol FreeRunningBackend: CameraBackend {
    /// The frame-duration control of the active format, or `nil` when the camera has none.
    func frameDurationControl() throws(DeviceError) -> FrameDurationControl?
    /// Sets the lines of the frames that start from now on (a single frame's duration when changed
    /// again one frame later).
    func setFrameLines(_ lines: Int64) throws(DeviceError)
    /// Stops the running stream and starts it again at `monotonic` (`CLOCK_MONOTONIC`, nanoseconds);
    /// frames keep going to the same sink, their sequence numbers continuing.
    func restartStream(atMonotonic monotonic: Int64) throws(DeviceError)
}

/// Measures a camera's frame period from its exposure starts: the mean interval per sequence step
/// over recent frames, restarted whenever the stream restarts.
public struct FramePeriodMeter: Sendable {
    /// Weight of a new interval in the running mean.
    public var smoothing: Double
    private var last: (sequence: UInt64, exposureStart: Int64, streamStart: Int64)?
    private var samples = 0
    /// The measured period, in nanoseconds of the clock the exposure starts are on (0 until measured).
    public private(set) var period: Double = 0

    /// A meter whose running mean gives a new interval `smoothing` of the weight.
    public init(smoothing: Double = 1.0 / 32) {
        self.smoothing = smoothing
    }

    /// Takes one frame and returns the period measured so far (0 until two frames of one stream run).
    public mutating func observe(sequence: UInt64, exposureStart: Int64, streamStart: Int64) -> Double {
        defer { last = (sequence, exposureStart, streamStart) }
        guard let last, last.streamStart == streamStart, sequence > last.sequence else { return period }
        let interval = Double(exposureStart - last.exposureStart) / Double(sequence - last.sequence)
        guard interval > 0 else { return period }
        samples += 1
        // The first intervals weigh more, so the mean settles within a few frames.
        let weight = max(smoothing, 1 / Double(samples))
        period += weight * (interval - period)
        return period
    }
}
