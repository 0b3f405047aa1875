import ArgumentParser
import CamRigCLI
import CamRigClock
import CamRigCoordinator
import CamRigDeviceModel
import CamRigDevices
import CamRigLocalRig
import CamRigStorage
import CamRigText
import Foundation
import Logging

/// `camrig-bench scale`: one coordinator and K agent processes (two synthetic cameras each) over TLS
/// on loopback: time to connect them all, to commit one session across every camera, to fan out one
/// trigger and to gather its sync set, and the coordinator's resident memory per connected agent.
struct ScaleBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "scale",
        abstract: "One coordinator, K agents: connect, commit, trigger fan-out, gather, memory per agent."
    )

    @Option(name: .long, help: "Agent processes.")
    var agents = 200

    @Option(name: .long, help: "Synthetic cameras per agent.")
    var cameras = 2

    @Flag(name: .long, help: "Run the agents as simulated hosts in one camrig-agent process (--hosts), not one process each: how 1000 agents fit on one machine.")
    var oneProcess = false

    @OptionGroup var options: BenchOptions

    struct Result: BenchResult {
        var scenario = "scale"
        var machine: MachineDescription
        var agents: Int
        var cameras: Int
        /// "processes" (one per agent) or "one-process" (simulated hosts).
        var agentProcesses: String
        var connectAllSeconds: Double
        var clocksReadySeconds: Double
        var commitSeconds: Double
        /// How far ahead of the photo's instant its triggers left: the fan-out must fit in it.
        var triggerLeadMs: Double
        /// Every trigger handed to its socket, from the plan: the coordinator's own share of the fan-out.
        var triggersSentMs: Double
        /// CPU time the coordinator's event loops spent writing the triggers, summed over loops.
        var triggerWritingCpuMs: Double
        /// Every agent's acceptance read back: includes the agents' work, which in a simulated rig runs
        /// on the coordinator's cores too.
        var triggerFanOutMs: Double
        var gatherAfterTriggerMs: Double
        var photosDelivered: Int
        /// Every photo's count, in order (the first with the lead's default allowance).
        var photosDeliveredPerCapture: [Int]
        var coordinatorRssBeforeKb: Int
        var coordinatorRssConnectedKb: Int
        var coordinatorKbPerAgent: Double
        var agentRssKbMedian: Int

        var text: String {
            [
                "scale: one coordinator, \(agents) agents (\(agentProcesses == "one-process" ? "simulated hosts in one process" : "one process each")) × \(cameras) synthetic cameras (MJPEG 640×480, 10 fps), TLS on loopback; \(machine.text)",
                table(
                    ["MEASURE", "VALUE", "TARGET"],
                    [
                        ["connect all agents", String(format: "%.2f s", connectAllSeconds), ""],
                        ["clocks measured (16 samples each)", String(format: "%.2f s", clocksReadySeconds), ""],
                        ["commit one session (\(agents * cameras) cameras)", String(format: "%.3f s", commitSeconds), "< 2 s"],
                        ["trigger lead (instant − send)", String(format: "%.1f ms", triggerLeadMs), ""],
                        ["trigger fan-out (all sent)", String(format: "%.1f ms", triggersSentMs), "< 10 ms"],
                        ["  CPU writing them (all loops)", String(format: "%.1f ms", triggerWritingCpuMs), ""],
                        ["trigger fan-out (all accepted)", String(format: "%.1f ms", triggerFanOutMs), ""],
                        ["sync set on disk, after T", String(format: "%.0f ms", gatherAfterTriggerMs), ""],
                        ["photos in the set (first, second)", photosDeliveredPerCapture.map { "\($0)" }.joined(separator: ", ") + " of \(agents * cameras)", ""],
                        ["coordinator memory per agent", String(format: "%.0f KB", coordinatorKbPerAgent), "< 200 KB"],
                        [agentProcesses == "one-process" ? "agent memory per simulated host" : "agent process memory (median)", "\(agentRssKbMedian) KB", ""],
                    ]
                ),
            ].joined(separator: "\n")
        }
    }

    func validate() throws {
        guard (1...4000).contains(agents) else { throw ValidationError("--agents must be within 1…4000") }
        guard (1...8).contains(cameras) else { throw ValidationError("--cameras must be within 1…8") }
    }

    func run() async throws {
        try await options.runOnLoopbackRig(measure)
    }

    func measure(_ rig: LoopbackRig, logger: Logger) async throws -> Result {
        let total = agents
        if oneProcess {
            options.say("starting \(agents) simulated hosts in one process with \(cameras) synthetic cameras each")
            try await rig.startHostSimulation(count: agents, cameras: cameras) { [options] step in options.say("  \(step)") }
        } else {
            options.say("starting \(agents) agent processes with \(cameras) synthetic cameras each")
            try await rig.startAgents(LocalAgentSpec.simulated(count: agents, cameras: cameras, clockErrors: false)) { [options] started in
                if started % 50 == 0 || started == total { options.say("  \(started)/\(total)") }
            }
        }
        let processes = LoopbackRig.processes(of: rig.members)
        let before = ResidentMemory.kilobytes() ?? 0

        options.say("connecting")
        let start = ContinuousClock.now
        let pool = AgentPool(endpoints: rig.endpoints, security: try rig.clientSecurity(), logger: logger)
        pool.start()
        let connected = await withTaskGroup(of: Bool.self) { group in
            for agent in pool.agents { group.addTask { await agent.waitUntilConnected(timeout: .seconds(120)) } }
            return await group.reduce(true) { $0 && $1 }
        }
        let connectTime = ContinuousClock.now - start
        guard connected else {
            await pool.stop()
            throw CommandFailure("not every agent connected within 120 s")
        }
        let notReady = await pool.waitUntilReady(clockSamples: 16, timeout: .seconds(120))
        let readyTime = ContinuousClock.now - start
        guard notReady.isEmpty else {
            await pool.stop()
            throw CommandFailure("\(notReady.count) agents had no clock estimate after 120 s")
        }
        let connectedRSS = ResidentMemory.kilobytes() ?? 0

        options.say("committing one session across \(agents * cameras) cameras")
        // Motion JPEG at 10 fps: this measures the coordinator. The simulated cameras share its cores,
        // and two thousand of them rendering raw VGA at 30 fps (36 GB/s) would measure the renderer.
        let session = try await openSession(
            pool: pool, size: Dimensions(width: 640, height: 480), pixelFormat: .mjpeg, fps: 10, logger: logger)
        let commitStart = ContinuousClock.now
        try await session.commitConfiguration()
        let commitTime = ContinuousClock.now - commitStart

        // Two photos: the first with the lead's allowance per agent, the second with room for the fan-out
        // the first measured. The figures are the second's; every photo's count is kept.
        let store = try CaptureStore(root: rig.work.appendingPathComponent("captures"))
        var delivered: [Int] = []
        var photoStart: Int64 = 0
        var last: CaptureReport?
        for number in 1...2 {
            options.say("synchronized photo \(number) of 2")
            photoStart = HostClock.monotonicNow()
            // Gathering a photo of every camera into the store takes seconds per thousand cameras in a debug
            // build: two minutes, and a tenth of a second per camera.
            let report = try await withDeadline(
                .seconds(120) + .milliseconds(100 * agents * cameras), "synchronized photo \(number) of 2 across \(agents * cameras) cameras"
            ) {
                try await session.capturePhoto(into: store)
            }
            // A photo missing from the set is reported with its camera's reason, not only counted.
            for camera in report.manifest.cameras where camera.framesDelivered == 0 {
                FileHandle.standardError.write(Data("photo \(number): no photo from \(camera.name): \(camera.error ?? "no reason given")\n".utf8))
            }
            delivered.append(report.manifest.summary.framesDelivered)
            last = report
        }
        guard let report = last else { throw CommandFailure("no photo was taken") }
        await session.stop()
        await pool.stop()
        let agentRSS = oneProcess ? processes.compactMap(\.residentKilobytes).map { $0 / agents } : processes.compactMap(\.residentKilobytes).sorted()
        return Result(
            machine: .current, agents: agents, cameras: cameras, agentProcesses: oneProcess ? "one-process" : "processes",
            connectAllSeconds: connectTime.seconds, clocksReadySeconds: readyTime.seconds, commitSeconds: commitTime.seconds,
            triggerLeadMs: Double((report.manifest.sets.first?.referenceTimeNs ?? photoStart) - photoStart) / 1e6,
            triggersSentMs: (report.triggersSent?.microseconds ?? .nan) / 1000,
            triggerWritingCpuMs: (report.triggerWritingCPU?.microseconds ?? .nan) / 1000,
            triggerFanOutMs: (report.triggerFanOut?.microseconds ?? .nan) / 1000,
            gatherAfterTriggerMs: (report.gatheredAfterTrigger?.microseconds ?? .nan) / 1000,
            photosDelivered: report.manifest.summary.framesDelivered,
            photosDeliveredPerCapture: delivered,
            coordinatorRssBeforeKb: before, coordinatorRssConnectedKb: connectedRSS,
            coordinatorKbPerAgent: Double(connectedRSS - before) / Double(agents),
            agentRssKbMedian: agentRSS.isEmpty ? 0 : agentRSS[agentRSS.count / 2]
        )
    }
}
