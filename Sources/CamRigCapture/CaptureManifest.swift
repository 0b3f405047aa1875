import CamRigClock
import CamRigDeviceModel

/// `manifest.json` of a capture directory: what was captured, by which cameras, how their clocks
/// stood, and every sync set with per-frame timestamps.
///
/// Times are nanoseconds. `timestamp_ns` values are on the coordinator's clock (its
/// `CLOCK_MONOTONIC`); `agent_timestamp_ns` on the agent's. Keys are snake_case.
public struct CaptureManifest: Codable, Sendable, Equatable {
    public static let currentVersion = 1

    public var version: Int = CaptureManifest.currentVersion
    public var id: String
    /// "photo" or "recording".
    public var kind: String
    /// ISO 8601, UTC.
    public var created: String
    public var sessionId: String
    /// What `timestamp_ns` values are measured on.
    public var clock: String = "coordinator CLOCK_MONOTONIC"
    /// Frames per second of the session (recordings).
    public var framesPerSecond: Double?
    public var frameDuration: Rational?
    public var cameras: [Camera]
    public var sets: [SyncSet]
    /// Frames delivered but in no set (each with why).
    public var unmatched: [Frame]
    public var summary: Summary
    /// Whether the capture holds everything it was meant to: `in_progress` while the coordinator is
    /// at it (a manifest left so says the coordinator stopped; `camrig captures recover` finishes it),
    /// `complete`, or `incomplete` with what is missing in `missing`. Absent in manifests written
    /// before CamRig recorded it.
    public var state: State?
    /// For photos: the trigger every agent fired, and when (coordinator clock).
    public var triggerId: String?
    public var fireAtNs: Int64?
    /// For photos: whether `fire_at_ns` was a frame-grid instant (phase-locked cameras).
    public var onGrid: Bool?
    /// What the capture lacks: one entry per camera whose result is not here, saying why and whether
    /// its agent may still hold it.
    public var missing: [Missing]?
    /// For photos: the contact sheet of the set (every camera's photo on one image, labelled), relative
    /// to the capture's folder; made from the photos as first delivered (a deferred photo's proxy).
    public var contactSheet: String?
    /// Results stored in this capture that their agents were not told to delete (the connection failed
    /// after storing): a collector acknowledges them, so they are never offered twice.
    public var unacknowledged: [Unacknowledged]?
    /// For recordings made on the camera hosts: each camera's files, where they are, and the grid.
    public var hostRecording: HostRecording?

    /// A recording each camera host made of its own cameras into video files, offloaded afterwards.
    ///
    /// Frame k of the recording's grid was exposed at `start_ns + k × grid_period_ns` (coordinator clock);
    /// every camera's files cover the same grid indexes, with gaps listed. `sets` map grid indexes to each
    /// camera's frame in its file once the files are here.
    public struct HostRecording: Codable, Sendable, Equatable {
        /// The id the agents keep the recording under.
        public var recordingId: String
        /// The first grid instant (coordinator clock).
        public var startNs: Int64
        public var gridPeriodNs: Double
        /// Grid instants recorded.
        public var gridCount: Int
        public var tracks: [Track]

        public init(recordingId: String, startNs: Int64, gridPeriodNs: Double, gridCount: Int, tracks: [Track]) {
            self.recordingId = recordingId
            self.startNs = startNs
            self.gridPeriodNs = gridPeriodNs
            self.gridCount = gridCount
            self.tracks = tracks
        }

        /// One camera's files.
        public struct Track: Codable, Sendable, Equatable {
            public var camera: Int
            public var agent: String
            public var device: String
            /// What the files' names start with (`cam0-NAME`).
            public var stem: String
            /// `copy`, `mjpeg`, `ffv1`, `h264` or `raw`.
            public var codec: String
            /// How the track ended, as its agent said.
            public var state: State
            public var frames: Int
            /// Grid instants the camera delivered no frame for. Until the frame table is here, as the agent
            /// counted them (for a track cut short, its `lost` instants too); from the table once it is.
            public var gaps: Int
            /// Grid instants flagged `lost` in the frame table (a frame that never reached the disk, or an
            /// instant the agent never reached because it stopped): counted from the table once it is here,
            /// apart from `gaps`. Absent until then, and in manifests of older versions.
            public var lost: Int?
            public var duplicates: Int
            /// The first and last grid index with a frame; nil when the camera recorded none.
            public var firstGridIndex: Int?
            public var lastGridIndex: Int?
            /// The videos in order, then the frame table (`STEM.frames.csv`) and timecodes (`STEM.timecodes.txt`).
            public var files: [File]
            public var error: String?

