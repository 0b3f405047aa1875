import CamRigText
import CamRigViews
import ArgumentParser
import CamRigCLI
import CamRigClock
import CamRigCoordinator
import CamRigLocalRig
import CamRigWire
import Foundation
import Logging

/// `camrig-bench cold`: what a one-shot command gets from a clock estimate made on a fresh connection.
///
/// Agents with injected clock errors (offset and drift, the truth known) run once on loopback and once
/// in network namespaces behind a LAN-like relay. Then, again and again, a new pool connects to them,
/// as `camrig sync status` or `camrig capture` does, and its estimates are judged against the truth at
/// two moments: when the first eight probes are in (what a command used to wait for) and when the
/// estimate is settled (`ClockEstimate.isSettled`, what a command waits for now). A pool connected for
/// the whole run is judged at the same instants: the warm figures. Each estimate is judged at the
/// moment it is read and one `--horizon` ahead (a trigger's lead, a frame timestamp's age), against the
/// error bound it reports for that instant.
struct ColdStartBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cold",
        abstract: "Clock estimates of fresh connections against the truth and against a warm estimate, on loopback and behind a LAN relay.",
        discussion: "The LAN run needs root (network namespaces); without it only the loopback run is made."
    )

    @Option(name: .long, help: "Agents, each with its own injected clock error.")
    var agents = 4

    @Option(name: .long, help: "Fresh connections (cold starts) per run; each judges every agent's estimate.")
    var starts = 50

    @Option(name: .long, help: "One-way delay of the LAN relay, milliseconds (0 skips the LAN run).")
    var delayMs = 0.5

    @Option(name: .long, help: "Jitter of the LAN relay, ± milliseconds.")
    var jitterMs = 0.1

    @Option(name: .long, help: "Seconds ahead at which every estimate is judged as well.")
    var horizon = 1.0

    @Option(name: .long, help: "Seconds the warm pool probes before the first cold start.")
    var warmUp = 10.0

    @OptionGroup var options: BenchOptions

    /// One way of reading the estimate, judged over every cold start and agent.
    struct Stage: Encodable {
        var stage: String
        /// From the pool's start until the estimate was read (the warm pool: 0).
        var secondsToEstimate: Distribution
        /// |estimate − truth| when read.
        var errorUs: Distribution
        /// The median signed error: a bias shows here.
        var medianSignedErrorUs: Double
        /// The error bound the estimate reports for that instant.
        var boundUs: Distribution
        /// The fraction of estimates whose |error| is within their bound.
        var covered: Double
        /// |estimate − truth| `horizon` seconds after it was read.
        var errorAheadUs: Distribution
        var boundAheadUs: Distribution
        var coveredAhead: Double
    }

    struct Run: Encodable {
        var network: String
        var estimates: Int
        var stages: [Stage]
        /// How the warm pool ended up probing each agent, and its minimum round trips (µs).
        var warmTransports: [String]
        var warmMinimumRoundTripsUs: [Double]
        var warmSamples: [Int]
        var warmJumps: [Int]
    }

    struct Result: BenchResult {
        var scenario = "cold"
        var machine: MachineDescription
        var agents: Int
        var starts: Int
        var horizonSeconds: Double
        var runs: [Run]

        var text: String {
            var lines = ["cold: \(starts) fresh connections to \(agents) agents per run, each estimate judged when read and \(horizonSeconds) s ahead; \(machine.text)"]
            for run in runs {
                lines.append("")
                lines.append("\(run.network): \(run.estimates) estimates per row")
                lines.append(table(
                    ["ESTIMATE", "READY s p50/p99", "|ERR| µs p50/p99/max", "BIAS µs", "BOUND µs p50", "COVERED", "|ERR| AHEAD µs p50/p99", "BOUND AHEAD p50", "COVERED AHEAD"],
                    run.stages.map { stage in
                        [
                            stage.stage,
                            String(format: "%.2f / %.2f", stage.secondsToEstimate.p50, stage.secondsToEstimate.p99),
                            String(format: "%.1f / %.1f / %.1f", stage.errorUs.p50, stage.errorUs.p99, stage.errorUs.max),
                            String(format: "%+.1f", stage.medianSignedErrorUs),
                            String(format: "%.1f", stage.boundUs.p50),
                            String(format: "%.1f%%", 100 * stage.covered),
                            String(format: "%.1f / %.1f", stage.errorAheadUs.p50, stage.errorAheadUs.p99),
                            String(format: "%.1f", stage.boundAheadUs.p50),
                            String(format: "%.1f%%", 100 * stage.coveredAhead),
                        ]
                    }
                ))
            }
            lines.append("COVERED: estimates whose |error| is within the bound they report (goal ≥ 99%). AHEAD: the same estimate judged \(horizonSeconds) s later, as a trigger scheduled that far ahead is.")
            return lines.joined(separator: "\n")
        }
    }

    func validate() throws {
        guard (1...32).contains(agents) else { throw ValidationError("--agents must be within 1…32") }
        guard (1...10_000).contains(starts) else { throw ValidationError("--starts must be within 1…10000") }
        guard horizon >= 0, warmUp >= 0 else { throw ValidationError("--horizon and --warm-up must not be negative") }
    }

    func run() async throws {
        let logger = options.makeLogger("camrig.bench")
        let specs = (0..<agents).map { index in
            let error = HostClock.simulatedError(host: index)
            return LocalAgentSpec(cameras: 1, clockOffsetMicroseconds: error.offsetMicroseconds, clockDriftPPM: error.driftPPM)
        }
        var runs: [Run] = []
        options.say("[loopback] starting \(agents) agents")
        let loopback = try await LoopbackRig(agents: specs)
        runs.append(try await loopback.run {
            try await measure(network: "loopback", endpoints: loopback.endpoints, security: try loopback.clientSecurity(), members: loopback.members, logger: logger)
        })
        if delayMs > 0 {
            if let reason = HostNetwork.unavailableReason {
                options.say("no LAN run: \(reason)")
            } else {
                let label = String(format: "LAN relay %.1f ms ± %.1f ms", delayMs, jitterMs)
                options.say("[\(label)] starting \(agents) agents in network namespaces")
                let conditions = PathConditions.lan(delay: .microseconds(Int64(delayMs * 1000)), jitter: .microseconds(Int64(jitterMs * 1000)))
                let networked = try await NetworkedRig.start(
                    agents: specs.map { NetworkedRig.AgentSpec(cameras: 1, clockOffsetMicroseconds: $0.clockOffsetMicroseconds, clockDriftPPM: $0.clockDriftPPM, conditions: conditions) },
                    agentExecutable: try LocalAgentProcess.executable(), seed: 7)
                defer { networked.shutdown() }
                runs.append(try await measure(network: label, endpoints: networked.endpoints, security: try networked.clientSecurity(), members: networked.members, logger: logger))
            }
        }
        try options.emit(Result(machine: .current, agents: agents, starts: starts, horizonSeconds: horizon, runs: runs))
    }

    /// One judged reading: signed error and bound now and `horizon` ahead, nanoseconds.
    struct Reading {
        var seconds: Double
        var error: Double
        var bound: Double
        var errorAhead: Double
        var boundAhead: Double
    }

    func measure(network: String, endpoints: [AgentEndpoint], security: ClientSecurity, members: [some SimulatedAgent], logger: Logger) async throws -> Run {
        let ahead = Int64(horizon * 1e9)
        func judge(_ pool: AgentPool, since start: ContinuousClock.Instant?) -> [Reading] {
            let now = HostClock.monotonicNow()
            let seconds = start.map { (ContinuousClock.now - $0).seconds } ?? 0
            return zip(pool.agents, members).compactMap { agent, member in
                guard let estimate = try? agent.clockEstimate() else { return nil }
                return Reading(
                    seconds: seconds,
                    error: member.offsetError(of: estimate, at: now), bound: estimate.errorBound(atCoordinator: now),
                    errorAhead: member.offsetError(of: estimate, at: now + ahead), boundAhead: estimate.errorBound(atCoordinator: now + ahead))
            }
        }

        let warm = AgentPool(endpoints: endpoints, security: security, logger: logger)
        warm.start()
        defer { Task { await warm.stop() } }
        guard await warm.waitUntilReady(clockSamples: 8, timeout: .seconds(30)).isEmpty else {
            throw CommandFailure("[\(network)] agents not ready within 30 s")
        }
        options.say("[\(network)] warm pool probing for \(warmUp) s")
        try await Task.sleep(for: .milliseconds(Int64(warmUp * 1000)))

        var firstEight: [Reading] = []
        var settled: [Reading] = []
        var warmReadings: [Reading] = []
        for index in 0..<starts {
            let pool = AgentPool(endpoints: endpoints, security: security, logger: logger)
            let start = ContinuousClock.now
            pool.start()
            let notReady = await pool.waitUntilReady(clockSamples: 8, timeout: .seconds(30))
            firstEight += judge(pool, since: start)
            let unsettled = await pool.waitUntilSettled(timeout: .seconds(30))
            settled += judge(pool, since: start)
            warmReadings += judge(warm, since: nil)
            await pool.stop()
            if !notReady.isEmpty || !unsettled.isEmpty {
                options.say("  start \(index + 1): not ready \(notReady.map(\.name)), not settled \(unsettled.map(\.name))")
            }
            if (index + 1) % 10 == 0 { options.say("  \(index + 1)/\(starts)") }
        }
        let warmSnapshots = warm.agents.map(\.snapshot)
        await warm.stop()
        return Run(
            network: network, estimates: settled.count,
            stages: [
                stage("first 8 probes", firstEight),
                stage("settled", settled),
                stage(String(format: "warm (%.0f s+)", warmUp), warmReadings),
            ],
            warmTransports: warmSnapshots.map { $0.clockTransport?.rawValue ?? "none" },
            warmMinimumRoundTripsUs: warmSnapshots.map { Double($0.clock?.minimumRoundTrip ?? 0) / 1000 },
            warmSamples: warmSnapshots.map(\.clockSamples), warmJumps: warmSnapshots.map(\.clockJumps))
    }

    func stage(_ name: String, _ readings: [Reading]) -> Stage {
        let count = Double(max(readings.count, 1))
        return Stage(
            stage: name,
            secondsToEstimate: Distribution(readings.map(\.seconds)),
            errorUs: Distribution(readings.map { abs($0.error) / 1000 }),
            medianSignedErrorUs: Distribution(readings.map { $0.error / 1000 }).p50,
            boundUs: Distribution(readings.map { $0.bound / 1000 }),
            covered: Double(readings.filter { abs($0.error) <= $0.bound }.count) / count,
            errorAheadUs: Distribution(readings.map { abs($0.errorAhead) / 1000 }),
            boundAheadUs: Distribution(readings.map { $0.boundAhead / 1000 }),
            coveredAhead: Double(readings.filter { abs($0.errorAhead) <= $0.boundAhead }.count) / count)
    }
}
