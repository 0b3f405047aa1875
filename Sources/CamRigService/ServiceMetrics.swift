import CamRigCoordinator
import Foundation
import CamRigWire
import Prometheus

/// `/metrics`: the rig in Prometheus's text format, read from the service's state at each scrape.
public final class ServiceMetrics: Sendable {
    public let registry: PrometheusCollectorRegistry

    public init(registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.registry = registry
    }

    /// The gauge `name` with `labels` (made on first use, the same one after).
    private func gauge(_ name: String, _ help: String, _ labels: [(String, String)] = []) -> Gauge {
        registry.makeGauge(descriptor: MetricNameDescriptor(metricName: name, helpText: help), labels: labels)
    }

    /// Brings every gauge up to date and renders the registry.
    public func scrape(_ service: RigService) async -> String {
        let snapshots = service.pool.agents.map(\.snapshot)
        for snapshot in snapshots {
            let labels = [("agent", snapshot.name)]
            gauge("camrig_agent_connected", "1 when the agent's connection is up", labels)
                .set(snapshot.status == .connected ? 1.0 : 0.0)
            if let clock = snapshot.clock {
                gauge("camrig_agent_clock_offset_seconds", "Agent clock minus coordinator clock", labels)
                    .set(clock.offsetNanoseconds / 1e9)
                gauge("camrig_agent_clock_error_bound_seconds", "Bound on the offset estimate's error", labels)
                    .set(clock.errorBoundNanoseconds / 1e9)
                gauge("camrig_agent_clock_drift_ppm", "Agent clock rate minus coordinator clock rate", labels)
                    .set(clock.driftPPM)
                gauge("camrig_agent_round_trip_seconds", "Lowest recent clock-probe round trip", labels)
                    .set(Double(clock.minimumRoundTrip) / 1e9)
            }
        }
        for (agent, spool) in await service.spools {
            let labels = [("agent", agent)]
            gauge("camrig_agent_spool_used_bytes", "Bytes of results the agent holds until the coordinator has them", labels).set(Double(spool.usedBytes))
            gauge("camrig_agent_spool_capacity_bytes", "Size of the agent's result spool", labels).set(Double(spool.capacityBytes))
            gauge("camrig_agent_spool_results", "Results the agent holds", labels).set(Double(spool.results))
        }
        let dropped = await service.droppedFrames
        let devices = await service.devices
        let phases = await service.phases
        for device in devices {
            let labels = [("agent", device.agentID), ("camera", device.name)]
            gauge("camrig_camera_connected", "1 when the camera is plugged in", labels)
                .set(device.description.connected ? 1.0 : 0.0)
            gauge("camrig_camera_fps", "Frame rate the camera is configured for", labels)
                .set(device.description.state.activeMinFrameDuration.duration.map(\.frameRate) ?? 0)
            gauge("camrig_camera_leased", "1 when a client holds the camera's configuration lease", labels)
                .set(device.description.hasLease ? 1.0 : 0.0)
            gauge("camrig_camera_dropped_frames", "Frames the camera dropped in the captures this service made", labels)
                .set(Double(dropped[device.name] ?? 0))
            let phase = phases[device.name]
            gauge("camrig_camera_phase_locked", "1 when the camera is phase-locked to the rig's frame grid", labels)
                .set(phase?.status.state == .locked ? 1.0 : 0.0)
            if let phase, phase.failure == nil {
                gauge("camrig_camera_phase_error_seconds", "Camera's exposure starts minus the rig's frame grid", labels)
                    .set(Double(phase.status.phaseErrorNs) / 1e9)
                if phase.status.measuredFramePeriodNs > 0 {
                    gauge("camrig_camera_measured_fps", "Frame rate measured from the camera's exposure starts", labels)
                        .set(1e9 / phase.status.measuredFramePeriodNs)
                }
                gauge("camrig_camera_frames", "Frames the camera's phase lock has seen", labels)
                    .set(Double(phase.status.frames))
                gauge("camrig_camera_restarts", "Stream restarts the phase lock made to move the camera's phase", labels)
                    .set(Double(phase.status.restarts))
            }
            gauge("camrig_camera_preview_watchers", "Console viewers watching the camera's preview", labels)
                .set(Double(service.previews.watcherCount(device.name)))
        }
        let finished = await service.capturesFinished
        let failed = await service.capturesFailed
        let seconds = await service.captureSeconds
        for kind in ["photo", "recording"] {
            let labels = [("kind", kind)]
            gauge("camrig_captures_finished", "Captures finished since the service started", labels)
                .set(Double(finished[kind] ?? 0))
            gauge("camrig_captures_failed", "Captures failed since the service started", labels)
                .set(Double(failed[kind] ?? 0))
            gauge("camrig_capture_seconds_total", "Time spent in captures since the service started", labels)
                .set(seconds[kind] ?? 0)
        }
        if let values = try? service.store.root.resourceValues(forKeys: [.volumeAvailableCapacityKey]), let free = values.volumeAvailableCapacity {
            gauge("camrig_captures_disk_free_bytes", "Free space where captures are stored").set(Double(free))
        }
        gauge("camrig_event_watchers", "WebSocket event watchers").set(Double(service.events.watcherCount))
        return registry.emitToString()
    }
}
