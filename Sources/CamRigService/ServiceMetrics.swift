import CamRigCoordinator
import CamRigViews
import CamRigWire
import Foundation
import Metrics
import Prometheus

/// The service's metrics, made through the swift-metrics API and exported by Prometheus (`/metrics`).
///
/// Captures are counted as they end; the rig's state (agents' clocks, cameras, spools, watchers) is
/// recorded into gauges at each scrape. Each instance has its own registry (no process-wide
/// bootstrap), so services in one process (tests) do not share counts.
public final class ServiceMetrics: Sendable {
    public let registry: PrometheusCollectorRegistry
    private let factory: PrometheusMetricsFactory

    public init(registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.registry = registry
        factory = PrometheusMetricsFactory(registry: registry)
        // Every kind is listed from the start, at zero.
        for kind in JobKind.allCases {
            _ = Metrics.Counter(label: "camrig_captures_finished", dimensions: [("kind", kind.rawValue)], factory: factory)
            _ = Metrics.Counter(label: "camrig_captures_failed", dimensions: [("kind", kind.rawValue)], factory: factory)
            _ = FloatingPointCounter(label: "camrig_capture_seconds_total", dimensions: [("kind", kind.rawValue)], factory: factory)
        }
    }

    /// A capture ended: finished or failed, after `seconds`.
    func captureEnded(_ kind: JobKind, finished: Bool, seconds: Double) {
        let dimensions = [("kind", kind.rawValue)]
        Metrics.Counter(label: finished ? "camrig_captures_finished" : "camrig_captures_failed", dimensions: dimensions, factory: factory).increment()
        FloatingPointCounter(label: "camrig_capture_seconds_total", dimensions: dimensions, factory: factory).increment(by: seconds)
    }

    private func gauge(_ label: String, _ dimensions: [(String, String)] = []) -> Metrics.Gauge {
        Metrics.Gauge(label: label, dimensions: dimensions, factory: factory)
    }

    /// Brings every gauge up to date and renders the registry.
    public func scrape(_ service: RigService) async -> String {
        for snapshot in service.pool.agents.map(\.snapshot) {
            let labels = [("agent", snapshot.name)]
            gauge("camrig_agent_connected", labels).record(snapshot.status == .connected ? 1.0 : 0.0)
            if let clock = snapshot.clock {
                gauge("camrig_agent_clock_offset_seconds", labels).record(clock.offsetNanoseconds / 1e9)
                gauge("camrig_agent_clock_error_bound_seconds", labels).record(clock.errorBoundNanoseconds / 1e9)
                gauge("camrig_agent_clock_drift_ppm", labels).record(clock.driftPPM)
                gauge("camrig_agent_round_trip_seconds", labels).record(Double(clock.minimumRoundTrip) / 1e9)
            }
        }
        let state = await service.state()
        for (agent, spool) in state.spools {
            let labels = [("agent", agent)]
            gauge("camrig_agent_spool_used_bytes", labels).record(Double(spool.usedBytes))
            gauge("camrig_agent_spool_capacity_bytes", labels).record(Double(spool.capacityBytes))
            gauge("camrig_agent_spool_results", labels).record(Double(spool.results))
        }
        for device in state.devices {
            let labels = [("agent", device.agentID), ("camera", device.name)]
            gauge("camrig_camera_connected", labels).record(device.description.connected ? 1.0 : 0.0)
            gauge("camrig_camera_fps", labels).record(device.description.state.activeMinFrameDuration.duration.map(\.frameRate) ?? 0)
            gauge("camrig_camera_leased", labels).record(device.description.hasLease ? 1.0 : 0.0)
            gauge("camrig_camera_dropped_frames", labels).record(Double(state.droppedFrames[device.name] ?? 0))
            let phase = state.phases[device.name]
            gauge("camrig_camera_phase_locked", labels).record(phase?.status.state == .locked ? 1.0 : 0.0)
            if let phase, phase.failure == nil {
                gauge("camrig_camera_phase_error_seconds", labels).record(Double(phase.status.phaseErrorNs) / 1e9)
                if phase.status.measuredFramePeriodNs > 0 {
                    gauge("camrig_camera_measured_fps", labels).record(1e9 / phase.status.measuredFramePeriodNs)
                }
                gauge("camrig_camera_frames", labels).record(Double(phase.status.frames))
                gauge("camrig_camera_restarts", labels).record(Double(phase.status.restarts))
            }
            gauge("camrig_camera_preview_watchers", labels).record(Double(service.previews.watcherCount(device.name)))
        }
        if let free = await service.store.availableCapacity() {
            gauge("camrig_captures_disk_free_bytes").record(Double(free))
        }
        gauge("camrig_event_watchers").record(Double(service.events.watcherCount))
        return registry.emitToString()
    }
}
