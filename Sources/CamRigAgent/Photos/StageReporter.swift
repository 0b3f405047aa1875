import CamRigClock
import CamRigWire

/// Sends a photo's stage events on its capture's request, when the capture asked for them.
struct StageReporter: Sendable {
    let enabled: Bool
    let triggerID: String
    let deviceID: String
    let settingsID: UInt64
    let photoID: String
    let clock: HostClock
    let reply: @Sendable (WireEnvelope.OneOf_Body) -> Void

    func send(_ stage: WirePhotoStage, _ fill: (inout WirePhotoStageEvent) -> Void = { _ in }) {
        guard enabled else { return }
        var event = WirePhotoStageEvent()
        event.triggerID = triggerID
        event.deviceID = deviceID
        event.stage = stage
        event.timeNs = clock.now()
        event.photoSettingsID = settingsID
        event.photoID = photoID
        fill(&event)
        reply(.photoStage(event))
    }
}
