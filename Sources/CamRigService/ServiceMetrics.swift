import CamRigCoordinator
import Foundation
import Prometheus

/// `/metrics`: the rig in Prometheus's text format, read from the service's state at each scrape.
public final class ServiceMetrics: Sendable {
    public let registry: PrometheusCollectorRegistry

    public init(registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.registry = registry
    }

    /// Brings every gauge up to date and renders the registry.
    public func scrape(_ service: RigService) async -> String {
        let snapshots = service.pool.agents.map(\.snapshot)
        for snapshot in snapshots {
            let labels = [("agent", snapshot.name)]
            registry.makeGauge(name: "camrig_agent_connected", labels: labels, help: "1 when the agent's connection is up")
                .set(snapshot.status == .connected ? 1.0 : 0.0)
            if let clock = snapshot.clock {
                registry.makeGauge(name: "camrig_agent_clock_offset_seconds", labels: labels, help: "Agent clock minus coordinator clock")
                    .set(clock.offsetNanoseconds / 1e9)
                registry.makeGauge(name: "camrig_agent_clock_error_bound_seconds", labels: labels, help: "Bound on the offset estimate's error")
                    .set(clock.errorBoundNanoseconds / 1e9)
                registry.makeGauge(name: "camrig_agent_clock_drift_ppm", labels: labels, help: "Agent clock rate minus coordinator clock rate")
                    .set(clock.driftPPM)
                registry.makeGauge(name: "camrig_agent_round_trip_seconds", labels: labels, help: "Lowest recent clock-probe round trip")
                    .set(Double(clock.minimumRoundTrip) / 1e9)
            }
        }
        let devices = await service.devices
        let phases = await service.phases
        for device in devices {
            let labels = [("agent", device.agentID), ("camera", device.name)]
            registry.makeGauge(name: "camrig_camera_connected", labels: labels, help: "1 when the camera is plugged in")
                .set(device.description.connected ? 1.0 : 0.0)
            registry.makeGauge(name: "camrig_camera_fps", labels: labels, help: "Frame rate the camera is configured for")
                .set(device.description.state.activeMinFrameDuration.duration.map(\.frameRate) ?? 0)
            registry.makeGauge(name: "camrig_camera_leased", labels: labels, help: "1 when a client holds the camera's configuration lease")
                .set(device.description.hasLease ? 1.0 : 0.0)
            let phase = phases[device.name]
            registry.makeGauge(name: "camrig_camera_phase_locked", labels: labels, help: "1 when the camera is phase-locked to the rig's frame grid")
                .set(phase?.status.state == .locked ? 1.0 : 0.0)
            if let phase, phase.failure == nil {
                registry.makeGauge(name: "camrig_camera_phase_error_seconds", labels: labels, help: "Camera's exposure starts minus the rig's frame grid")
                    .set(Double(phase.status.phaseErrorNs) / 1e9)
                registry.makeGauge(name: "camrig_camera_frames", labels: labels, help: "Frames the camera's phase lock has seen")
                    .set(Double(phase.status.frames))
                registry.makeGauge(name: "camrig_camera_restarts", labels: labels, help: "Stream restarts the phase lock made to move the camera's phase")
                    .set(Double(phase.status.restarts))
            }
            registry.makeGauge(name: "camrig_camera_preview_watchers", labels: labels, help: "Console viewers watching the camera's preview")
                .set(Double(service.previews.watcherCount(device.name)))
        }
        let finished = await service.capturesFinished
        let failed = await service.capturesFailed
        let seconds = await service.captureSeconds
        for kind in ["photo", "recording"] {
            let labels = [("kind", kind)]
            registry.makeGauge(name: "camrig_captures_finished", labels: labels, help: "Captures finished since the service started")
                .set(Double(finished[kind] ?? 0))
            registry.makeGauge(name: "camrig_captures_failed", labels: labels, help: "Captures failed since the service started")
                .set(Double(failed[kind] ?? 0))
            registry.makeGauge(name: "camrig_capture_seconds_total", labels: labels, help: "Time spent in captures since the service started")
                .set(seconds[kind] ?? 0)
        }
        if let values = try? service.store.root.resourceValues(forKeys: [.volumeAvailableCapacityKey]), let free = values.volumeAvailableCapacity {
            registry.makeGauge(name: "camrig_captures_disk_free_bytes", help: "Free space where captures are stored").set(Double(free))
        }
        registry.makeGauge(name: "camrig_event_watchers", help: "WebSocket event watchers").set(Double(service.events.watcherCount))
        return registry.emitToString()
    }
}
