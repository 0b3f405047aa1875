import CamRigText
import CamRigViews
import CamRigCLI
import CamRigCapture
import CamRigCoordinator
import CamRigLocalRig
import Foundation

/// What `camrig demo` reports.
struct DemoOutput: Encodable {
    struct Agent: Encodable {
        var agent: String
        var address: String
        var injectedOffsetUs: Double
        var injectedDriftPpm: Double
        var estimatedOffsetUs: Double
        var estimatedDriftPpm: Double
        var offsetErrorUs: Double
        var errorBoundUs: Double
        var minRoundTripUs: Double
        var clockSamples: Int
        var frames: Int
        var droppedFrames: Int

        init(_ snapshot: RemoteAgent.Snapshot, injected: LocalAgentSpec, epoch: Int64, frames cameras: [CaptureManifest.Camera]) {
            agent = snapshot.name
            address = snapshot.endpoint.description
            let clock = snapshot.clock
            // The truth at the estimate's reference instant: offset + drift × (t − epoch).
            let reference = clock?.reference ?? epoch
            injectedOffsetUs = injected.clockOffsetMicroseconds + injected.clockDriftPPM * Double(reference - epoch) / 1e9
            injectedDriftPpm = injected.clockDriftPPM
            estimatedOffsetUs = (clock?.offsetNanoseconds ?? .nan) / 1000
            estimatedDriftPpm = clock?.driftPPM ?? .nan
            offsetErrorUs = estimatedOffsetUs - injectedOffsetUs
            errorBoundUs = (clock?.errorBoundNanoseconds ?? .nan) / 1000
            minRoundTripUs = Double(clock?.minimumRoundTrip ?? 0) / 1000
            clockSamples = snapshot.clockSamples
            frames = cameras.map(\.framesDelivered).reduce(0, +)
            droppedFrames = cameras.map(\.framesDropped).reduce(0, +)
        }
    }

    var agents: [Agent]
    var captures: [CaptureOutput]
    var catalog: String

    var text: String {
        let clockTable = table(
            ["AGENT", "INJECTED µs", "ESTIMATED µs", "ERROR µs", "BOUND ±µs", "DRIFT ppm (true)", "RTT µs", "FRAMES", "DROPPED"],
            agents.map { [
                $0.agent, String(format: "%.1f", $0.injectedOffsetUs), String(format: "%.1f", $0.estimatedOffsetUs), String(format: "%+.1f", $0.offsetErrorUs),
                String(format: "%.1f", $0.errorBoundUs), String(format: "%.2f (%.0f)", $0.estimatedDriftPpm, $0.injectedDriftPpm),
                String(format: "%.1f", $0.minRoundTripUs), "\($0.frames)", "\($0.droppedFrames)",
            ] }
        )
        return (["clocks (agent − coordinator):", clockTable, ""] + captures.map(\.text) + ["", "catalog: \(catalog)"]).joined(separator: "\n")
    }
}
