import ArgumentParser
import CamRigCLI
import Foundation

extension Sync {
    /// `camrig sync status`: every agent's clock against the coordinator's.
    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Probe every agent's clock and report offset, drift, round trip and error bound.",
            discussion: "Offsets are agent − coordinator, estimated from four-timestamp probes over each agent's TLS connection (lowest-round-trip samples, drift fitted by regression)."
        )

        @Option(name: .long, help: "Seconds to probe before reporting.")
        var seconds = 2.0

        @OptionGroup var rig: RigOptions
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let logger = output.makeLogger()
            do {
                let agents = try await rig.withPool(logger: logger, clockSamples: 8) { pool in
                    try await Task.sleep(for: .milliseconds(Int64(seconds * 1000)))
                    return pool.agents.map { AgentStatusOutput($0.snapshot) }
                }
                if output.json {
                    try printJSON(["agents": agents], snakeCase: true)
                } else {
                    print(table(
                        ["AGENT", "OFFSET µs", "DRIFT ppm", "ERROR BOUND µs", "MIN RTT µs", "SAMPLES", "JUMPS", "PROBES"],
                        agents.map { [$0.agent, $0.offsetUs.map { String(format: "%.1f", $0) } ?? "-", $0.driftPpm.map { String(format: "%.2f", $0) } ?? "-",
                                      $0.errorBoundUs.map { String(format: "%.1f", $0) } ?? "-", $0.minRoundTripUs.map { String(format: "%.1f", $0) } ?? "-",
                                      "\($0.samples)", "\($0.clockJumps)", $0.clockTransport ?? "-"] }
                    ))
                }
            } catch {
                throw userFacing(error)
            }
        }
    }
}
