import CamRigDeviceModel

/// One delivered frame as the sync-set matcher sees it.
public struct SyncFrame<Payload: Sendable>: Sendable {
    /// The camera's index in the rig, `0..<cameraCount`.
    public var camera: Int
    /// The camera's frame counter; a gap means frames were dropped.
    public var sequence: UInt64
    /// Exposure time on the coordinator's clock, in nanoseconds.
    public var timestamp: Int64
    /// Uncertainty of `timestamp`, in nanoseconds.
    public var uncertainty: Int64
    /// Opaque to the matcher (for example where the frame was saved).
    public var payload: Payload

    public init(camera: Int, sequence: UInt64, timestamp: Int64, uncertainty: Int64, payload: Payload) {
        self.camera = camera
        self.sequence = sequence
        self.timestamp = timestamp
        self.uncertainty = uncertainty
        self.payload = payload
    }
}

extension SyncFrame: Equatable where Payload: Equatable {}

/// Frames from different cameras taken at the same instant: at most one per camera.
public struct SyncSet<Payload: Sendable>: Sendable {
    /// 0, 1, 2, … in emission order, which is also time order.
    public var index: Int
    /// Indexed by camera; `nil` where that camera has no frame in the set.
    public var frames: [SyncFrame<Payload>?]
    /// Every camera contributed a frame.
    public var isComplete: Bool
    /// Cameras without a frame in the set, ascending.
    public var missingCameras: [Int]
    /// Median of the present timestamps (the mean of the middle two for an even count).
    public var referenceTime: Int64
    /// Latest minus earliest present timestamp; 0 for a single frame.
    public var skew: Int64
    /// The rig's frame grid instant the set belongs to (`grid.instant(gridIndex)`), when the cameras were
    /// phase-locked and the matcher matched by grid index.
    public var gridIndex: Int64?

    public init(
        index: Int,
        frames: [SyncFrame<Payload>?],
        isComplete: Bool,
        missingCameras: [Int],
        referenceTime: Int64,
        skew: Int64,
        gridIndex: Int64? = nil
    ) {
        self.index = index
        self.frames = frames
        self.isComplete = isComplete
        self.missingCameras = missingCameras
        self.referenceTime = referenceTime
        self.skew = skew
        self.gridIndex = gridIndex
    }

    /// The frames that are present, in camera order.
    public var presentFrames: [SyncFrame<Payload>] { frames.compactMap { $0 } }
}

extension SyncSet: Equatable where Payload: Equatable {}

/// What the matcher hands back: a closed set, or a frame that could not be placed in one.
public enum SyncMatcherOutput<Payload: Sendable>: Sendable {
    case set(SyncSet<Payload>)
    case unmatched(SyncFrame<Payload>, reason: String)
}

extension SyncMatcherOutput: Equatable where Payload: Equatable {}

/// Groups frames from cameras running at one nominal period into sync sets, one frame per camera per set.
///
/// With a frame grid (phase-locked cameras, `Configuration.grid`) a set is one grid instant: its window is
/// the half period on either side of the grid instant nearest the anchor, so frames are matched by grid
/// index and every set says which (`SyncSet.gridIndex`). Without one, the window starts at the anchor.
///
/// Frames wait in one FIFO queue per camera. The earliest pending frame is the anchor of the next set,
/// whose window is `anchor ... anchor + tolerance`. The set is decided as soon as no camera can still
/// add a frame to that window: each camera has a pending frame in it, has already delivered a frame past
/// it, or has finished; or the newest time seen (a frame, or `advance(to:)`) is more than `closeAfter`
/// past the anchor. From each camera's frames in the window it takes one, choosing the combination with
/// the smallest span. Every frame comes back exactly once: in a set, or as `.unmatched` with a reason.
/// Sets come back in time order and only pending frames are kept.
public struct SyncSetMatcher<Payload: Sendable>: Sendable {
    public struct Configuration: Sendable {
        /// Number of cameras; frames carry a camera index in `0..<cameraCount`.
        public var cameraCount: Int
        /// Nominal frame period, in nanoseconds.
        public var framePeriod: Int64
        /// How far after a set's anchor (its earliest frame) another frame may lie and still join it.
        /// Must be below `framePeriod`; the default is half of it.
        public var tolerance: Int64
        /// A set still waiting for cameras closes once a timestamp more than this past its anchor is
        /// seen. The default is two frame periods.
        public var closeAfter: Int64
        /// The rig's frame grid (same clock as the timestamps) when the cameras are phase-locked onto it:
        /// frames are then matched by the grid instant nearest them, and `tolerance` is not used.
        public var grid: PhaseGrid?

