import CamRigCLI
import CamRigCoordinator
import CamRigWire

/// One camera's phase lock, as `camrig sync status` prints it.
struct PhaseOutput: Encodable {
    var camera: String
    var state: String
    var method: String
    var phaseErrorUs: Double
    var errorBoundUs: Double
    var framePeriodUs: Double?
    var rateErrorPpm: Double?
    var restarts: Int
    var frames: UInt64
    var reason: String?

    init(camera: String, _ status: WirePhaseStatus, failure: String? = nil) {
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

    init(_ phase: CameraPhase) {
        self.init(camera: phase.camera, phase.status, failure: phase.failure)
    }

    static func table(_ phases: [PhaseOutput]) -> String {
        CamRigCLI.table(
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
