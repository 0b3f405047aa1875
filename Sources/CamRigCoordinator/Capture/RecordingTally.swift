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
    /// Each camera's first and last frame within the recording (coordinator clock).
    private var spans: [(first: Int64, last: Int64)?]

    /// - Parameter grid: the rig's frame grid when the cameras are phase-locked: sets are then matched by
    ///   grid index.
    init(cameraCount: Int, framePeriod: Int64, closeSetsAfter: Int64, grid: PhaseGrid? = nil) {
        matcher = SyncSetMatcher(
            configuration: .init(cameraCount: cameraCount, framePeriod: framePeriod, closeAfter: closeSetsAfter, grid: grid))
        streams = Array(repeating: ManifestBuilder.StreamCounts(), count: cameraCount)
        spans = Array(repeating: nil, count: cameraCount)
    }

    /// Frames delivered so far, per camera.
    var delivered: [Int] { streams.map(\.delivered) }

    mutating func record(_ event: RecordingEvent<Payload>) {
        switch event {
        case .frame(let frame):
            streams[frame.camera].delivered += 1
            let span = spans[frame.camera]
            spans[frame.camera] = (min(span?.first ?? frame.timestamp, frame.timestamp), max(span?.last ?? frame.timestamp, frame.timestamp))
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

    /// Closes every set still open and counts, per camera, the frames of `recording` it neither
    /// delivered nor reported dropped; call once every stream has ended.
    ///
    /// A camera on the rig's grid (`onGrid`, by camera) owes every frame of the span (`framesPerCamera`).
    /// A free-running one owes one fewer, as its phase may put its last frame past the end, and a fifth
    /// of a percent fewer again, as its own clock may run that much slow against the coordinator's. What it owes beyond what it
    /// delivered and reported dropped is missing, and said so: a stream that began late or ended early
    /// without a word is a recording that fell short, never one that looks complete.
    mutating func finish(_ recording: CapturePlan.Recording, onGrid: [Bool]) {
        take(matcher.finishAll())
        for camera in streams.indices {
            let locked = onGrid.indices.contains(camera) && onGrid[camera]
            let owed = max(0, recording.framesPerCamera - (locked ? 0 : 1 + recording.framesPerCamera / 500))
            let missing = owed - streams[camera].delivered - streams[camera].dropped
            guard missing > 0 else { continue }
            streams[camera].missing = missing
            guard streams[camera].failure == nil else { continue }
            guard let span = spans[camera] else {
                streams[camera].failure = "delivered none of the recording's \(recording.framesPerCamera) frames and reported none dropped"
                continue
            }
            let late = Self.milliseconds(span.first - recording.start)
            let early = Self.milliseconds(recording.lastFrameDue - span.last)
            streams[camera].failure =
                "\(missing) of the recording's \(recording.framesPerCamera) frames neither delivered nor reported dropped: "
                + "its first frame was exposed \(late) ms after the recording's start, its last \(early) ms before its last frame was due"
        }
    }

    private static func milliseconds(_ nanoseconds: Int64) -> String {
        String(format: "%.0f", Double(max(0, nanoseconds)) / 1e6)
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
