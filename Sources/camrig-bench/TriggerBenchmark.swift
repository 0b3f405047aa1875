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
import NIOConcurrencyHelpers

/// `camrig-bench triggers`: how late an agent's trigger thread fires, with real-time scheduling and
/// without, on a quiet machine and with every core kept busy by other threads.
///
/// Two agents on this host (one with the defaults, which ask for SCHED_FIFO, a 1 ns timer slack and
/// locked memory; one with `--no-realtime`) each take photo triggers one after another, 30 ms ahead.
/// The agents' clocks are this host's, so T is written in it directly. Each `TriggerFired` says how
/// late the trigger thread fired (`lateness_ns`); the load is one spinning thread per core in this
/// process, at normal priority.
struct TriggerBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "triggers",
        abstract: "Trigger lateness on an agent, real-time scheduling on and off, quiet and with every core busy."
    )

    @Option(name: .long, help: "Triggers per agent and condition.")
    var count = 200

    @OptionGroup var options: BenchOptions

    struct Row: Encodable {
        var scheduling: String
        var load: String
        /// Lateness of the trigger thread, µs.
        var latenessUs: Distribution
        /// How many triggers fired within each bound (µs, the last open-ended).
        var histogram: [Bucket]
    }

    struct Bucket: Encodable {
        var upToUs: Double?
        var count: Int
    }

    struct Result: BenchResult {
        var scenario = "triggers"
        var machine: MachineDescription
        var realtimeGranted: Bool
        var rows: [Row]

        var text: String {
            let bounds = rows.first?.histogram.map { $0.upToUs.map { "≤\(Int($0))" } ?? "more" } ?? []
            return [
                "triggers: lateness of an agent's trigger thread, \(rows.first?.latenessUs.count ?? 0) photo triggers per row; load = one spinning thread per core; real-time \(realtimeGranted ? "granted" : "refused (see the agent's log)"); \(machine.text)",
                table(
                    ["SCHEDULING", "LOAD", "P50 µs", "P99 µs", "MAX µs"] + bounds.map { "\($0) µs" },
                    rows.map { row in
                        [row.scheduling, row.load, String(format: "%.1f", row.latenessUs.p50), String(format: "%.1f", row.latenessUs.p99),
                         String(format: "%.1f", row.latenessUs.max)] + row.histogram.map { "\($0.count)" }
                    }
                ),
            ].joined(separator: "\n")
        }
    }

    func run() async throws {
        try await options.runOnLoopbackRig(
            agents: [LocalAgentSpec(cameras: 1, extraArguments: ["--log-level", "info"]), LocalAgentSpec(cameras: 1, extraArguments: ["--no-realtime"])], measure)
    }

    static let bounds: [Double] = [10, 50, 100, 500, 1_000, 5_000]

    func measure(_ rig: LoopbackRig, logger: Logger) async throws -> Result {
        let security = try rig.clientSecurity()
        let members = rig.members
        let modes = [("SCHED_FIFO", members[0]), ("normal (--no-realtime)", members[1])]
        var rows: [Row] = []
        for loaded in [false, true] {
            let load = loaded ? CPULoad(threads: ProcessInfo.processInfo.activeProcessorCount) : nil
            for (scheduling, member) in modes {
                options.say("\(count) triggers, \(scheduling), \(loaded ? "every core busy" : "quiet")")
                let client = try await AgentClient.connect(to: member.endpoint, security: security, logger: logger)
                let lateness = try await Self.lateness(client: client, count: count, session: "bench-\(member.name)")
                await client.close()
                let histogram = Self.bounds.map { bound in Bucket(upToUs: bound, count: 0) } + [Bucket(upToUs: nil, count: 0)]
                var counted = histogram
                for value in lateness {
                    let index = Self.bounds.firstIndex { value <= $0 } ?? Self.bounds.count
                    counted[index].count += 1
                }
                rows.append(Row(scheduling: scheduling, load: loaded ? "all cores" : "quiet", latenessUs: Distribution(lateness), histogram: counted))
            }
            load?.stop()
        }
        let granted = members[0].process.log().contains("trigger thread runs with real-time priority")
        return Result(machine: .current, realtimeGranted: granted, rows: rows)
    }

    /// Fires `count` photo triggers one after another, each 30 ms ahead, and returns how late each fired, µs.
    static func lateness(client: AgentClient, count: Int, session: String) async throws -> [Double] {
        var values: [Double] = []
        var fired: [String] = []
        for index in 0..<count {
            var trigger = WireScheduleTrigger()
            trigger.triggerID = "\(session)-\(index)"
            trigger.action = .capturePhoto
            trigger.deviceIds = ["synthetic:SYN0001"]
            trigger.sessionID = session
            // The agent runs on this host's clock: T is written in it directly.
            trigger.fireAtNs = HostClock.monotonicNow() + 30_000_000
            // Fired 30 ms ahead, its stream ends once the photo is in the spool: well within 30 s, even
            // with every core busy.
            let firings = try await withDeadline(
                .seconds(30), "agent \(client.endpoint): trigger \(trigger.triggerID) to fire and its stream to end"
            ) { [trigger] in
                var firings: [(latenessUs: Double, resultIDs: [String])] = []
                for try await frame in client.stream(.scheduleTrigger(trigger)) {
                    if case .triggerFired(let firing) = frame.envelope.body {
                        firings.append((Double(firing.latenessNs) / 1_000, firing.resultIds))
                    }
                }
                return firings
            }
            for firing in firings {
                values.append(firing.latenessUs)
                fired += firing.resultIDs
            }
            // The photos leave the agent's spool as they would with a coordinator.
            if fired.count >= 32 {
                try await client.acknowledge(fired)
                fired.removeAll()
            }
        }
        if !fired.isEmpty { try await client.acknowledge(fired) }
        return values
    }
}

/// Threads that keep every core busy until stopped, at normal priority.
final class CPULoad: Sendable {
    private let running = NIOLockedValueBox(true)

    init(threads: Int) {
        for index in 0..<threads {
            let thread = Thread { [running] in
                var spins: UInt64 = 0
                while true {
                    for _ in 0..<100_000 { spins &+= 1 }
                    if !running.withLockedValue({ $0 }) { break }
                }
                _ = spins
            }
            thread.name = "bench-load-\(index)"
            thread.start()
        }
    }

    func stop() {
        running.withLockedValue { $0 = false }
    }
}
