import CamRigDeviceModel

/// What one camera's stream tells the recording, in the order it happened.
enum RecordingEvent<Payload: Sendable>: Sendable {
    /// A frame exposed within the recording.
    case frame(SyncFrame<Payload>)
    /// Frames the camera or the agent dropped (never delivered).
    case dropped(camera: Int, count: Int)
    /// A frame exposed after the recording's end: counted, not recorded.
    case afterEnd(camera: Int)
    /// The camera's stream is over; `failure` says why when it ended early.
    case ended(camera: Int, failure: String?)
}

/// A recording's sync sets and per-camera counts, built up from its streams' events. Pure: events in,
/// sets out through `SyncSetMatcher`.
struct RecordingTally<Payload: Sendable>: Sendable {
    private var matcher: SyncSetMatcher<Payload>
    private(set) var sets: [SyncSet<Payload>] = []
    private(set) var unmatched: [(frame: SyncFrame<Payload>, reason: String)] = []
    private(set) var streams: [ManifestBuilder.StreamCounts]

    /// - Parameter grid: the rig's frame grid when the cameras are phase-locked: sets are then matched by
    ///   grid index.
    init(cameraCount: Int, framePeriod: Int64, closeSetsAfter: Int64, grid: PhaseGrid? = nil) {
        matcher = SyncSetMatcher(
            configuration: .init(cameraCount: cameraCount, framePeriod: framePeriod, closeAfter: closeSetsAfter, grid: grid))
        streams = Array(repeating: ManifestBuilder.StreamCounts(), count: cameraCount)
    }

    /// Frames delivered so far, per camera.
    var delivered: [Int] { streams.map(\.delivered) }

    mutating func record(_ event: RecordingEvent<Payload>) {
        switch event {
        case .frame(let frame):
            streams[frame.camera].delivered += 1
            take(matcher.add(frame))
        case .dropped(let camera, let count):
            streams[camera].dropped += count
        case .afterEnd(let camera):
            streams[camera].afterEnd += 1
        case .ended(let camera, let failure):
            if let failure { streams[camera].failure = failure }
            take(matcher.finish(camera: camera))
        }
    }

    /// Closes every set still open; call once every stream has ended.
    mutating func finish() {
        take(matcher.finishAll())
    }

    /// Every frame's payload, in sets (in set order) then unmatched.
    var payloads: [Payload] {
        sets.flatMap(\.presentFrames).map(\.payload) + unmatched.map(\.frame.payload)
    }

    /// The sets and unmatched frames with each payload replaced.
    func mapPayloads<Other: Sendable>(
        _ transform: (Payload) -> Other
    ) -> (sets: [SyncSet<Other>], unmatched: [(frame: SyncFrame<Other>, reason: String)]) {
        (
            sets.map { $0.mapPayload(transform) },
            unmatched.map { (frame: $0.frame.mapPayload(transform), reason: $0.reason) }
        )
    }

    private mutating func take(_ outputs: [SyncMatcherOutput<Payload>]) {
        for output in outputs {
            switch output {
            case .set(let set): sets.append(set)
            case .unmatched(let frame, let reason): unmatched.append((frame, reason))
            }
        }
    }
}

extension SyncFrame {
    /// The same frame with another payload.
    func mapPayload<Other: Sendable>(_ transform: (Payload) -> Other) -> SyncFrame<Other> {
        SyncFrame<Other>(
            camera: camera, sequence: sequence, timestamp: timestamp, uncertainty: uncertainty,
            payload: transform(payload))
    }
}

extension SyncSet {
    /// The same set with every frame's payload replaced.
    func mapPayload<Other: Sendable>(_ transform: (Payload) -> Other) -> SyncSet<Other> {
        SyncSet<Other>(
            index: index,
            frames: frames.map { $0?.mapPayload(transform) },
            isComplete: isComplete,
            missingCameras: missingCameras,
            referenceTime: referenceTime,
            skew: skew,
            gridIndex: gridIndex
        )
    }
}
