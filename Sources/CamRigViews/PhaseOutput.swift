import CamRigText
import CamRigCoordinator
import CamRigWire

/// One camera's phase lock, as `camrig sync status` prints it.
public struct PhaseOutput: Codable, Sendable {
    public var camera: String
    public var state: String
    public var method: String
    public var phaseErrorUs: Double
    public var errorBoundUs: Double
    public var framePeriodUs: Double?
    public var rateErrorPpm: Double?
    public var restarts: Int
    public var frames: UInt64
    public var reason: String?

    public init(camera: String, _ status: WirePhaseStatus, failure: String? = nil) {
        self.camera = camera
        state = failure == nil ? CameraPhase.name(of: status.state) : "unknown"
        method = CameraPhase.name(of: status.method)
        phaseErrorUs = Double(status.phaseErrorNs) / 1000
        errorBoundUs = Double(status.errorBoundNs) / 1000
        framePeriodUs = status.measuredFramePeriodNs > 0 ? status.measuredFramePeriodNs / 1000 : nil
        rateErrorPpm = status.method == .frameDuration ? status.rateErrorPpm : nil
        restarts = Int(status.restarts)
        frames = status.frames
        reason = failure ?? (status.reason.isEmpty ? nil : status.reason)
    }

    public init(_ phase: CameraPhase) {
        self.init(camera: phase.camera, phase.status, failure: phase.failure)
    }

    public static func table(_ phases: [PhaseOutput]) -> String {
        CamRigText.table(
            ["CAMERA", "LOCK", "METHOD", "PHASE ERR µs", "BOUND µs", "PERIOD µs", "RATE ppm", "RESTARTS", "REASON"],
            phases.map {
                [
                    $0.camera, $0.state, $0.method, String(format: "%.1f", $0.phaseErrorUs), String(format: "%.1f", $0.errorBoundUs),
                    $0.framePeriodUs.map { String(format: "%.3f", $0) } ?? "-", $0.rateErrorPpm.map { String(format: "%.1f", $0) } ?? "-",
                    "\($0.restarts)", $0.reason ?? "",
                ]
            })
    }
}
