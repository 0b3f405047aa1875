import CamRigCoordinator

/// A camera as the service's API lists it (`GET /api/v1/devices`).
public struct CameraView: Codable, Sendable {
    public var device: DeviceOutput
    public var inSession: Bool
    public var phase: PhaseOutput?
    public var previewWatchers: Int
    /// Frames it dropped in the captures this service made.
    public var droppedFrames: Int?

    public init(device: DeviceOutput, inSession: Bool, phase: PhaseOutput?, previewWatchers: Int, droppedFrames: Int?) {
        self.device = device
        self.inSession = inSession
        self.phase = phase
        self.previewWatchers = previewWatchers
        self.droppedFrames = droppedFrames
    }
}

/// One camera with its settings, controls and formats (`GET /api/v1/devices/AGENT/DEVICE`).
public struct CameraDetail: Codable, Sendable {
    public var camera: CameraView
    public var settings: [String: String]
    public var controls: [ControlOutput]
    public var formatIds: [String]

    public init(camera: CameraView, device: RigDevice) {
        let get = DeviceGetOutput(device)
        self.camera = camera
        settings = get.state
        controls = get.controls
        formatIds = device.description.formats.map(\.id)
    }
}

/// `PUT /api/v1/devices/AGENT/DEVICE/settings`.
public struct SettingsRequest: Codable, Sendable {
    /// `camrig device set` keys and values, e.g. {"exposure-duration": "1/250", "iso": "200"}.
    public var settings: [String: String]

    public init(settings: [String: String]) { self.settings = settings }
}
