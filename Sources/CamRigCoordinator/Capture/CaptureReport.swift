import CamRigCapture
import Foundation

/// What a finished capture produced: its manifest (also stored by the sink) and where.
public struct CaptureReport: Sendable {
    public var manifest: CaptureManifest
    /// Where the sink put the capture (its directory, for `CaptureStore`).
    public var directory: URL
    /// How long the phases took (photos only), counted from the plan: every agent's trigger handed to
    /// its socket; every agent's trigger accepted (its reply read); and the sync set stored, counted
    /// from the trigger instant T.
    public var triggersSent: Duration?
    /// CPU time the coordinator's event loops spent writing the triggers (photos only).
    public var triggerWritingCPU: Duration?
    public var triggerFanOut: Duration?
    public var gatheredAfterTrigger: Duration?

    public init(
        manifest: CaptureManifest, directory: URL, triggersSent: Duration? = nil, triggerWritingCPU: Duration? = nil,
        triggerFanOut: Duration? = nil, gatheredAfterTrigger: Duration? = nil
    ) {
        self.manifest = manifest
        self.triggersSent = triggersSent
        self.triggerWritingCPU = triggerWritingCPU
        self.directory = directory
        self.triggerFanOut = triggerFanOut
        self.gatheredAfterTrigger = gatheredAfterTrigger
    }
}

/// Progress of a recording, reported about twice a second.
public struct RecordingProgress: Sendable {
    public var elapsed: Duration
    public var duration: Duration
    public var framesPerCamera: [Int]
    public var sets: Int
    /// After the recording: image files written so far, of how many.
    public var imagesWritten = 0
    public var imagesTotal = 0
    /// On-host recordings, after the recording: bytes of the files offloaded so far, of how many.
    public var offloadedBytes: UInt64 = 0
    public var offloadTotalBytes: UInt64 = 0

    public init(
        elapsed: Duration, duration: Duration, framesPerCamera: [Int], sets: Int, imagesWritten: Int = 0,
        imagesTotal: Int = 0, offloadedBytes: UInt64 = 0, offloadTotalBytes: UInt64 = 0
    ) {
        self.offloadedBytes = offloadedBytes
        self.offloadTotalBytes = offloadTotalBytes
        self.elapsed = elapsed
        self.duration = duration
        self.framesPerCamera = framesPerCamera
        self.sets = sets
        self.imagesWritten = imagesWritten
        self.imagesTotal = imagesTotal
    }
}
