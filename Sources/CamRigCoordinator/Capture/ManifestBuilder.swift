import CamRigCapture
import CamRigDeviceModel

/// A frame of a capture once stored: what the manifest says about it besides its place in a set.
public struct StoredFrame: Sendable, Hashable {
    /// Relative to the capture.
    public var file: String
    /// Exposure time on the agent's clock.
    public var agentTimestamp: Int64
    /// What the agent's stamp marks (`start_of_exposure`, `end_of_frame`, `dequeue`, …).
    public var marks: String
    /// For triggered photos: how late the agent fired, on its clock.
    public var lateness: Int64?
    /// For photos: how the agent made it.
    public var photo: CaptureManifest.Photo?
    /// The SHA-256 of `file`, where the store checked it.
    public var sha256: String?

    public init(file: String, agentTimestamp: Int64, marks: String, lateness: Int64? = nil, photo: CaptureManifest.Photo? = nil, sha256: String? = nil) {
        self.sha256 = sha256
        self.file = file
        self.agentTimestamp = agentTimestamp
        self.marks = marks
        self.lateness = lateness
        self.photo = photo
    }
}

extension SyncFrame where Payload == StoredFrame {
    /// A frame as a manifest listed it, to build a manifest again.
    init(_ frame: CaptureManifest.Frame) {
        self.init(
            camera: frame.camera, sequence: frame.sequence, timestamp: frame.timestampNs, uncertainty: frame.uncertaintyNs,
            payload: StoredFrame(
                file: frame.file, agentTimestamp: frame.agentTimestampNs, marks: frame.marks, lateness: frame.latenessNs, photo: frame.photo,
                sha256: frame.sha256))
    }
}

/// Builds a capture's manifest from what the capture observed. Pure: no clock, no files.
public struct ManifestBuilder: Sendable {
    public var id: String
    public var kind: CaptureKind
    /// ISO 8601, UTC.
    public var created: String
    public var sessionID: String
    /// Every camera as it stood before the capture; the builder fills in what each delivered, dropped
    /// and why it fell short.
    public var cameras: [CaptureManifest.Camera]

    public init(id: String, kind: CaptureKind, created: String, sessionID: String, cameras: [CaptureManifest.Camera]) {
        self.id = id
        self.kind = kind
        self.created = created
        self.sessionID = sessionID
        self.cameras = cameras
    }

    /// What one camera's stream delivered during a recording.
    public struct StreamCounts: Sendable, Hashable {
        /// Frames delivered within the recording (in sets or unmatched).
        public var delivered = 0
        /// Frames the agent or the camera reported dropped (never delivered).
        public var dropped = 0
        /// Frames delivered but exposed after the recording's end (not stored).
        public var afterEnd = 0
        /// Frames of the recording's span the stream neither delivered nor reported dropped: it began
        /// late or ended early.
        public var missing = 0
        /// Why the stream ended early, or fell short, if it did.
        public var failure: String?

        public init(delivered: Int = 0, dropped: Int = 0, afterEnd: Int = 0, missing: Int = 0, failure: String? = nil) {
            self.delivered = delivered
            self.dropped = dropped
            self.afterEnd = afterEnd
            self.missing = missing
            self.failure = failure
        }
    }

    /// A photo: at most one frame per camera (indexed by camera), all fired at `fireAt`, which is the
    /// set's reference time (and its grid instant when `onGrid`, the cameras being phase-locked). A camera
    /// without a frame gets its entry in `failures` as its error.
    public func photo(_ frames: [SyncFrame<StoredFrame>?], fireAt: Int64, onGrid: Bool = false, failures: [Int: String]) -> CaptureManifest {
        let present = frames.compactMap { $0 }
        let times = present.map(\.timestamp)
        let set = CaptureManifest.SyncSet(
            index: 0,
            complete: present.count == cameras.count,
            referenceTimeNs: fireAt,
            skewNs: (times.max() ?? 0) - (times.min() ?? 0),
            missingCameras: cameras.indices.filter { !frames.indices.contains($0) || frames[$0] == nil },
            frames: present.map { Self.entry($0) },
            gridInstantNs: onGrid ? fireAt : nil
        )
        var cameras = cameras
        for index in cameras.indices {
            let delivered = frames.indices.contains(index) && frames[index] != nil
            cameras[index].framesDelivered = delivered ? 1 : 0
            if !delivered { cameras[index].error = failures[index] ?? "no photo in the agent's results" }
        }
        return CaptureManifest(
            id: id,
            kind: kind.rawValue,
            created: created,
            sessionId: sessionID,
            cameras: cameras,
            sets: [set],
            unmatched: [],
            summary: CaptureManifest.Summary(
                sets: [set], framesDelivered: present.count, droppedFrames: 0, unmatchedFrames: 0)
        )
    }

    /// A recording: its sync sets in time order, the frames in no set with why, and each camera's
    /// stream counts (indexed by camera); `grid` is the frame grid the sets were matched on, if any.
    public func recording(
        frameDuration: FrameDuration,
        grid: PhaseGrid? = nil,
        sets: [SyncSet<StoredFrame>],
        unmatched: [(frame: SyncFrame<StoredFrame>, reason: String)],
        streams: [StreamCounts]
    ) -> CaptureManifest {
        let manifestSets = sets.enumerated().map { number, set in
            CaptureManifest.SyncSet(
                index: number,
                complete: set.isComplete,
                referenceTimeNs: set.referenceTime,
                skewNs: set.skew,
                missingCameras: set.missingCameras,
                frames: set.presentFrames.map { Self.entry($0) },
                gridInstantNs: set.gridIndex.flatMap { index in grid?.instant(index) }
            )
        }
        let manifestUnmatched = unmatched.map { Self.entry($0.frame, reason: $0.reason) }
        var cameras = cameras
        for index in cameras.indices {
            let counts = streams.indices.contains(index) ? streams[index] : StreamCounts()
            cameras[index].framesDelivered = counts.delivered
            cameras[index].framesDropped = counts.dropped
            cameras[index].framesUnmatched = manifestUnmatched.filter { $0.camera == index }.count
            cameras[index].framesAfterEnd = counts.afterEnd
            cameras[index].framesLost = counts.missing > 0 ? counts.missing : nil
            cameras[index].error = counts.failure
        }
        return CaptureManifest(
            id: id,
            kind: kind.rawValue,
            created: created,
            sessionId: sessionID,
            framesPerSecond: frameDuration.frameRate,
            frameDuration: .init(numerator: frameDuration.numerator, denominator: frameDuration.denominator),
            cameras: cameras,
            sets: manifestSets,
            unmatched: manifestUnmatched,
            summary: CaptureManifest.Summary(
                sets: manifestSets,
                framesDelivered: streams.map(\.delivered).reduce(0, +),
                droppedFrames: streams.map(\.dropped).reduce(0, +),
                unmatchedFrames: manifestUnmatched.count
            )
        )
    }

    static func entry(_ frame: SyncFrame<StoredFrame>, reason: String? = nil) -> CaptureManifest.Frame {
        var entry = CaptureManifest.Frame(
            camera: frame.camera,
            sequence: frame.sequence,
            file: frame.payload.file,
            timestampNs: frame.timestamp,
            agentTimestampNs: frame.payload.agentTimestamp,
            marks: frame.payload.marks,
            uncertaintyNs: frame.uncertainty,
            latenessNs: frame.payload.lateness,
            reason: reason,
            photo: frame.payload.photo
        )
        entry.sha256 = frame.payload.sha256
        return entry
    }
}