            public init(camera: Int, agent: String, device: String, stem: String, codec: String, state: State) {
                self.camera = camera
                self.agent = agent
                self.device = device
                self.stem = stem
                self.codec = codec
                self.state = state
                frames = 0
                gaps = 0
                duplicates = 0
                files = []
            }

            /// The track's video files.
            public var videos: [File] { files.filter { $0.name.hasSuffix(".mkv") } }

            /// How a track ended. Written as its spelling (`recording`, `complete`, `cut_short`, `failed`,
            /// `unknown`); a spelling this version does not know (a later version's) reads as
            /// `unrecognized` and is written back unchanged, never making the manifest unreadable.
            public enum State: Sendable, Hashable, Codable, RawRepresentable, CustomStringConvertible, ExpressibleByStringLiteral {
                /// Its agent is still recording it (or closing it after a stop).
                case recording
                case complete
                /// The agent stopped during it and closed the files at its next start.
                case cutShort
                case failed
                /// Its agent has not said yet.
                case unknown
                /// A state a later version wrote.
                case unrecognized(String)

                public init(rawValue: String) {
                    switch rawValue {
                    case "recording": self = .recording
                    case "complete": self = .complete
                    case "cut_short": self = .cutShort
                    case "failed": self = .failed
                    case "unknown": self = .unknown
                    default: self = .unrecognized(rawValue)
                    }
                }

                /// A spelling, as tests and tools write it.
                public init(stringLiteral value: String) { self.init(rawValue: value) }

                public var rawValue: String {
                    switch self {
                    case .recording: "recording"
                    case .complete: "complete"
                    case .cutShort: "cut_short"
                    case .failed: "failed"
                    case .unknown: "unknown"
                    case .unrecognized(let spelling): spelling
                    }
                }

                public var description: String { rawValue }

                /// Whether the agent has said how the track ended: not while it records, nor before it
                /// answers. A state of a later version counts as ended (its files are offered as any).
                public var hasEnded: Bool { self != .recording && self != .unknown }

                public init(from decoder: any Decoder) throws {
                    self.init(rawValue: try decoder.singleValueContainer().decode(String.self))
                }

                public func encode(to encoder: any Encoder) throws {
                    var container = encoder.singleValueContainer()
                    try container.encode(rawValue)
                }
            }
        }

        public struct File: Codable, Sendable, Equatable {
            public var name: String
            public var size: UInt64
            /// Hex SHA-256 of the whole file, as its agent computed it; the offloaded copy is checked against it.
            public var sha256: String
            /// Whether the file is in the capture (the folder or the store), checked against `sha256`: once
            /// this manifest says so, and only then, its agent is told to delete it.
            public var offloaded: Bool
            /// For an offloaded file, whether its agent was told to delete it (`false`: the next offload
            /// tells it). Absent in manifests of older versions, whose offloaded files were acknowledged.
            public var acknowledged: Bool?
            /// Why the file is in neither place: its agent no longer holds it and the capture does not
            /// have it either (or has other bytes under its name). Absent for a file not lost.
            public var lost: String?

            public init(name: String, size: UInt64, sha256: String, offloaded: Bool = false, acknowledged: Bool? = nil, lost: String? = nil) {
                self.name = name
                self.size = size
                self.sha256 = sha256
                self.offloaded = offloaded
                self.acknowledged = acknowledged
                self.lost = lost
            }

            /// Offloaded, and its agent told to delete it.
            public var isSettled: Bool { offloaded && acknowledged != false }
        }

        /// Files still on their hosts only: not offloaded, and not known lost.
        public var onHosts: [(track: Track, file: File)] {
            tracks.flatMap { track in track.files.filter { !$0.offloaded && $0.lost == nil }.map { (track, $0) } }
        }

        /// Files in the capture whose agents were not told to delete them yet.
        public var unacknowledged: [(track: Track, file: File)] {
            tracks.flatMap { track in track.files.filter { $0.offloaded && $0.acknowledged == false }.map { (track, $0) } }
        }

        /// Files lost: neither on their hosts nor in the capture.
        public var lostFiles: [(track: Track, file: File)] {
            tracks.flatMap { track in track.files.filter { $0.lost != nil }.map { (track, $0) } }
        }

