import CamRigSecurity

/// The session the service holds over the rig's cameras (`GET /api/v1/session`).
public struct SessionView: Codable, Sendable {
    public var id: String?
    public var committed: String?
    public var cameras: Int
    public var fps: Double?
    public var error: String?
    public var runningCapture: String?

    public init(id: String?, committed: String?, cameras: Int, fps: Double?, error: String?, runningCapture: String?) {
        self.id = id
        self.committed = committed
        self.cameras = cameras
        self.fps = fps
        self.error = error
        self.runningCapture = runningCapture
    }
}

/// The rig at a glance (`GET /api/v1/rig`).
public struct RigView: Codable, Sendable {
    public var started: String
    public var access: Access?
    public var agents: [AgentStatusOutput]
    public var cameras: [CameraView]
    public var session: SessionView

    public init(started: String, access: Access?, agents: [AgentStatusOutput], cameras: [CameraView], session: SessionView) {
        self.started = started
        self.access = access
        self.agents = agents
        self.cameras = cameras
        self.session = session
    }
}

/// One sample of an agent's clock as the sync-health history keeps it.
public struct ClockHistorySample: Codable, Sendable, Equatable {
    /// Unix seconds.
    public var time: Double
    public var offsetUs: Double?
    public var errorBoundUs: Double?
    public var roundTripUs: Double?
    public var driftPpm: Double?

    public init(time: Double, offsetUs: Double? = nil, errorBoundUs: Double? = nil, roundTripUs: Double? = nil, driftPpm: Double? = nil) {
        self.time = time
        self.offsetUs = offsetUs
        self.errorBoundUs = errorBoundUs
        self.roundTripUs = roundTripUs
        self.driftPpm = driftPpm
    }
}

/// Sync health (`GET /api/v1/sync`).
public struct SyncView: Codable, Sendable {
    public struct Agent: Codable, Sendable {
        public var status: AgentStatusOutput
        public var history: [ClockHistorySample]
        public var spool: Spool?

        public init(status: AgentStatusOutput, history: [ClockHistorySample], spool: Spool?) {
            self.status = status
            self.history = history
            self.spool = spool
        }
    }
    public struct Spool: Codable, Sendable {
        public var usedBytes: UInt64
        public var capacityBytes: UInt64
        public var results: UInt32

        public init(usedBytes: UInt64, capacityBytes: UInt64, results: UInt32) {
            self.usedBytes = usedBytes
            self.capacityBytes = capacityBytes
            self.results = results
        }
    }
    public var agents: [Agent]
    public var cameras: [PhaseOutput]

    public init(agents: [Agent], cameras: [PhaseOutput]) {
        self.agents = agents
        self.cameras = cameras
    }
}

/// An error reply of the service (RFC 9457, `application/problem+json`).
public struct Problem: Codable, Sendable, Equatable {
    public var type: String
    public var title: String
    public var status: Int
    public var detail: String
    public var agent: String?
    public var device: String?
    public var instance: String?

    public init(type: String, title: String, status: Int, detail: String, agent: String? = nil, device: String? = nil, instance: String? = nil) {
        self.type = type
        self.title = title
        self.status = status
        self.detail = detail
        self.agent = agent
        self.device = device
        self.instance = instance
    }
}
