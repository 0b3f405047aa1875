import ArgumentParser
import CamRigCLI
import CamRigCapture
import CamRigClock
import CamRigCoordinator
import CamRigDeviceModel
import CamRigDevices
import CamRigLocalRig
import CamRigStorage
import CamRigText
import CamRigWire
import Foundation
import Logging
import NIOConcurrencyHelpers

/// `camrig-bench soak`: hosts in network namespaces run through repeated photos, streamed recordings and
/// on-host recordings while faults are injected (agent kill -9 and restart, link cuts, 5% loss on some
/// links, clock steps; for on-host recordings also the coordinator killed with SIGKILL while recording or
/// offloading, and the S3 store stopped while offloading), then every result is accounted for: delivered
/// once, or reported lost with a reason; nothing left on the hosts, no multipart upload left open. Memory
/// of the coordinator and the agents is sampled over the run.
///
/// On-host recordings are made as a user makes them: `camrig record` in a process of its own, offloading
/// to a folder or to the store (OpenStack Swift's s3api, `scripts/object-store`) in turn, and finished
/// after a failure with `camrig captures recover`.
struct SoakBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "soak",
        abstract: "Photos and recordings under injected faults; every result accounted for, memory over time.",
        discussion: "Needs root (network namespaces)."
    )

    @Option(name: .long, help: "Minutes of captures under faults.")
    var minutes = 5.0

    @Option(name: .long, help: "Hosts, one synthetic camera each.")
    var agents = 8

    @Option(name: .long, help: "Hosts whose links lose this share of packets each way (the first ones).")
    var lossHosts = 2

    @Option(name: .long, help: "Share of packets lost on those links.")
    var loss = 0.05

    @Option(name: .long, help: "Mean seconds between faults.")
    var faultEvery = 15.0

    @Option(name: .long, help: "Every Nth capture is a recording (the others are photos).")
    var recordEvery = 4

    @Option(name: .long, help: "Seconds per recording.")
    var recordSeconds = 3.0

    @Option(name: .long, help: "Every Nth capture is an on-host recording made by `camrig record` (0: none); it takes the turn of a photo or streamed recording.")
    var hostRecordEvery = 5

    @Option(name: .long, help: "Seconds per on-host recording.")
    var hostRecordSeconds = 3.0

    @Flag(name: .long, help: "Keep the hosts' folder (captures, the store's objects, the agents' spools and logs) for inspection.")
    var keep = false

    @Option(name: .long, help: "Seed of the fault schedule and the links.")
    var seed: UInt64 = 1

    @OptionGroup var options: BenchOptions

    struct Fault: Encodable {
        var kind: String
        var agent: String
        var atSeconds: Double
        var forSeconds: Double
    }

    struct MemorySample: Encodable {
        var atSeconds: Double
        var coordinatorKb: Int
        var agentMedianKb: Int
        var agentMaxKb: Int
    }

    struct Accounting: Encodable {
        var photos: Int
        var photoResultsExpected: Int
        var photoResultsDelivered: Int
        /// Delivered by a later collection (their agent was cut off, restarted or down while the photo
        /// was gathered).
        var photoResultsCollectedLater: Int
        var photoResultsLost: Int
        var lostReasons: [String: Int]
        var recordings: Int
        var recordingFramesDelivered: Int
        var recordingFramesReportedDropped: Int
        var incompleteRecordings: Int
        /// Results neither delivered nor reported lost: must be 0.
        var unaccounted: Int
        /// Results stored twice: must be 0.
        var duplicates: Int
        /// Results left in the agents' spools at the end: must be 0.
        var leftInSpools: Int
        /// Captures that did not finish within a minute: must be 0.
        var hung: Int
        /// Agents not reachable at the end, whose spools could not be checked: must be empty.
        var spoolsUnchecked: [String] = []
        /// Recording frames a camera did not deliver because its stream ended early (agent killed,
        /// link cut), each camera's manifest entry saying why.
        var recordingFramesLost = 0
        var roundsSkipped: Int
        var skipReasons: [String: Int]
        /// Streamed recordings with frames unaccounted for, and each camera's delivered/expected.
        var recordingsWithUnaccountedFrames: [String] = []
    }

    struct Result: BenchResult {
        var scenario = "soak"
        var machine: MachineDescription
        var agents: Int
        var minutes: Double
        var lossHosts: Int
        var loss: Double
        var faults: [Fault]
        var accounting: Accounting
        var hostRecordings: HostRecordingAccounting
        var memory: [MemorySample]

        var text: String {
            let a = accounting
            var lines = [
                "soak: \(agents) hosts in namespaces, \(String(format: "%.0f", minutes)) min, \(lossHosts) links at \(Int(loss * 100))% loss; \(machine.text)"
            ]
            let kinds = Dictionary(grouping: faults, by: \.kind).mapValues(\.count).sorted { $0.key < $1.key }
            lines.append("faults: " + kinds.map { "\($0.value) \($0.key)" }.joined(separator: ", "))
            lines.append(table(
                ["CAPTURES", "RESULTS", "DELIVERED", "OF WHICH LATER", "LOST (REPORTED)", "UNACCOUNTED", "DUPLICATES", "LEFT IN SPOOLS", "HUNG"],
                [[
                    "\(a.photos) photos, \(a.recordings) recordings", "\(a.photoResultsExpected) photos", "\(a.photoResultsDelivered)",
                    "\(a.photoResultsCollectedLater)", "\(a.photoResultsLost)", "\(a.unaccounted)", "\(a.duplicates)", "\(a.leftInSpools)", "\(a.hung)",
                ]]))
            lines.append("recording frames: \(a.recordingFramesDelivered) delivered, \(a.recordingFramesReportedDropped) reported dropped, \(a.recordingFramesLost) lost with their stream (reason in the manifest); \(a.incompleteRecordings) of \(a.recordings) recordings incomplete")
            if !a.spoolsUnchecked.isEmpty { lines.append("SPOOLS NOT CHECKED (agents unreachable at the end): \(a.spoolsUnchecked.joined(separator: ", "))") }
            for (reason, count) in a.lostReasons.sorted(by: { $0.value > $1.value }) { lines.append("  lost \(count)× \(reason)") }
            for line in a.recordingsWithUnaccountedFrames { lines.append("  frames unaccounted in \(line)") }
            lines += hostRecordings.text
            if a.roundsSkipped > 0 {
                lines.append("rounds skipped (no session could be committed): \(a.roundsSkipped)")
                for (reason, count) in a.skipReasons.sorted(by: { $0.value > $1.value }) { lines.append("  \(count)× \(reason)") }
            }
            lines.append(table(
                ["MINUTE", "COORDINATOR RSS MB", "AGENT RSS MB median", "max"],
                memory.map { [String(format: "%.1f", $0.atSeconds / 60), mb($0.coordinatorKb), mb($0.agentMedianKb), mb($0.agentMaxKb)] }))
            return lines.joined(separator: "\n")
        }

        func mb(_ kb: Int) -> String { String(format: "%.1f", Double(kb) / 1024) }
    }

    func validate() throws {
        guard minutes > 0, (2...16).contains(agents), (0...agents).contains(lossHosts), faultEvery > 1, recordEvery >= 1,
            hostRecordEvery >= 0, hostRecordSeconds > 0
        else {
            throw ValidationError("--minutes > 0, --agents 2…16, --loss-hosts ≤ --agents, --fault-every > 1, --record-every ≥ 1, --host-record-every ≥ 0, --host-record-seconds > 0")
        }
    }

    func run() async throws {
        if let reason = HostNetwork.unavailableReason { throw CommandFailure("the soak needs network namespaces: \(reason)") }
        let logger = options.makeLogger("camrig.bench")
        let specs = (0..<agents).map { index in
            let error = HostClock.simulatedError(host: index)
            return NetworkedRig.AgentSpec(
                cameras: 1, clockOffsetMicroseconds: error.offsetMicroseconds, clockDriftPPM: error.driftPPM,
                conditions: .lan(delay: .microseconds(250), jitter: .microseconds(50), loss: index < lossHosts ? loss : 0))
        }
        options.say("starting \(agents) hosts in namespaces")
        var kept: URL?
        if keep {
            let folder = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("camrig-soak-rig-\(getpid())")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            options.say("keeping the hosts' folder: \(folder.path)")
            kept = folder
        }
        let rig = try await NetworkedRig.start(agents: specs, agentExecutable: try LocalAgentProcess.executable(), seed: seed, work: kept)
        defer { rig.shutdown() }
        var timing = RemoteAgent.Timing()
        timing.probeInterval = .milliseconds(200)
        timing.maximumBackoff = .seconds(2)
        let pool = AgentPool(endpoints: rig.endpoints, security: try rig.clientSecurity(), timing: timing, logger: logger)
        pool.start()
        let notReady = await pool.waitUntilReady(clockSamples: 16, timeout: .seconds(30))
        guard notReady.isEmpty else { throw CommandFailure("agents not ready: \(notReady.map(\.name).joined(separator: ", "))\n\(rig.logs())") }
        let store = try CaptureStore(root: rig.work.appendingPathComponent("captures"))
        let collector = MissingResultCollector(pool: pool, sink: store, logger: logger)
        guard let camrig = Programs.find("camrig", override: "CAMRIG") else {
            throw CommandFailure("cannot find camrig next to this program or on PATH; build it (`swift build --product camrig`) or set CAMRIG")
        }
        options.say("starting the S3 store (scripts/object-store)")
        let objectStore = try await SoakObjectStore.start(in: rig.work.appendingPathComponent("store"), for: rig)
        defer { objectStore.shutdown() }
        let logs = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("camrig-soak-\(getpid())")
        try FileManager.default.createDirectory(at: logs, withIntermediateDirectories: true)
        options.say("camrig commands' output in \(logs.path)")
        let driver = HostRecordingDriver(
            camrig: camrig.path,
            rigArguments: rig.endpoints.flatMap { ["--agent", "\($0.host):\($0.port)"] } + ["--tls-dir", rig.tls.path, "--identity", "coordinator"],
            folder: rig.work.appendingPathComponent("host-recordings"), state: rig.work.appendingPathComponent("state"), store: objectStore, logs: logs,
            hostFolders: rig.members.map { rig.work.appendingPathComponent("spool-\($0.name)/recordings") }, seconds: hostRecordSeconds, fps: 15,
            say: options.say)
        var hostRuns: [HostRecordingRun] = []
        var hostFaults: [Fault] = []
        var hostRandom = SeededRandom(seed: seed &* 104_729)

        let start = ContinuousClock.now
        let deadline = start + .seconds(minutes * 60)
        let pids = NIOLockedValueBox(rig.members.map { $0.process.process.processIdentifier })
        let injector = FaultInjector(rig: rig, seed: seed, meanInterval: faultEvery, start: start, pids: pids, say: options.say)
        // The faults and the memory samples run beside the capture loop for the whole soak, each until the
        // deadline; both are awaited below (the sampler cancelled first), so neither outlives the run.
        let faults = Task { await injector.run(until: deadline) }
        let sampler = Task { () -> [MemorySample] in
            var samples: [MemorySample] = []
            while ContinuousClock.now < deadline + .seconds(60) {
                let agentsKb = pids.withLockedValue { $0 }.compactMap { ResidentMemory.kilobytes(pid: $0) }.sorted()
                samples.append(
                    MemorySample(
                        atSeconds: (ContinuousClock.now - start).seconds, coordinatorKb: ResidentMemory.kilobytes() ?? 0,
                        agentMedianKb: agentsKb.isEmpty ? 0 : agentsKb[agentsKb.count / 2], agentMaxKb: agentsKb.last ?? 0))
                try? await Task.sleep(for: .seconds(30))
                if Task.isCancelled { break }
            }
            return samples
        }

        var round = 0
        var hung = 0
        var skipped: [String: Int] = [:]
        var collectedLater = 0
        while ContinuousClock.now < deadline {
            round += 1
            if hostRecordEvery > 0, round % hostRecordEvery == 0 {
                let plan = HostRecordingPlan.plan(hostRuns.count)
                let at = (ContinuousClock.now - start).seconds
                let run = await driver.run(plan, index: hostRuns.count, random: &hostRandom)
                hostRuns.append(run)
                if run.coordinatorKilled || run.outageSeconds != nil {
                    hostFaults.append(.init(kind: plan.fault.rawValue, agent: run.captureID ?? "-", atSeconds: at, forSeconds: run.outageSeconds ?? 0))
                }
                options.say(
                    "  on-host recording \(hostRuns.count) to the \(plan.destination.rawValue) (\(plan.fault.rawValue)): \(run.captureID ?? "not started") \(run.command)"
                        + (run.settled ? "" : ", not settled yet"))
                try await Task.sleep(for: .milliseconds(500))
                continue
            }
            let recording = round % recordEvery == 0
            let recordSeconds = self.recordSeconds
            // A capture that has not ended a minute after it should have (a recording's span) is counted as
            // hung, cancelled and left behind.
            let outcome: String?
            let bound = Duration.seconds(60) + (recording ? .seconds(recordSeconds) : .zero)
            do {
                outcome = try await withDeadline(bound, "capture \(round) (\(recording ? "recording" : "photo"))") { () -> String? in
                    do {
                        // Every camera whose agent is up now (one that is down is not asked, and its
                        // absence is no lost result).
                        let session = try await openSession(
                            pool: pool, size: Dimensions(width: 640, height: 480), fps: 15, skippingAbsentAgents: true, logger: logger)
                        do {
                            try await session.commitConfiguration()
                            if recording {
                                _ = try await session.record(duration: .milliseconds(Int64(recordSeconds * 1000)), into: store)
                            } else {
                                _ = try await session.capturePhoto(into: store)
                            }
                        } catch {
                            await session.stop()
                            throw error
                        }
                        await session.stop()
                        return nil
                    } catch {
                        return Self.reasonClass("\(error)")
                    }
                }
            } catch {
                // The capture returns its failures; only the deadline throws.
                options.say("  \(error)")
                hung += 1
                outcome = nil
            }
            if let outcome { skipped[outcome, default: 0] += 1 }
            // Usually done in a moment; what is not collected now is collected by a later round.
            if let report = try? await withDeadline(.seconds(180), "collecting what the agents hold, after capture \(round)", { try await collector.collect() }) {
                collectedLater += report.collected
            }
            if round % 20 == 0 {
                options.say(String(format: "  %.1f min: %d captures", (ContinuousClock.now - start).seconds / 60, round))
            }
            try await Task.sleep(for: .milliseconds(500))
        }
        let faultLog = await faults.value

        // Every host back, then whatever the agents still hold is collected.
        options.say("faults over: restoring every host and collecting what the agents hold")
        try await injector.healAll()
        let stillDown = await pool.waitUntilReady(clockSamples: 4, timeout: .seconds(60))
        for attempt in 1...30 {
            let report = try await withDeadline(.seconds(180), "collecting what the agents hold after the faults (attempt \(attempt) of 30)") {
                try await collector.collect()
            }
            collectedLater += report.collected
            if report.waiting == 0 { break }
            try await Task.sleep(for: .seconds(2))
        }
        options.say("settling the on-host recordings (camrig captures recover) and reading them back")
        let hostRecordings = try await settleAndAudit(driver: driver, runs: hostRuns, store: objectStore)
        sampler.cancel()
        let memory = await sampler.value
        var accounting = try await account(store: store, pool: pool)
        accounting.hung = hung
        accounting.spoolsUnchecked = stillDown.map(\.name)
        accounting.photoResultsCollectedLater = collectedLater
        accounting.roundsSkipped = skipped.values.reduce(0, +)
        accounting.skipReasons = skipped
        await pool.stop()
        try options.emit(
            Result(
                machine: .current, agents: agents, minutes: minutes, lossHosts: lossHosts, loss: loss, faults: faultLog + hostFaults,
                accounting: accounting, hostRecordings: hostRecordings, memory: memory))
    }

    /// Every on-host recording finished with `camrig captures recover` (each destination, until it says
    /// nothing is left on the hosts, or three minutes), then read back from its destination; what the
    /// hosts and the store still hold is counted.
    func settleAndAudit(driver: HostRecordingDriver, runs: [HostRecordingRun], store: SoakObjectStore) async throws -> HostRecordingAccounting {
        var finalRuns = 0
        for destination in [HostRecordingDestination.folder, .store] {
            var sweep = HostRecordingRun(destination: destination, fault: .none, command: "recover")
            await driver.settle(destination, within: .seconds(180), run: &sweep)
            finalRuns += sweep.recoverRuns
            if !sweep.settled { options.say("  \(destination.rawValue): recover still reports files on the hosts: \(sweep.recoverError ?? "")") }
        }
        let faults = Dictionary(runs.compactMap { run in run.captureID.map { ($0, run.fault) } }, uniquingKeysWith: { first, _ in first })
        let (audits, uploadsLeft) = try await store.withClient { client in
            var audits: [HostRecordingAudit] = []
            for destination in [HostRecordingDestination.folder, .store] {
                for id in await SoakCaptures.ids(destination, folder: driver.folder, store: store).sorted() {
                    guard let manifest = await SoakCaptures.manifest(id, destination: destination, folder: driver.folder, store: store) else { continue }
                    let delivered = await SoakCaptures.delivered(id, destination: destination, folder: driver.folder, client: client)
                    audits.append(HostRecordingAudit(manifest, destination: destination, fault: faults[id], delivered: delivered))
                }
            }
            return (audits, try await client.listMultipartUploads(prefix: SoakObjectStore.prefix + "/").count)
        }
        let leftOnHosts = driver.hostFolders.map(HostRecordingDriver.entries(under:)).reduce(0, +)
        return HostRecordingAccounting(runs: runs, audits: audits, leftOnHosts: leftOnHosts, multipartUploadsLeft: uploadsLeft, finalRecoverRuns: finalRuns)
    }

    /// A failure's message without the ids that make every one different.
    static func reasonClass(_ text: String) -> String {
        var words = text.split(separator: " ").map(String.init)
        for index in words.indices where words[index].contains(where: \.isNumber) && words[index].count > 6 {
            words[index] = "…"
        }
        return String(words.joined(separator: " ").prefix(140))
    }

    /// Reads every capture back and counts what was delivered, reported lost, or neither.
    func account(store: CaptureStore, pool: AgentPool) async throws -> Accounting {
        var a = Accounting(
            photos: 0, photoResultsExpected: 0, photoResultsDelivered: 0, photoResultsCollectedLater: 0, photoResultsLost: 0, lostReasons: [:],
            recordings: 0, recordingFramesDelivered: 0, recordingFramesReportedDropped: 0, incompleteRecordings: 0, unaccounted: 0,
            duplicates: 0, leftInSpools: 0, hung: 0, roundsSkipped: 0, skipReasons: [:])
        var seen: [String: Int] = [:]
        for entry in try await store.catalog.list() {
            let manifest = try store.manifest(of: entry)
            let folder = store.root.appendingPathComponent(entry.directory)
            if manifest.kind == CaptureKind.photo.rawValue {
                a.photos += 1
                a.photoResultsExpected += manifest.cameras.count
                let frames = manifest.sets.first?.frames ?? []
                a.photoResultsDelivered += frames.count
                if Set(frames.map(\.camera)).count != frames.count { a.duplicates += frames.count - Set(frames.map(\.camera)).count }
                for frame in frames where !FileManager.default.fileExists(atPath: folder.appendingPathComponent(frame.file).path) {
                    a.unaccounted += 1
                }
                let missing = manifest.missing ?? []
                for lost in missing where !lost.collectable {
                    a.photoResultsLost += 1
                    a.lostReasons[Self.reasonClass(lost.reason), default: 0] += 1
                }
                a.unaccounted += missing.filter(\.collectable).count
                if manifest.state == .inProgress { a.unaccounted += manifest.cameras.count - frames.count }
                // Cameras neither in the set nor listed missing.
                a.unaccounted += max(0, manifest.cameras.count - frames.count - missing.count)
                for item in store.journal(in: folder) { seen["\(item.agent)/\(item.resultId)", default: 0] += 1 }
            } else {
                a.recordings += 1
                let unaccountedBefore = a.unaccounted
                defer {
                    if a.unaccounted > unaccountedBefore {
                        let cameras = manifest.cameras.map { camera in
                            "\(camera.agent): \(manifest.sets.flatMap(\.frames).filter { $0.camera == camera.index }.count)+\(manifest.unmatched.filter { $0.camera == camera.index }.count) unmatched"
                        }
                        a.recordingsWithUnaccountedFrames.append("\(manifest.id) (\(a.unaccounted - unaccountedBefore), \(manifest.state?.rawValue ?? "?")): " + cameras.joined(separator: ", "))
                    }
                }
                if manifest.state != .complete { a.incompleteRecordings += 1 }
                if manifest.state == .inProgress { a.unaccounted += 1 }
                let frames = manifest.sets.flatMap(\.frames) + manifest.unmatched
                let expected = Int((recordSeconds * 15).rounded())
                for camera in manifest.cameras {
                    let own = frames.filter { $0.camera == camera.index }.map(\.sequence)
                    a.recordingFramesDelivered += own.count
                    a.recordingFramesReportedDropped += camera.framesDropped
                    a.duplicates += own.count - Set(own).count
                    // Every frame of the recording's span: delivered, reported dropped, or (its stream
                    // having ended early, the camera saying why) lost with a reason; one frame's leeway
                    // at the span's edges.
                    let shortfall = expected - own.count - camera.framesDropped
                    if let error = camera.error {
                        a.recordingFramesLost += max(0, shortfall)
                        if shortfall > 0 { a.lostReasons["recording: " + Self.reasonClass(error), default: 0] += shortfall }
                    } else {
                        a.unaccounted += max(0, shortfall - 1)
                    }
                    if let low = own.min(), let high = own.max() {
                        a.unaccounted += max(0, Int(high - low) + 1 - own.count - camera.framesDropped)
                    }
                }
            }
        }
        a.duplicates += seen.values.filter { $0 > 1 }.map { $0 - 1 }.reduce(0, +)
        for agent in pool.agents {
            guard let client = try? agent.client() else { continue }
            // Listing a spool takes a moment; a minute turns a stream that never ends into an error.
            a.leftInSpools += try await withDeadline(.seconds(60), "agent \(agent.name): the results left in its spool (FetchResults) to end") {
                var left = 0
                for try await frame in client.stream(.fetchResults(WireFetchResults())) {
                    if case .photoResult = frame.envelope.body { left += 1 }
                }
                return left
            }
        }
        return a
    }
}

