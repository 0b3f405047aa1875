import NIOCore

/// What a frame's timestamp marks.
public enum TimestampMarks: String, Hashable, Sendable {
    /// The driver stamped the start of exposure.
    case startOfExposure = "start-of-exposure"
    /// The driver stamped the end of frame readout.
    case endOfFrame = "end-of-frame"
    /// No driver stamp: the host read its clock when it dequeued the buffer.
    case dequeue
}

/// Settings in force when a frame was exposed.
public struct CaptureMetadata: Hashable, Sendable {
    public var exposureDuration: FrameDuration
    public var iso: Float
    public var lensPosition: Float
    public var whiteBalanceTemperature: Float
    public var zoomFactor: Double
    public var torchOn: Bool

    public init(settings: CameraSettings, zoomFactor: Double? = nil) {
        exposureDuration = settings.exposureDuration
        iso = settings.iso
        lensPosition = settings.lensPosition
        whiteBalanceTemperature = settings.whiteBalanceTemperature
        self.zoomFactor = zoomFactor ?? settings.zoomFactor
        torchOn = settings.torchMode == .on
    }
}

/// One image from a streaming device.
public struct CapturedFrame: Sendable {
    public var deviceID: String
    /// The device's sequence number; a gap means frames the device dropped.
    public var sequence: UInt64
    /// On the host's clock (`CLOCK_MONOTONIC`, or the skewed clock of a simulated host), in nanoseconds.
    public var timestamp: Int64
    public var timestampMarks: TimestampMarks
    public var format: DeviceFormat
    /// The image, laid out as `format` says.
    public var bytes: ByteBuffer
    public var metadata: CaptureMetadata
    /// When the frame's first line started exposing, on the same clock as `timestamp`: the timestamp
    /// itself for start-of-exposure stamps, the stamp minus exposure and readout for end-of-frame ones.
    public var exposureStart: Int64
    /// Half-width of the interval `exposureStart` lies in (timestamp jitter, unknown exposure or
    /// readout time), in nanoseconds.
    public var exposureStartUncertainty: Int64
    /// The camera's frame period measured from recent exposure starts, on the host clock, in
    /// nanoseconds; 0 until known.
    public var measuredFramePeriod: Double = 0
    /// When the run of frames this one belongs to started streaming (host clock); it changes when a
    /// free-running camera's stream is restarted to move its phase.
    public var streamStart: Int64 = 0
    /// Rows at the top of the image that carry data about the frame rather than the picture (a sensor's
    /// embedded data lines; the synthetic camera's header and bar code); photo processing copies them
    /// from the reference frame unchanged.
    public var embeddedDataRows: Int = 0

    public init(
        deviceID: String,
        sequence: UInt64,
        timestamp: Int64,
        timestampMarks: TimestampMarks,
        format: DeviceFormat,
        bytes: ByteBuffer,
        metadata: CaptureMetadata,
        exposureStart: Int64? = nil,
        exposureStartUncertainty: Int64 = 0
    ) {
        self.deviceID = deviceID
        self.sequence = sequence
        self.timestamp = timestamp
        self.timestampMarks = timestampMarks
        self.format = format
        self.bytes = bytes
        self.metadata = metadata
        self.exposureStart = exposureStart ?? timestamp
        self.exposureStartUncertainty = exposureStartUncertainty
    }
}