        /// Whether every track has said how it ended and every file is here (or known lost).
        public var isOffloaded: Bool {
            tracks.allSatisfy(\.state.hasEnded) && onHosts.isEmpty
        }
    }

    /// A stored result its agent still holds.
    public struct Unacknowledged: Codable, Sendable, Equatable {
        public var agent: String
        public var sessionId: String
        public var resultId: String

        public init(agent: String, sessionId: String, resultId: String) {
            self.agent = agent
            self.sessionId = sessionId
            self.resultId = resultId
        }
    }

    /// A capture's progress.
    public enum State: String, Codable, Sendable {
        case inProgress = "in_progress"
        /// An on-host recording is over and files of it are still on their hosts: `camrig captures offload`
        /// (or `recover`) fetches them.
        case offloading
        case complete
        case incomplete
    }

    /// A camera's result the capture does not have.
    public struct Missing: Codable, Sendable, Equatable {
        public var camera: Int
        public var agent: String
        public var device: String
        /// Where the agent keeps it: results are fetched by session and matched by trigger and device.
        public var sessionId: String
        public var triggerId: String
        /// Why, in words.
        public var reason: String
        /// The agent may still hold the result in its spool: it is fetched when the agent is reachable
        /// again (the next capture with this captures directory, or `camrig captures recover`). `false`
        /// when it is known to be lost (the agent refused the trigger, or holds nothing of it).
        public var collectable: Bool
        /// Why, for programs (`nil` in manifests of older versions, and for causes this version does not know).
        public var cause: Cause?

        /// Why a result is missing.
        public enum Cause: String, Codable, Sendable, CaseIterable {
            /// The capture had not gathered it yet: the manifest is written before the agents are asked to fire.
            case captureUnderWay = "capture_under_way"
            /// The coordinator stopped before gathering it.
            case coordinatorStopped = "coordinator_stopped"
            /// The agent refused or failed the capture, or its results did not include the photo.
            case captureFailed = "capture_failed"
            /// The agent holds no result of the trigger for the device.
            case notHeld = "not_held"
        }

        public init(
            camera: Int, agent: String, device: String, sessionId: String, triggerId: String, reason: String, collectable: Bool, cause: Cause? = nil
        ) {
            self.camera = camera
            self.agent = agent
            self.device = device
            self.sessionId = sessionId
            self.triggerId = triggerId
            self.reason = reason
            self.collectable = collectable
            self.cause = cause
        }

        enum CodingKeys: String, CodingKey {
            case camera, agent, device, sessionId, triggerId, reason, collectable, cause
        }