        public init(cameraCount: Int, framePeriod: Int64, tolerance: Int64? = nil, closeAfter: Int64? = nil, grid: PhaseGrid? = nil) {
            self.cameraCount = cameraCount
            self.framePeriod = framePeriod
            self.tolerance = tolerance ?? framePeriod / 2
            self.closeAfter = closeAfter ?? 2 * framePeriod
            self.grid = grid
        }
    }

    public typealias Output = SyncMatcherOutput<Payload>

    /// A set already emitted, as far as one camera is concerned.
    private struct ClosedWindow: Sendable {
        var start: Int64
        var end: Int64
        var index: Int
    }

    /// FIFO of one camera's pending frames; consumed storage is reclaimed as the head advances.
    private struct PendingQueue: Sendable {
        private var storage: [SyncFrame<Payload>] = []
        private var head = 0

        var count: Int { storage.count - head }
        var first: SyncFrame<Payload>? { head < storage.count ? storage[head] : nil }
        subscript(offset: Int) -> SyncFrame<Payload> { storage[head + offset] }

        mutating func append(_ frame: SyncFrame<Payload>) { storage.append(frame) }

        mutating func removeFirst(_ n: Int) {
            head += n
            if head == storage.count {
                storage.removeAll(keepingCapacity: true)
                head = 0
            } else if head >= 64 && head * 2 >= storage.count {
                storage.removeFirst(head)
                head = 0
            }
        }
    }

    public let configuration: Configuration
    /// Frames waiting for their set to be decided, over all cameras.
    public private(set) var pendingFrameCount = 0

    private var queues: [PendingQueue]
    private var finished: [Bool]
    private var lastSequence: [UInt64?]
    private var lastTimestamp: [Int64?]
    private var lastWindow: [ClosedWindow?]
    /// The newest timestamp seen in a frame or passed to `advance(to:)`.
    private var horizon: Int64?
    /// End of the newest emitted set's window; nothing at or before it can join a set any more.
    private var closedThrough: Int64?
    private var nextIndex = 0

    public init(configuration: Configuration) {
        precondition(configuration.cameraCount > 0, "a rig needs at least one camera")
        precondition(configuration.framePeriod > 0, "the frame period must be positive")
        precondition(
            configuration.tolerance >= 0 && configuration.tolerance < configuration.framePeriod,
            "the tolerance must lie in 0..<framePeriod"
        )
        precondition(configuration.closeAfter >= 0, "closeAfter must not be negative")
        self.configuration = configuration
        let count = configuration.cameraCount
        queues = Array(repeating: PendingQueue(), count: count)
        finished = Array(repeating: false, count: count)
        lastSequence = Array(repeating: nil, count: count)
        lastTimestamp = Array(repeating: nil, count: count)
        lastWindow = Array(repeating: nil, count: count)
    }

