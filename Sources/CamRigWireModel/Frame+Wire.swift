import CamRigDeviceModel
import CamRigWire
import NIOCore

// Captured frames in wire messages: what a timestamp marks, capture metadata, video frames and photo results.

extension TimestampMarks {
    /// The mark as the wire spells it.
    public var wire: WireTimestampMarks {
        switch self {
        case .startOfExposure: .startOfExposure
        case .endOfFrame: .endOfFrame
        case .dequeue: .dequeue
        }
    }
}

extension WireTimestampMarks {
    /// The mark's name in manifests and JSON output, e.g. `start_of_exposure` (a frame's marks spelled as
    /// `TimestampMarks.manifestName` spells them).
    public var name: String {
        if let marks = TimestampMarks(self) { return marks.manifestName }
        return self == .triggerFire ? "trigger_fire" : "unspecified"
    }
}

extension WireCaptureMetadata {
    /// The settings a frame was captured with.
    public init(_ metadata: CaptureMetadata) {
        self.init()
        exposureDuration = WireRational(metadata.exposureDuration)
        iso = metadata.iso
        lensPosition = metadata.lensPosition
        whiteBalanceTemperatureKelvin = metadata.whiteBalanceTemperature
        zoomFactor = metadata.zoomFactor
        torchOn = metadata.torchOn
    }
}

extension TimestampMarks {
    /// The mark a wire timestamp names; `nil` for marks a captured frame never has (unspecified, trigger fire).
    public init?(_ wire: WireTimestampMarks) {
        switch wire {
        case .startOfExposure: self = .startOfExposure
        case .endOfFrame: self = .endOfFrame
        case .dequeue: self = .dequeue
        default: return nil
        }
    }
}

extension CaptureMetadata {
    /// The settings a frame's wire metadata names (the inverse of `WireCaptureMetadata(_:)`).
    public init(_ wire: WireCaptureMetadata) {
        self.init(settings: CameraSettings())
        if let duration = wire.exposureDuration.duration { exposureDuration = duration }
        iso = wire.iso
        lensPosition = wire.lensPosition
        whiteBalanceTemperature = wire.whiteBalanceTemperatureKelvin
        zoomFactor = wire.zoomFactor
        torchOn = wire.torchOn
    }
}

extension CapturedFrame {
    /// A frame from its wire header and its pixels (the inverse of `WireVideoFrame(_:streamID:droppedBefore:)`):
    /// its timestamp and what it marks, exposure start and uncertainty, measured frame period and metadata.
    /// The format has no frame rates (a frame does not carry them).
    public init(_ wire: WireVideoFrame, bytes: ByteBuffer) {
        let format = DeviceFormat(
            pixelFormat: PixelFormat(rawValue: wire.pixelFormat), dimensions: wire.dimensions.dimensions, frameRateRanges: [],
            bytesPerLine: wire.bytesPerLine)
        self.init(
            deviceID: wire.deviceID, sequence: wire.sequence, timestamp: wire.timestamp.nanoseconds,
            timestampMarks: TimestampMarks(wire.timestamp.marks) ?? .startOfExposure, format: format, bytes: bytes,
            metadata: CaptureMetadata(wire.metadata), exposureStart: wire.hasExposureStart ? wire.exposureStart.nanoseconds : nil,
            exposureStartUncertainty: Int64(clamping: wire.exposureStart.uncertaintyNs))
        measuredFramePeriod = wire.measuredFramePeriodNs
    }
}

extension WireTimestamp {
    /// An agent `CLOCK_MONOTONIC` reading that marks `marks`.
    public init(agentNanoseconds: Int64, marks: WireTimestampMarks) {
        self.init()
        nanoseconds = agentNanoseconds
        clock = .agentMonotonic
        self.marks = marks
    }
}

extension WireTimestamp {
    /// When `frame`'s first line started exposing, with the uncertainty of that conversion.
    public init(exposureStartOf frame: CapturedFrame) {
        self.init(agentNanoseconds: frame.exposureStart, marks: .startOfExposure)
        uncertaintyNs = UInt64(max(frame.exposureStartUncertainty, 0))
    }
}