        /// The reason a manifest of an older version gave a capture under way, which had no cause field.
        static let legacyUnderWayReason = "the capture was under way"

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            camera = try container.decode(Int.self, forKey: .camera)
            agent = try container.decode(String.self, forKey: .agent)
            device = try container.decode(String.self, forKey: .device)
            sessionId = try container.decode(String.self, forKey: .sessionId)
            triggerId = try container.decode(String.self, forKey: .triggerId)
            reason = try container.decode(String.self, forKey: .reason)
            collectable = try container.decode(Bool.self, forKey: .collectable)
            if container.contains(.cause) {
                // A cause a later version added reads as none, rather than making the manifest unreadable.
                cause = (try? container.decode(String.self, forKey: .cause)).flatMap(Cause.init(rawValue:))
            } else {
                // Written before causes were recorded: the one reason that had a meaning is read as its cause.
                cause = reason == Self.legacyUnderWayReason ? .captureUnderWay : nil
            }
        }
    }

    /// Results that may still be collected from their agents.
    public var collectable: [Missing] { (missing ?? []).filter(\.collectable) }
    /// Photos delivered as deferred proxies whose finals their agents still have to deliver.
    public var awaitingFinals: [Frame] { sets.flatMap(\.frames).filter { $0.photo?.proxy == true } }

    public init(id: String, kind: String, created: String, sessionId: String, framesPerSecond: Double? = nil, frameDuration: Rational? = nil, cameras: [Camera], sets: [SyncSet], unmatched: [Frame], summary: Summary) {
        self.id = id
        self.kind = kind
        self.created = created
        self.sessionId = sessionId
        self.framesPerSecond = framesPerSecond
        self.frameDuration = frameDuration
        self.cameras = cameras
        self.sets = sets
        self.unmatched = unmatched
        self.summary = summary
    }

    public struct Rational: Codable, Sendable, Equatable {
        public var numerator: UInt32
        public var denominator: UInt32
        public init(numerator: UInt32, denominator: UInt32) {
            self.numerator = numerator
            self.denominator = denominator
        }
    }

    /// The agent's clock relative to the coordinator's when the capture was made.
    public struct ClockStatistics: Codable, Sendable, Equatable {
        /// agent − coordinator.
        public var offsetNs: Double
        public var driftPpm: Double
        public var errorBoundNs: Double
        public var minimumRoundTripNs: Int64
        public var samples: Int
        public init(offsetNs: Double, driftPpm: Double, errorBoundNs: Double, minimumRoundTripNs: Int64, samples: Int) {
            self.offsetNs = offsetNs
            self.driftPpm = driftPpm
            self.errorBoundNs = errorBoundNs
            self.minimumRoundTripNs = minimumRoundTripNs
            self.samples = samples
        }
    }

    public struct Camera: Codable, Sendable, Equatable {
        public var index: Int
        /// `AGENT/DEVICE`.
        public var name: String
        public var agent: String
        public var device: String
        public var model: String
        public var format: String
        public var pixelFormat: String
        public var width: UInt32
        public var height: UInt32
        public var clock: ClockStatistics
        public var framesDelivered: Int
        /// Reported dropped by the agent (never delivered); for an on-host recording, its grid instants
        /// without a frame (`gap` rows), not counting `lost` ones.
        public var framesDropped: Int
        /// For an on-host recording cut short: grid instants whose frame never reached the host's disk, or
        /// that the host never reached (`lost` rows of its frame table). For a streamed recording: frames
        /// of its span the camera's stream neither delivered nor reported dropped (it began late or ended
        /// early; `error` says which). Absent when none were.
        public var framesLost: Int?
        public var framesUnmatched: Int
        /// Frames delivered but exposed after the recording's end, so left out of it (not stored).
        public var framesAfterEnd: Int = 0
        /// Why this camera delivered less than asked (agent gone, device unplugged, trigger refused).
        public var error: String?
        /// The camera's phase lock on the rig's frame grid as the capture ended; absent when the rig was
        /// not phase-locked. A camera that was not `locked` may lie up to a frame period off the others.
        public var phaseLock: PhaseLock?
        public init(index: Int, name: String, agent: String, device: String, model: String, format: String, pixelFormat: String, width: UInt32, height: UInt32, clock: ClockStatistics, framesDelivered: Int, framesDropped: Int, framesUnmatched: Int, error: String? = nil) {
            self.error = error
            self.index = index
            self.name = name
            self.agent = agent
            self.device = device
            self.model = model
            self.format = format
            self.pixelFormat = pixelFormat
            self.width = width
            self.height = height
            self.clock = clock
            self.framesDelivered = framesDelivered
            self.framesDropped = framesDropped
            self.framesUnmatched = framesUnmatched
        }
    }

    public struct Frame: Codable, Sendable, Equatable {
        public var camera: Int
        public var sequence: UInt64
        /// Relative to the capture directory.
        public var file: String
        public var timestampNs: Int64
        public var agentTimestampNs: Int64
        /// What the agent's stamp marks: start_of_exposure, end_of_frame, dequeue.
        public var marks: String
        public var uncertaintyNs: Int64
        /// For triggered photos: how late the agent fired, on its clock.
        public var latenessNs: Int64?
        /// For unmatched frames: why.
        public var reason: String?
        /// For photos: how the agent made it.
        public var photo: Photo?
        /// For on-host recordings: the frame's place in `file` (a video), from 0.
        public var videoFrame: Int?
        /// The SHA-256 (hex) of `file`, where the store checked it: photos agents put in an object store.
        public var sha256: String?
        public init(camera: Int, sequence: UInt64, file: String, timestampNs: Int64, agentTimestampNs: Int64, marks: String, uncertaintyNs: Int64, latenessNs: Int64? = nil, reason: String? = nil, photo: Photo? = nil) {
            self.camera = camera
            self.sequence = sequence
            self.file = file
            self.timestampNs = timestampNs
            self.agentTimestampNs = agentTimestampNs
            self.marks = marks
            self.uncertaintyNs = uncertaintyNs
            self.latenessNs = latenessNs
            self.reason = reason
            self.photo = photo
        }
    }

    /// How an agent made a photo (its resolved photo settings).
    public struct Photo: Codable, Sendable, Hashable {
        /// `speed`, `balanced` or `quality`: the level it was made at.
        public var quality: String
        /// How many frames it was made from.
        public var framesMerged: Int
        /// How long the agent's capture stage took, from its beginning until its frames were taken, on the
        /// agent's clock: never negative. (Earlier versions measured from the trigger's instant to the last
        /// frame's exposure start, negative when that frame was exposed just before the instant.)
        public var captureDurationNs: Int64
        /// The agent's processing time.
        public var processingDurationNs: Int64
        /// Why it differs from the request, when it does.
        public var note: String?
        /// The agent's id of the photo: a deferred photo's proxy and final share it.
        public var photoId: String?
        /// The file is a deferred photo's proxy: its agent makes the final later
        /// (`camrig captures finalize` fetches it now). Absent once the final is here.
        public var proxy: Bool?
        /// The deferred photo's proxy file, kept beside the final once that is here.
        public var proxyFile: String?
        /// How long the capture waited for the camera's previous photo before it began.
        public var waitedNs: Int64?
        /// An exposure bracket's image: its place (from 1) and bias in EV.
        public var bracketIndex: Int?
        public var exposureBias: Float?
        /// The bracket's other images, when this is its first.
        public var brackets: [Bracket]?

        /// One more image of an exposure bracket.
        public struct Bracket: Codable, Sendable, Hashable {
            public var index: Int
            public var exposureBias: Float
            public var file: String
            public var timestampNs: Int64
            public var note: String?
        }
        public init(
            quality: String, framesMerged: Int, captureDurationNs: Int64, processingDurationNs: Int64, note: String?, photoId: String? = nil,
            proxy: Bool? = nil, waitedNs: Int64? = nil, bracketIndex: Int? = nil, exposureBias: Float? = nil
        ) {
            self.bracketIndex = bracketIndex
            self.exposureBias = exposureBias
            self.quality = quality
            self.framesMerged = framesMerged
            self.captureDurationNs = captureDurationNs
            self.processingDurationNs = processingDurationNs
            self.note = note
            self.photoId = photoId
            self.proxy = proxy
            self.waitedNs = waitedNs
        }
    }

    /// One camera's phase lock, as the manifest records it.
    public struct PhaseLock: Codable, Sendable, Equatable {
        /// `locked`, `locking`, `cannot-lock`, `unlocked` or `unknown` (its agent did not answer).
        public var state: String
        /// How the camera is held on the grid: `frame-duration`, `restart` or `triggered`; `-` when not known.
        public var method: String
        /// The latest frame's exposure start minus its grid instant, in nanoseconds.
        public var phaseErrorNs: Int64
        /// Largest |phase error| over recent frames plus the timestamps' own uncertainty, in nanoseconds.
        public var errorBoundNs: UInt64
        /// Why it is not locked, when it is not.
        public var reason: String?

        public init(state: String, method: String, phaseErrorNs: Int64, errorBoundNs: UInt64, reason: String?) {
            self.state = state
            self.method = method
            self.phaseErrorNs = phaseErrorNs
            self.errorBoundNs = errorBoundNs
            self.reason = reason
        }
    }

    public struct SyncSet: Codable, Sendable, Equatable {
        public var index: Int
        public var complete: Bool
        public var referenceTimeNs: Int64
        /// max − min of the frames' timestamps.
        public var skewNs: Int64
        public var missingCameras: [Int]
        public var frames: [Frame]
        /// The rig's frame grid instant the set was matched on (coordinator clock), when the cameras were
        /// phase-locked: every frame of the set is the one its camera exposed nearest this instant.
        public var gridInstantNs: Int64?
        public init(index: Int, complete: Bool, referenceTimeNs: Int64, skewNs: Int64, missingCameras: [Int], frames: [Frame], gridInstantNs: Int64? = nil) {
            self.gridInstantNs = gridInstantNs
            self.index = index
            self.complete = complete
            self.referenceTimeNs = referenceTimeNs
            self.skewNs = skewNs
            self.missingCameras = missingCameras
            self.frames = frames
        }
    }

    public struct Summary: Codable, Sendable, Equatable {
        public var sets: Int
        public var completeSets: Int
        public var incompleteSets: Int
        public var framesDelivered: Int
        public var droppedFrames: Int
        /// Frames of on-host recordings cut short that never reached their hosts' disks (`lost`), counted
        /// apart from `dropped_frames`; absent when none were.
        public var lostFrames: Int?
        public var unmatchedFrames: Int
        public var skewP50Ns: Int64
        public var skewP99Ns: Int64
        public var skewMaxNs: Int64
        public init(sets: Int, completeSets: Int, incompleteSets: Int, framesDelivered: Int, droppedFrames: Int, unmatchedFrames: Int, skewP50Ns: Int64, skewP99Ns: Int64, skewMaxNs: Int64) {
            self.sets = sets
            self.completeSets = completeSets
            self.incompleteSets = incompleteSets
            self.framesDelivered = framesDelivered
            self.droppedFrames = droppedFrames
            self.unmatchedFrames = unmatchedFrames
            self.skewP50Ns = skewP50Ns
            self.skewP99Ns = skewP99Ns
            self.skewMaxNs = skewMaxNs
        }

        /// Summarizes sets (skews over complete sets only; all sets when none is complete).
        public init(sets: [SyncSet], framesDelivered: Int, droppedFrames: Int, unmatchedFrames: Int) {
            let complete = sets.filter(\.complete)
            let skews = (complete.isEmpty ? sets : complete).map(\.skewNs).sorted()
            func percentile(_ p: Double) -> Int64 {
                guard !skews.isEmpty else { return 0 }
                return skews[min(skews.count - 1, Int((Double(skews.count - 1) * p).rounded()))]
            }
            self.init(
                sets: sets.count,
                completeSets: complete.count,
                incompleteSets: sets.count - complete.count,
                framesDelivered: framesDelivered,
                droppedFrames: droppedFrames,
                unmatchedFrames: unmatchedFrames,
                skewP50Ns: percentile(0.5),
                skewP99Ns: percentile(0.99),
                skewMaxNs: skews.last ?? 0
            )
        }
    }
}