    /// Takes one frame; returns whatever it rejected or allowed to close.
    public mutating func add(_ frame: SyncFrame<Payload>) -> [Output] {
        let camera = frame.camera
        guard camera >= 0 && camera < configuration.cameraCount else {
            return [.unmatched(frame, reason: "camera \(camera) is not in this rig of \(configuration.cameraCount)")]
        }
        if finished[camera] {
            return [.unmatched(frame, reason: "frame from camera \(camera) arrived after its stream finished")]
        }
        if let previous = lastSequence[camera], frame.sequence <= previous {
            return [
                .unmatched(
                    frame,
                    reason: "sequence \(frame.sequence) from camera \(camera) does not follow \(previous) "
                        + "(duplicate or out of order)"
                )
            ]
        }
        if let previous = lastTimestamp[camera], frame.timestamp <= previous {
            return [
                .unmatched(
                    frame,
                    reason: "timestamp \(frame.timestamp) from camera \(camera) is not after its previous "
                        + "frame's \(previous)"
                )
            ]
        }
        lastSequence[camera] = frame.sequence
        lastTimestamp[camera] = frame.timestamp
        horizon = max(horizon ?? frame.timestamp, frame.timestamp)

        var output: [Output] = []
        if let closedThrough, frame.timestamp <= closedThrough {
            output.append(.unmatched(frame, reason: lateReason(for: frame)))
        } else {
            queues[camera].append(frame)
            pendingFrameCount += 1
        }
        drain(into: &output)
        return output
    }

    /// This camera's stream ended: nothing more will come from it, so sets stop waiting for it.
    /// Returns whatever that allowed to close.
    public mutating func finish(camera: Int) -> [Output] {
        guard camera >= 0 && camera < configuration.cameraCount else { return [] }
        finished[camera] = true
        var output: [Output] = []
        drain(into: &output)
        return output
    }

    /// Ends every stream and emits everything still pending, in time order; later frames come back unmatched.
    public mutating func finishAll() -> [Output] {
        for camera in finished.indices { finished[camera] = true }
        var output: [Output] = []
        drain(into: &output)
        return output
    }

    /// The coordinator's clock reached `now` (same clock as the timestamps): sets whose anchor lies more
    /// than `closeAfter` before it close, even when no frames arrive.
    public mutating func advance(to now: Int64) -> [Output] {
        horizon = max(horizon ?? now, now)
        var output: [Output] = []
        drain(into: &output)
        return output
    }

    private func lateReason(for frame: SyncFrame<Payload>) -> String {
        if let window = lastWindow[frame.camera], frame.timestamp >= window.start, frame.timestamp <= window.end {
            return "second frame from camera \(frame.camera) within the window of set \(window.index)"
        }
        return "frame from camera \(frame.camera) at \(frame.timestamp) arrived after the set covering that time closed"
    }

    private mutating func drain(into output: inout [Output]) {
        while let anchor = earliestPendingTimestamp() {
            let window = window(anchoredAt: anchor)
            guard isDecided(anchor: anchor, windowEnd: window.end) else { return }
            closeSet(windowStart: window.start, windowEnd: window.end, gridIndex: window.gridIndex, into: &output)
        }
    }

    /// The window of the set whose earliest frame is at `anchor`: the anchor's grid cell (the half period
    /// either side of its nearest grid instant) with a grid, else `anchor ... anchor + tolerance`.
    private func window(anchoredAt anchor: Int64) -> (start: Int64, end: Int64, gridIndex: Int64?) {
        guard let grid = configuration.grid else { return (anchor, Self.saturatingAdd(anchor, configuration.tolerance), nil) }
        let index = grid.index(nearest: anchor)
        let instant = grid.instant(index)
        let half = Int64(grid.period / 2)
        return (instant - half, instant + half - 1, index)
    }

    private func earliestPendingTimestamp() -> Int64? {
        var earliest: Int64?
        for queue in queues {
            if let head = queue.first, earliest.map({ head.timestamp < $0 }) ?? true {
                earliest = head.timestamp
            }
        }
        return earliest
    }

    /// No camera can still add a frame to `anchor ... windowEnd`, or the deadline passed.
    private func isDecided(anchor: Int64, windowEnd: Int64) -> Bool {
        if let horizon, horizon > Self.saturatingAdd(anchor, configuration.closeAfter) { return true }
        for camera in queues.indices {
            if let head = queues[camera].first, head.timestamp <= windowEnd { continue }
            if finished[camera] { continue }
            if let last = lastTimestamp[camera], last > windowEnd { continue }
            return false
        }
        return true
    }

