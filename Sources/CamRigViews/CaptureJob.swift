/// What a capture job captures.
public enum JobKind: String, Codable, Sendable, CaseIterable {
    case photo
    case recording
}

/// Where a capture job is: running until it finishes or fails, and never back.
public enum JobState: String, Codable, Sendable, CaseIterable {
    case running
    case finished
    case failed

    /// Whether the job is over.
    public var isFinal: Bool { self != .running }
}

/// A capture the service runs (`/api/v1/jobs`): progress while it runs, the summary when done.
public struct CaptureJob: Codable, Sendable, Equatable {
    public var id: String
    public var kind: JobKind
    public var state: JobState
    /// ISO 8601.
    public var started: String
    public var finished: String?
    /// 0…1.
    public var progress: Double
    public var message: String
    public var captureId: String?
    public var summary: CaptureOutput?
    public var contactSheet: String?
    public var error: String?
    public var requestedBy: String

    public init(id: String, kind: JobKind, started: String, requestedBy: String) {
        self.id = id
        self.kind = kind
        state = .running
        self.started = started
        progress = 0
        message = "starting"
        self.requestedBy = requestedBy
    }

    public static func == (lhs: CaptureJob, rhs: CaptureJob) -> Bool {
        lhs.id == rhs.id && lhs.state == rhs.state && lhs.progress == rhs.progress && lhs.message == rhs.message && lhs.error == rhs.error
            && lhs.captureId == rhs.captureId && lhs.finished == rhs.finished
    }
}

/// `POST /api/v1/captures/photo`.
public struct PhotoRequest: Codable, Sendable {
    public var quality: String?
    /// `frame`, `jpeg` or `dng`.
    public var output: String?
    /// Exposure biases in EV, each within -8…8; at most 16.
    public var bracket: [Float]?

    public init(quality: String? = nil, output: String? = nil, bracket: [Float]? = nil) {
        self.quality = quality
        self.output = output
        self.bracket = bracket
    }

    enum CodingKeys: String, CodingKey { case quality, output, bracket }

    /// JSON numbers are read as doubles and narrowed: a bias too small for a `Float` is 0 EV, not an error.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        quality = try container.decodeIfPresent(String.self, forKey: .quality)
        output = try container.decodeIfPresent(String.self, forKey: .output)
        bracket = try container.decodeIfPresent([Double].self, forKey: .bracket)?.map { Float($0) }
    }
}

/// `POST /api/v1/captures/recording`.
public struct RecordRequest: Codable, Sendable {
    /// Seconds, within (0, 600].
    public var duration: Double
    public var fps: Double?
    /// WxH
    public var size: String?
    /// Send every frame to the service as an image instead of recording on the camera hosts.
    public var stream: Bool?
    /// On-host recordings: auto (default), copy, mjpeg, ffv1, h264 or raw.
    public var codec: String?

    public init(duration: Double, fps: Double? = nil, size: String? = nil, stream: Bool? = nil, codec: String? = nil) {
        self.duration = duration
        self.fps = fps
        self.size = size
        self.stream = stream
        self.codec = codec
    }
}