extension CaptureManifest {
    /// The spread of a set's exposure instants in real time: each frame's agent timestamp mapped back
    /// through the clock its camera's host actually ran (known to simulations and benchmarks, never to
    /// the coordinator). Unlike `skewNs`, this includes the clock-estimation error.
    public func trueSpan(of set: SyncSet, clock: (Camera) -> HostClock) -> Int64 {
        let instants = set.frames.map { clock(cameras[$0.camera]).monotonic(atReading: $0.agentTimestampNs) }
        return (instants.max() ?? 0) - (instants.min() ?? 0)
    }
}

extension CaptureManifest.Frame {
    /// This frame and `other`, images of one camera's exposure bracket, as one: the image with the lower
    /// bracket index is the set's frame, the other is listed among its `brackets`.
    public func addingBracketImage(_ other: CaptureManifest.Frame) -> CaptureManifest.Frame {
        let (first, second) = (photo?.bracketIndex ?? 0) <= (other.photo?.bracketIndex ?? 0) ? (self, other) : (other, self)
        var combined = first
        var brackets = (first.photo?.brackets ?? []) + (second.photo?.brackets ?? [])
        brackets.append(
            CaptureManifest.Photo.Bracket(
                index: second.photo?.bracketIndex ?? 0, exposureBias: second.photo?.exposureBias ?? 0, file: second.file,
                timestampNs: second.timestampNs, note: second.photo?.note))
        combined.photo?.brackets = brackets.sorted { $0.index < $1.index }
        return combined
    }

    /// This frame and `other`, two results of one camera in one capture, as one: images of an exposure
    /// bracket join (the first is the set's frame); a deferred photo's final replaces its proxy (kept as
    /// `proxy_file`); otherwise this frame stays.
    public func combining(_ other: CaptureManifest.Frame) -> CaptureManifest.Frame {
        if photo?.bracketIndex != nil, other.photo?.bracketIndex != nil { return addingBracketImage(other) }
        guard let id = photo?.photoId, id == other.photo?.photoId else { return self }
        let (proxy, final) = photo?.proxy == true ? (self, other) : (other, self)
        guard proxy.photo?.proxy == true, final.photo?.proxy != true else { return self }
        var combined = final
        combined.photo?.proxyFile = proxy.file
        return combined
    }

    /// Whether `file` is this frame's, or one of its bracket's.
    public func holds(file: String) -> Bool {
        self.file == file || (photo?.brackets ?? []).contains { $0.file == file }
    }
}