    private mutating func closeSet(windowStart: Int64, windowEnd: Int64, gridIndex: Int64?, into output: inout [Output]) {
        let cameraCount = configuration.cameraCount
        var candidates: [SyncFrame<Payload>] = []
        var hasSeveral = false
        for camera in 0..<cameraCount {
            var taken = 0
            while taken < queues[camera].count, queues[camera][taken].timestamp <= windowEnd {
                candidates.append(queues[camera][taken])
                taken += 1
            }
            if taken > 0 {
                queues[camera].removeFirst(taken)
                pendingFrameCount -= taken
            }
            hasSeveral = hasSeveral || taken > 1
        }

        let index = nextIndex
        nextIndex += 1
        var frames: [SyncFrame<Payload>?] = Array(repeating: nil, count: cameraCount)
        var rejected: [SyncFrame<Payload>] = []
        if hasSeveral {
            let chosen = Self.narrowestSelection(candidates, cameraCount: cameraCount)
            for (position, frame) in candidates.enumerated() {
                if chosen[frame.camera] == position {
                    frames[frame.camera] = frame
                } else {
                    rejected.append(frame)
                }
            }
        } else {
            for frame in candidates { frames[frame.camera] = frame }
        }

        let present = frames.compactMap { $0?.timestamp }.sorted()
        let missing = (0..<cameraCount).filter { frames[$0] == nil }
        let middle = present.count / 2
        let reference =
            present.count % 2 == 1
            ? present[middle]
            : present[middle - 1] + (present[middle] - present[middle - 1]) / 2
        output.append(
            .set(
                SyncSet(
                    index: index,
                    frames: frames,
                    isComplete: missing.isEmpty,
                    missingCameras: missing,
                    referenceTime: reference,
                    skew: present[present.count - 1] - present[0],
                    gridIndex: gridIndex
                )
            )
        )
        for frame in rejected {
            let reason =
                "second frame from camera \(frame.camera) within the window of set \(index); "
                + "the set kept the one that made it tightest"
            output.append(.unmatched(frame, reason: reason))
        }
        for camera in 0..<cameraCount where frames[camera] != nil {
            lastWindow[camera] = ClosedWindow(start: windowStart, end: windowEnd, index: index)
        }
        closedThrough = windowEnd
    }

    /// For each camera, the position in `candidates` of its frame in the combination that covers every
    /// camera present with the smallest span; within that span, the frame nearest its middle.
    private static func narrowestSelection(_ candidates: [SyncFrame<Payload>], cameraCount: Int) -> [Int?] {
        let order = candidates.indices.sorted {
            (candidates[$0].timestamp, candidates[$0].camera) < (candidates[$1].timestamp, candidates[$1].camera)
        }
        var inSpan = Array(repeating: 0, count: cameraCount)
        let needed = Set(candidates.map(\.camera)).count
        var covered = 0
        var left = 0
        var best: (low: Int64, high: Int64)?
        for right in order.indices {
            let entering = candidates[order[right]].camera
            if inSpan[entering] == 0 { covered += 1 }
            inSpan[entering] += 1
            while covered == needed {
                let low = candidates[order[left]].timestamp
                let high = candidates[order[right]].timestamp
                if best.map({ high - low < $0.high - $0.low }) ?? true { best = (low, high) }
                let leaving = candidates[order[left]].camera
                inSpan[leaving] -= 1
                if inSpan[leaving] == 0 { covered -= 1 }
                left += 1
            }
        }

        var chosen: [Int?] = Array(repeating: nil, count: cameraCount)
        guard let best else { return chosen }
        let middle = best.low + (best.high - best.low) / 2
        for (position, frame) in candidates.enumerated() where (best.low...best.high).contains(frame.timestamp) {
            let distance = (frame.timestamp - middle).magnitude
            if let current = chosen[frame.camera], (candidates[current].timestamp - middle).magnitude <= distance {
                continue
            }
            chosen[frame.camera] = position
        }
        return chosen
    }

    private static func saturatingAdd(_ a: Int64, _ b: Int64) -> Int64 {
        let (sum, overflow) = a.addingReportingOverflow(b)
        return overflow ? (b > 0 ? .max : .min) : sum
    }
}