/// Injects one fault at a time into a random host: kill -9 and restart (sometimes with a clock step),
/// or a link cut; keeps the agents' pids for memory sampling.
actor FaultInjector {
    let rig: NetworkedRig
    var random: SeededRandom
    let meanInterval: Double
    let start: ContinuousClock.Instant
    let pids: NIOLockedValueBox<[Int32]>
    let say: @Sendable (String) -> Void
    var log: [SoakBenchmark.Fault] = []
    var down: Set<String> = []
    var cut: Set<String> = []

    init(rig: NetworkedRig, seed: UInt64, meanInterval: Double, start: ContinuousClock.Instant, pids: NIOLockedValueBox<[Int32]>, say: @escaping @Sendable (String) -> Void) {
        self.rig = rig
        self.random = SeededRandom(seed: seed &* 7919)
        self.meanInterval = meanInterval
        self.start = start
        self.pids = pids
        self.say = say
    }

    func run(until deadline: ContinuousClock.Instant) async -> [SoakBenchmark.Fault] {
        while ContinuousClock.now < deadline {
            let wait = Double.random(in: 0.5 * meanInterval...1.5 * meanInterval, using: &random)
            try? await Task.sleep(for: .seconds(wait))
            guard ContinuousClock.now < deadline else { break }
            let member = rig.members[Int.random(in: 0..<rig.members.count, using: &random)]
            let at = (ContinuousClock.now - start).seconds
            let outage = Double.random(in: 2...8, using: &random)
            switch Int.random(in: 0..<3, using: &random) {
            case 0, 1:
                let step = Int.random(in: 0..<2, using: &random) == 1
                let kind = step ? "kill -9, restart with a clock step" : "kill -9, restart"
                say("  fault at \(String(format: "%.0f", at)) s: \(kind) \(member.name)")
                rig.crash(member)
                try? await Task.sleep(for: .seconds(outage))
                let stepMicroseconds = Int.random(in: -3000...3000, using: &random)
                let extra = step ? ["--simulate-clock-step-us=\(stepMicroseconds)", "--simulate-clock-step-after", "2"] : []
                await restart(member, extra: extra)
                log.append(.init(kind: kind, agent: member.name, atSeconds: at, forSeconds: outage))
            default:
                say("  fault at \(String(format: "%.0f", at)) s: link of \(member.name) cut for \(String(format: "%.1f", outage)) s")
                try? rig.cut(member)
                try? await Task.sleep(for: .seconds(outage))
                try? rig.restore(member)
                log.append(.init(kind: "link cut", agent: member.name, atSeconds: at, forSeconds: outage))
            }
        }
        return log
    }

    private func restart(_ member: NetworkedRig.Member, extra: [String]) async {
        let rig = self.rig
        do {
            let restarted = try await rig.relaunch(member, extraArguments: extra)
            pids.withLockedValue { pids in
                if let index = rig.members.firstIndex(where: { $0.name == member.name }) {
                    pids[index] = restarted.process.process.processIdentifier
                }
            }
        } catch {
            say("  restart of \(member.name) failed: \(error)")
        }
    }

    /// Every link up and every agent running.
    func healAll() async throws {
        for member in rig.members {
            try? rig.restore(member)
            if !member.process.isRunning { await restart(member, extra: []) }
        }
    }
}