extension WireVideoFrame {
    /// The header of a streamed frame (its pixels travel as the frame's payload).
    public init(_ frame: CapturedFrame, streamID: String, droppedBefore: UInt64) {
        self.init()
        self.streamID = streamID
        deviceID = frame.deviceID
        sequence = frame.sequence
        timestamp = WireTimestamp(agentNanoseconds: frame.timestamp, marks: frame.timestampMarks.wire)
        pixelFormat = frame.format.pixelFormat.rawValue
        dimensions = WireDimensions(frame.format.dimensions)
        bytesPerLine = frame.format.bytesPerLine
        self.droppedBefore = droppedBefore
        metadata = WireCaptureMetadata(frame.metadata)
        exposureStart = WireTimestamp(exposureStartOf: frame)
        measuredFramePeriodNs = frame.measuredFramePeriod
    }
}

extension WirePhotoResult {
    /// The description of a photo taken from `frame` (its image is stored beside it).
    public init(_ frame: CapturedFrame, resultID: String, sessionID: String, triggerID: String, photoSettingsID: UInt64) {
        self.init()
        self.resultID = resultID
        self.sessionID = sessionID
        self.triggerID = triggerID
        deviceID = frame.deviceID
        captureTime = WireTimestamp(agentNanoseconds: frame.timestamp, marks: frame.timestampMarks.wire)
        pixelFormat = frame.format.pixelFormat.rawValue
        dimensions = WireDimensions(frame.format.dimensions)
        bytesPerLine = frame.format.bytesPerLine
        self.photoSettingsID = photoSettingsID
        metadata = WireCaptureMetadata(frame.metadata)
        sequence = frame.sequence
        exposureStart = WireTimestamp(exposureStartOf: frame)
    }
}

extension PhotoQualityPrioritization {
    /// The level a request asks for: `BALANCED` when it names none (or one this version does not know).
    public init(_ wire: WireQualityPrioritization) {
        self = PhotoQualityPrioritization(rawValue: wire.rawValue) ?? .balanced
    }
}

extension PhotoOutputType {
    /// The output a request asks for: the frame when it names none this version knows.
    public init(_ wire: WirePhotoOutputType) {
        self = PhotoOutputType(rawValue: wire.rawValue) ?? .frame
    }
}

extension WireQualityPrioritization {
    public init(_ level: PhotoQualityPrioritization) {
        self = WireQualityPrioritization(rawValue: level.rawValue) ?? .balanced
    }
}

extension WireResolvedPhotoSettings {
    /// How a photo was made from `framesMerged` frames to `photo` by `plan`.
    public init(plan: PhotoPlan, photo: CapturedFrame, framesMerged: Int, captureDuration: Int64, processingDuration: Int64) {
        self.init()
        qualityPrioritization = WireQualityPrioritization(plan.level)
        dimensions = WireDimensions(photo.format.dimensions)
        self.framesMerged = UInt32(framesMerged)
        captureDurationNs = captureDuration
        processingDurationNs = processingDuration
        note = plan.note
        outputType = WirePhotoOutputType(rawValue: plan.output.rawValue) ?? .frame
    }
}

extension WireResolvedPhotoSettings {
    /// What a plan will make, announced before its capture (durations not known yet).
    public init(plan: PhotoPlan, dimensions: Dimensions) {
        self.init()
        qualityPrioritization = WireQualityPrioritization(plan.level)
        self.dimensions = WireDimensions(dimensions)
        framesMerged = UInt32(plan.frames)
        note = plan.note
        outputType = WirePhotoOutputType(rawValue: plan.output.rawValue) ?? .frame
    }
}

extension WireTriggerFired {
    /// The report of a firing: when (agent clock, marking the trigger) and how late.
    public init(triggerID: String, fireAt: Int64, firedAt: Int64) {
        self.init()
        self.triggerID = triggerID
        self.firedAt = WireTimestamp(agentNanoseconds: firedAt, marks: .triggerFire)
        latenessNs = firedAt - fireAt
    }
}
