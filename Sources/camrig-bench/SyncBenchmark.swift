import CamRigDeviceModel
import CamRigText
import CamRigViews
import ArgumentParser
import CamRigCLI
import CamRigClock
import CamRigCoordinator
import CamRigDevices
import CamRigLocalRig
import CamRigStorage
import Foundation
import Logging

/// `camrig-bench sync`: N agents in their own network namespaces behind relays that add LAN delay and
/// jitter (once symmetric, once with asymmetry), with distinct injected clock errors. Measures the
/// coordinator's offset estimates against the truth and the true skew of scheduled triggers, with
/// chrony (`chronyd -x`) estimating through the same relays at the same time as the baseline.
struct SyncBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sync",
        abstract: "Clock-offset error and trigger skew across namespaced agents behind a delaying relay, against chrony.",
        discussion: "Needs root (network namespaces) and chronyd (Debian's chrony)."
    )

    @Option(name: .long, help: "Agents, one per network namespace.")
    var agents = 8

    @Option(name: .long, help: "Scheduled photo triggers per run.")
    var triggers = 100

    @Option(name: .long, help: "One-way delay of the relay, milliseconds.")
    var delayMs = 0.5

    @Option(name: .long, help: "Jitter of the relay, ± milliseconds.")
    var jitterMs = 0.1

    @Option(name: .long, help: "Asymmetry of the second run, milliseconds (0 skips that run).")
    var asymmetryMs = 0.2

    @Option(name: .long, help: "Seconds both sides get to converge before measuring.")
    var warmUp = 10.0

    @Option(name: .long, help: "Probe and poll interval, as a power of two seconds (chrony's minpoll; -4 is 62.5 ms).")
    var pollLog2 = -4

    @OptionGroup var options: BenchOptions

    struct Run: Encodable {
        var asymmetryMs: Double
        var conditions: String
        /// |estimate − truth| over every agent and sample.
        var camrigOffsetErrorUs: Distribution
        var chronyOffsetErrorUs: Distribution
        /// Median of the signed errors (agent − coordinator convention for both): a bias, such as path
        /// asymmetry, shows here.
        var camrigMedianSignedErrorUs: Double
        var chronyMedianSignedErrorUs: Double
        var offsetP99Ratio: Double
        var triggerTrueSkewUs: Distribution
        var triggerSkewInCoordinatorClockUs: Distribution
        var incompleteSets: Int
        var triggers: Int
        /// How the coordinator probed each agent's clock (udp-kernel: the UDP channel with kernel timestamps).
        var clockTransports: [String]
    }

    struct Result: BenchResult {
        var scenario = "sync"
        var machine: MachineDescription
        var agents: Int
        var pollIntervalMs: Double
        var runs: [Run]

        var text: String {
            var lines = ["sync: \(agents) agents in network namespaces behind relays, probes and chrony polls every \(pollIntervalMs) ms; \(machine.text)"]
            lines.append(table(
                ["RUN", "CAMRIG |ERR| µs p50/p99/max", "BIAS µs", "CHRONY |ERR| µs p50/p99/max", "BIAS µs", "P99 RATIO", "TRIGGER TRUE SKEW µs p50/p99/max", "INCOMPLETE"],
                runs.map { run in
                    let d = { (x: Distribution) in String(format: "%.1f / %.1f / %.1f", x.p50, x.p99, x.max) }
                    return [
                        run.conditions, d(run.camrigOffsetErrorUs), String(format: "%+.1f", run.camrigMedianSignedErrorUs),
                        d(run.chronyOffsetErrorUs), String(format: "%+.1f", run.chronyMedianSignedErrorUs), times(run.offsetP99Ratio),
                        d(run.triggerTrueSkewUs), "\(run.incompleteSets)/\(run.triggers)",
                    ]
                }
            ))
            lines.append("P99 RATIO is CamRig's p99 offset error over chrony's (≤ 1.00× means no worse than chrony). BIAS is the median signed error (agent − coordinator).")
            return lines.joined(separator: "\n")
        }
    }

    func validate() throws {
        guard (1...64).contains(agents) else { throw ValidationError("--agents must be within 1…64") }
        guard (1...10_000).contains(triggers) else { throw ValidationError("--triggers must be within 1…10000") }
        guard (-6...4).contains(pollLog2) else { throw ValidationError("--poll-log2 must be within -6…4") }
    }

    func run() async throws {
        if let reason = HostNetwork.unavailableReason { throw CommandFailure("the sync scenario needs network namespaces: \(reason)") }
        guard ChronyBaseline.chronyd != nil else { throw CommandFailure("chronyd is not installed (apt-get install chrony); it is the sync scenario's baseline") }
        var runs: [Run] = []
        for asymmetry in asymmetryMs > 0 ? [0, asymmetryMs] : [0] {
            runs.append(try await measure(asymmetryMs: asymmetry))
        }
        try options.emit(Result(machine: .current, agents: agents, pollIntervalMs: 1000 * pow(2, Double(pollLog2)), runs: runs))
    }

    func measure(asymmetryMs: Double) async throws -> Run {
        let logger = options.makeLogger("camrig.bench")
        let conditions = PathConditions.lan(
            delay: .microseconds(Int64(delayMs * 1000)), jitter: .microseconds(Int64(jitterMs * 1000)), asymmetry: .microseconds(Int64(asymmetryMs * 1000))
        )
        let label = String(format: "%.1f ms ± %.1f ms%@", delayMs, jitterMs, asymmetryMs > 0 ? String(format: ", %.1f ms asymmetric", asymmetryMs) : "")
        options.say("[\(label)] starting \(agents) agents in namespaces, and chrony")
        let specs = (0..<agents).map { index in
            let error = HostClock.simulatedError(host: index)
            return NetworkedRig.AgentSpec(cameras: 1, clockOffsetMicroseconds: error.offsetMicroseconds, clockDriftPPM: error.driftPPM, conditions: conditions)
        }
        let rig = try await NetworkedRig.start(agents: specs, agentExecutable: try LocalAgentProcess.executable(), seed: 42)
        defer { rig.shutdown() }
        let chrony = try ChronyBaseline(rig: rig, conditions: conditions, pollLog2: pollLog2, seed: 4242, work: rig.work.appendingPathComponent("chrony"))
        defer { chrony.stop() }

        var timing = RemoteAgent.Timing()
        timing.probeInterval = .nanoseconds(Int64(1e9 * pow(2, Double(pollLog2))))
        let pool = AgentPool(endpoints: rig.endpoints, security: try rig.clientSecurity(), timing: timing, logger: logger)
        pool.start()
        defer { Task { await pool.stop() } }
        let notReady = await pool.waitUntilReady(clockSamples: 16, timeout: .seconds(30))
        guard notReady.isEmpty else {
            throw CommandFailure("agents not ready: \(notReady.map(\.name).joined(separator: ", "))\n\(rig.logs())")
        }
        options.say("[\(label)] converging for \(warmUp) s")
        try await Task.sleep(for: .milliseconds(Int64(warmUp * 1000)))
        let measuringSince = Date()

        // Offset errors against the truth, sampled while the triggers run.
        let sampler = Task { () -> [Double] in
            var errors: [Double] = []
            while !Task.isCancelled {
                let now = HostClock.monotonicNow()
                for (agent, member) in zip(pool.agents, rig.members) {
                    guard let estimate = try? agent.clockEstimate() else { continue }
                    errors.append(member.offsetError(of: estimate, at: now) / 1000)
                }
                try? await Task.sleep(for: .milliseconds(250))
            }
            return errors
        }

        options.say("[\(label)] \(triggers) scheduled photo triggers across \(agents) agents")
        let store = try CaptureStore(root: rig.work.appendingPathComponent("captures"))
        let session = try await openSession(pool: pool, size: Dimensions(width: 640, height: 480), fps: 30, logger: logger)
        try await session.commitConfiguration()
        var trueSkews: [Double] = []
        var coordinatorSkews: [Double] = []
        var incomplete = 0
        for index in 0..<triggers {
            // A 640×480 photo is gathered within a second or two; a minute turns a lost one into an error.
            let report = try await withDeadline(.seconds(60) + .milliseconds(100 * agents), "[\(label)] photo \(index + 1) of \(triggers) across \(agents) agents") {
                try await session.capturePhoto(into: store)
            }
            try? FileManager.default.removeItem(at: report.directory)
            guard let set = report.manifest.sets.first, set.complete else {
                incomplete += 1
                continue
            }
            let span = report.manifest.trueSpan(of: set) { rig.member(named: $0.agent)?.clock ?? .system }
            trueSkews.append(Double(span) / 1000)
            coordinatorSkews.append(Double(set.skewNs) / 1000)
            if (index + 1) % 25 == 0 { options.say("  \(index + 1)/\(triggers)") }
        }
        await session.stop()
        let transports = pool.agents.map { $0.snapshot.clockTransport?.rawValue ?? "none" }
        sampler.cancel()
        let camrigSigned = await sampler.value
        let camrigErrors = camrigSigned.map(abs)
        await pool.stop()
        // chrony's "Est. offset" has the agent − coordinator sign (checked: a longer path towards the
        // agent moves both CamRig's and chrony's estimates the same way).
        let chronySigned = chrony.estimates(since: measuringSince).flatMap { $0 }
        let chronyErrors = chronySigned.map(abs)
        guard !chronyErrors.isEmpty else { throw CommandFailure("chrony logged no estimates\n\(chrony.logs())") }
        let camrig = Distribution(camrigErrors)
        let baseline = Distribution(chronyErrors)
        return Run(
            asymmetryMs: asymmetryMs, conditions: label,
            camrigOffsetErrorUs: camrig, chronyOffsetErrorUs: baseline,
            camrigMedianSignedErrorUs: Distribution(camrigSigned).p50, chronyMedianSignedErrorUs: Distribution(chronySigned).p50,
            offsetP99Ratio: ratio(camrig.p99, baseline.p99),
            triggerTrueSkewUs: Distribution(trueSkews), triggerSkewInCoordinatorClockUs: Distribution(coordinatorSkews),
            incompleteSets: incomplete, triggers: triggers, clockTransports: transports
        )
    }
}
