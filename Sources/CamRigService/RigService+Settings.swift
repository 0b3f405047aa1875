import CamRigCapture
import CamRigClock
import CamRigCoordinator
import CamRigSecurity
import CamRigStorage
import CamRigViews
import CamRigWire
import CamRigWireModel
import Foundation
import NIOConcurrencyHelpers

extension RigService {
    // MARK: Settings

    /// Applies `key=value` settings (as `camrig device set` takes them) to a camera of the session, under
    /// the session's lease on it; returns the camera's state after.
    public func apply(settings: [String], to name: String, by access: Access) async throws -> RigDevice {
        let device = try device(named: name)
        guard let session, await session.inputs.contains(where: { $0.name == device.name }) else {
            throw ServiceError(
                .conflict, agent: device.agentID, device: device.name,
                "camera \(device.name) is not in the service's session" + (supervisor.sessionError.map { " (\($0))" } ?? "")
                    + "; it joins when it is connected and not locked by another client")
        }
        let change: WireConfigure
        do {
            change = try DeviceSettingsParser.parse(settings, photoOutput: device.description.state.photoOutput)
        } catch {
            throw ServiceError(.badRequest, agent: device.agentID, device: device.name, "\(error)")
        }
        let activity = RigActivity.changingSettings(device: device.name)
        if let refusal = supervisor.begin(activity) {
            throw ServiceError(.conflict, agent: device.agentID, device: device.name, "\(refusal); change settings when it has finished")
        }
        defer { supervisor.end(activity) }
        do {
            try await reconfigure(session, quiesce: change.hasFormatID || change.hasMinFrameDuration) {
                await session.beginConfiguration()
                await session.setControls(of: device.name, change)
                try await session.commitConfiguration()
            }
        } catch {
            throw ServiceError(.conflict, agent: device.agentID, device: device.name, Self.message(error))
        }
        await refreshDevices()
        events.publish(.deviceSettings(agent: device.agentID, device: device.name, settings: settings.joined(separator: " "), by: access.name))
        return try self.device(named: name)
    }

    /// Runs a configuration change; with `quiesce` (a format or rate change), the cameras are first
    /// released from the phase lock and the previews paused (a camera cannot change format while it
    /// streams), and locked again after.
    func reconfigure(_ session: RigSession, quiesce: Bool, _ change: () async throws -> Void) async throws {
        guard quiesce else { return try await change() }
        let locked = await session.phaseGrid != nil
        if locked { await session.unlockPhase() }
        await previews.pause()
        var failure: (any Error)?
        do { try await change() } catch { failure = error }
        previews.resume()
        if locked, configuration.phaseLock { await relock(session) }
        if let failure { throw failure }
    }

    /// Puts the cameras back on the frame grid; the supervisor says what a failure means (an event, the
    /// session's error, another try in 10 s).
    func relock(_ session: RigSession) async {
        let outcome: [RigSupervisor.Action]
        do {
            _ = try await session.lockPhase(tolerance: configuration.lockTolerance)
            outcome = supervisor.relocked()
        } catch {
            outcome = supervisor.relockFailed(reason: Self.message(error), now: .now)
        }
        for case .emit(let event) in outcome { events.publish(event) }
    }
}
