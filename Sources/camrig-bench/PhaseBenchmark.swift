import CamRigDeviceModel
import CamRigText
import CamRigViews
import ArgumentParser
import CamRigCLI
import CamRigCapture
import CamRigClock
import CamRigCoordinator
import CamRigDevices
import CamRigLocalRig
import Foundation
import Logging

/// `camrig-bench phase`: free-running emulated V4L2 cameras, one per host, each host in its own network
/// namespace behind a LAN relay with its own clock error, each camera with its own oscillator error,
/// start-up delay and timestamp jitter. Photos and a recording with the phase lock off (each camera's
/// first frame from T on, as rig tools do it) and on, in the same run; the true skew of every sync set
/// comes from the emulator's truth log (when each frame really started exposing, on the machine's
/// CLOCK_MONOTONIC), not from the cameras' timestamps.
struct PhaseBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "phase",
        abstract: "True skew of free-running V4L2 cameras across namespaced hosts, phase lock off and on.",
        discussion: "Needs root (network namespaces) and the V4L2 emulator installed (make -C Tests/V4L2Emulator install)."
    )

    @Option(name: .long, help: "Hosts, one emulated camera each.")
    var agents = 8

    @Option(name: .long, help: "Photos per mode.")
    var photos = 50

    @Option(name: .long, help: "Seconds of recording per mode (0 skips recordings).")
    var recordSeconds = 60.0

    @Option(name: .long, help: "Frame rate of every camera.")
    var fps: UInt32 = 30

    @Option(name: .long, help: "Cameras' oscillator errors are drawn from ± this many ppm.")
    var ratePpm = 50.0

    @Option(name: .long, help: "Timestamp jitter of every camera (standard deviation), microseconds.")
    var jitterUs = 20.0

    @Option(name: .long, help: "Seconds each mode may take to lock before capturing.")
    var lockTimeout = 30.0

    @Flag(name: .long, help: "Skip the run where half the cameras lack a frame-duration control.")
    var skipMixed = false

    @OptionGroup var options: BenchOptions

    struct Mode: Encodable {
        var phaseLock: Bool
        var photos: Int
        var incompletePhotos: Int
        var photoTrueSkewUs: Distribution
        var photoSkewInCoordinatorClockUs: Distribution
        var recordingSets: Int
        var incompleteSets: Int
        var recordingTrueSkewUs: Distribution
        var recordingSkewInCoordinatorClockUs: Distribution
        var secondsToLock: Double?
        var camerasLocked: Int
        var cameras: [Camera]
    }

    struct Camera: Encodable {
        var camera: String
        var frameDurationControl: Bool
        var ratePpm: Double
        var state: String
        var method: String
        var phaseErrorUs: Double
        var errorBoundUs: Double
        var restarts: Int
        var reason: String?
    }

    struct Run: Encodable {
        var camerasWithFrameDurationControl: Int
        var modes: [Mode]
    }

    struct Result: BenchResult {
        var scenario = "phase"
        var machine: MachineDescription
        var agents: Int
        var fps: UInt32
        var ratePpm: Double
        var jitterUs: Double
        var runs: [Run]

        var text: String {
            var lines = ["phase: \(agents) hosts in network namespaces, one emulated V4L2 camera each at \(fps) fps (±\(ratePpm) ppm, \(jitterUs) µs jitter, injected host clocks); \(machine.text)"]
            let d = { (x: Distribution) in x.count == 0 ? "-" : String(format: "%.1f / %.1f / %.1f", x.p50, x.p99, x.max) }
            lines.append(table(
                ["CAMERAS WITH VBLANK", "LOCK", "TO LOCK s", "LOCKED", "PHOTO TRUE SKEW µs p50/p99/max", "RECORDING TRUE SKEW µs p50/p99/max", "SETS (INCOMPLETE)"],
                runs.flatMap { run in
                    run.modes.map { mode in
                        [
                            "\(run.camerasWithFrameDurationControl)/\(agents)", mode.phaseLock ? "on" : "off",
                            mode.secondsToLock.map { String(format: "%.1f", $0) } ?? "-", mode.phaseLock ? "\(mode.camerasLocked)/\(agents)" : "-",
                            d(mode.photoTrueSkewUs), d(mode.recordingTrueSkewUs), "\(mode.recordingSets) (\(mode.incompleteSets))",
                        ]
                    }
                }))
            lines.append("True skew: latest minus earliest true exposure start in a set, from the emulator's truth log (CLOCK_MONOTONIC), not from any camera's timestamp.")
            lines.append("Lock off: each camera's first frame from T on; in a recording, each frame of the first camera with every other camera's nearest frame (the matcher's sets, mostly incomplete, are counted under SETS).")
            return lines.joined(separator: "\n")
        }
    }

    func validate() throws {
        guard (2...16).contains(agents) else { throw ValidationError("--agents must be within 2…16") }
        guard photos >= 0, recordSeconds >= 0, fps > 0 else { throw ValidationError("--photos, --record-seconds must be ≥ 0 and --fps > 0") }
    }

    func run() async throws {
        if let reason = HostNetwork.unavailableReason { throw CommandFailure("the phase scenario needs network namespaces: \(reason)") }
        guard FileManager.default.fileExists(atPath: "/usr/lib/x86_64-linux-gnu/libv4l/plugins/libcamrig-v4l2-emulator.so") else {
            throw CommandFailure("the V4L2 emulator is not installed: make -C Tests/V4L2Emulator all install")
        }
        var runs = [try await measure(withControl: agents)]
        if !skipMixed { runs.append(try await measure(withControl: agents / 2)) }
        try options.emit(Result(machine: .current, agents: agents, fps: fps, ratePpm: ratePpm, jitterUs: jitterUs, runs: runs))
    }

    /// Emulated camera of host `index`: a stepwise node (so 320x240 is offered), its own timing.
    struct Node {
        var path: String
        var truth: String
        var ratePpm: Double
        var frameDurationControl: Bool
    }

    func makeNodes(directory: URL, withControl: Int) throws -> [Node] {
        try? FileManager.default.removeItem(at: directory)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        chmod(directory.path, 0o1777)
        var random = SeededRandom(seed: 2026)
        return try (0..<agents).map { index in
            let number = 3 * index + 1
            let path = directory.appendingPathComponent("video\(number)").path
            let rate = Double.random(in: -ratePpm...ratePpm, using: &random)
            let control = index < withControl
            let timing = """
                seed=\(1000 + index)
                rate_ppm=\(rate)
                startup_delay_us=\(Double.random(in: 20_000...60_000, using: &random))
                startup_jitter_us=500
                timestamp_jitter_us=\(jitterUs)
                timestamp_source=soe
                frame_duration_control=\(control ? "vblank" : "none")

                """
            _ = FileManager.default.createFile(atPath: path, contents: nil)
            try timing.write(toFile: path + ".timing", atomically: true, encoding: .utf8)
            _ = FileManager.default.createFile(atPath: path + ".truth", contents: nil)
            return Node(path: path, truth: path + ".truth", ratePpm: rate, frameDurationControl: control)
        }
    }

    func measure(withControl: Int) async throws -> Run {
        let logger = options.makeLogger("camrig.bench")
        let directory = URL(fileURLWithPath: "/dev/shm/camrig-bench-phase")
        let nodes = try makeNodes(directory: directory, withControl: withControl)
        setenv("CAMRIG_V4L2_EMULATOR_DIR", directory.path, 1)
        let conditions = PathConditions.lan(delay: .microseconds(500), jitter: .microseconds(100), asymmetry: .zero)
        options.say("[\(withControl)/\(agents) with VBLANK] starting \(agents) hosts in namespaces")
        let specs = nodes.enumerated().map { index, node in
            let error = HostClock.simulatedError(host: index)
            return NetworkedRig.AgentSpec(
                cameras: 0, clockOffsetMicroseconds: error.offsetMicroseconds, clockDriftPPM: error.driftPPM, conditions: conditions,
                extraArguments: ["--v4l2", node.path])
        }
        let rig = try await NetworkedRig.start(agents: specs, agentExecutable: try LocalAgentProcess.executable(), seed: 7)
        defer { rig.shutdown() }
        var timing = RemoteAgent.Timing()
        timing.probeInterval = .milliseconds(62)
        let pool = AgentPool(endpoints: rig.endpoints, security: try rig.clientSecurity(), timing: timing, logger: logger)
        pool.start()
        defer { Task { await pool.stop() } }
        let notReady = await pool.waitUntilReady(clockSamples: 16, timeout: .seconds(30))
        guard notReady.isEmpty else { throw CommandFailure("agents not ready: \(notReady.map(\.name).joined(separator: ", "))\n\(rig.logs())") }
        options.say("  clocks converging for 5 s")
        try await Task.sleep(for: .seconds(5))

        let session = try await openSession(pool: pool, size: Dimensions(width: 320, height: 240), fps: fps, logger: logger)
        try await session.commitConfiguration()
        let inputs = await session.inputs
        let truth = TruthLogs(nodes: nodes, inputs: inputs, rig: rig)
        var modes: [Mode] = []
        for phaseLock in [false, true] {
            var secondsToLock: Double?
            var phases: [CameraPhase] = []
            if phaseLock {
                let started = ContinuousClock.now
                try await session.lockPhase()
                phases = await session.waitForPhaseLock(timeout: .milliseconds(Int64(lockTimeout * 1000)))
                secondsToLock = (ContinuousClock.now - started).seconds
                options.say("  phase lock: \(phases.filter { $0.status.state == .locked }.count)/\(agents) locked after \(String(format: "%.1f", secondsToLock ?? 0)) s")
            }
            options.say("  lock \(phaseLock ? "on" : "off"): \(photos) photos")
            var photoTrue: [Double] = []
            var photoCoordinator: [Double] = []
            var incompletePhotos = 0
            for index in 0..<photos {
                // A 320×240 photo is gathered within a second or two; a minute turns a lost one into an error.
                let report = try await withDeadline(.seconds(60) + .milliseconds(100 * agents), "photo \(index + 1) of \(photos) on \(agents) agents (phase lock \(phaseLock ? "on" : "off"))") {
                    try await session.capturePhoto(into: DiscardingSink())
                }
                guard let set = report.manifest.sets.first, set.complete, let span = truth.read().trueSpan(of: set, in: report.manifest) else {
                    incompletePhotos += 1
                    continue
                }
                photoTrue.append(Double(span) / 1000)
                photoCoordinator.append(Double(set.skewNs) / 1000)
            }
            var recordingTrue: [Double] = []
            var recordingCoordinator: [Double] = []
            var sets = 0
            var incompleteSets = 0
            if recordSeconds > 0 {
                options.say("  lock \(phaseLock ? "on" : "off"): recording \(recordSeconds) s")
                // The recording's duration, and two minutes for it to stop and its sets to be matched.
                let duration = Duration.milliseconds(Int64(recordSeconds * 1000))
                let report = try await withDeadline(
                    duration + .seconds(120), "a recording of \(recordSeconds) s on \(agents) agents (phase lock \(phaseLock ? "on" : "off")) to end"
                ) {
                    try await session.record(duration: duration, into: DiscardingSink())
                }
                let logs = truth.read()
                let manifest = report.manifest
                for set in manifest.sets {
                    sets += 1
                    guard set.complete, let span = logs.trueSpan(of: set, in: manifest) else {
                        incompleteSets += 1
                        continue
                    }
                    recordingCoordinator.append(Double(set.skewNs) / 1000)
                    if phaseLock { recordingTrue.append(Double(span) / 1000) }
                }
                if !phaseLock {
                    // Unlocked cameras lie anywhere within a frame of each other, so most of the matcher's
                    // windows split them. The baseline is what rig tools without a lock do: for each frame
                    // of the first camera, every other camera's frame nearest it in time.
                    let byCamera = Dictionary(grouping: manifest.sets.flatMap(\.frames) + manifest.unmatched, by: \.camera)
                        .mapValues { $0.sorted { $0.timestampNs < $1.timestampNs } }
                    let cameras = byCamera.keys.sorted()
                    if cameras.count == inputs.count, let reference = cameras.first, let referenceFrames = byCamera[reference] {
                        for frame in referenceFrames.dropFirst().dropLast() {
                            let frames = cameras.compactMap { camera in
                                byCamera[camera]?.min { abs($0.timestampNs - frame.timestampNs) < abs($1.timestampNs - frame.timestampNs) }
                            }
                            let paired = CaptureManifest.SyncSet(index: 0, complete: true, referenceTimeNs: 0, skewNs: 0, missingCameras: [], frames: frames)
                            if let span = logs.trueSpan(of: paired, in: manifest) { recordingTrue.append(Double(span) / 1000) }
                        }
                    }
                }
            }
            if phaseLock { phases = await session.phaseStatus() }
            modes.append(Mode(
                phaseLock: phaseLock, photos: photos, incompletePhotos: incompletePhotos,
                photoTrueSkewUs: Distribution(photoTrue), photoSkewInCoordinatorClockUs: Distribution(photoCoordinator),
                recordingSets: sets, incompleteSets: incompleteSets,
                recordingTrueSkewUs: Distribution(recordingTrue), recordingSkewInCoordinatorClockUs: Distribution(recordingCoordinator),
                secondsToLock: secondsToLock, camerasLocked: phases.filter { $0.status.state == .locked }.count,
                cameras: inputs.map { input in
                    let node = nodes[rig.members.firstIndex { $0.name == input.agentID } ?? 0]
                    let phase = phases.first { $0.camera == input.name }
                    return Camera(
                        camera: input.name, frameDurationControl: node.frameDurationControl, ratePpm: node.ratePpm,
                        state: phase?.stateName ?? "-", method: phase?.methodName ?? "-",
                        phaseErrorUs: Double(phase?.status.phaseErrorNs ?? 0) / 1000, errorBoundUs: Double(phase?.status.errorBoundNs ?? 0) / 1000,
                        restarts: Int(phase?.status.restarts ?? 0), reason: phase.flatMap { $0.status.reason.isEmpty ? nil : $0.status.reason })
                }
            ))
        }
        await session.stop()
        await pool.stop()
        return Run(camerasWithFrameDurationControl: withControl, modes: modes)
    }
}

/// The emulator's truth logs, read back to find when each frame of a capture really started exposing.
struct TruthLogs {
    let nodes: [PhaseBenchmark.Node]
    let inputs: [RigDevice]
    let rig: NetworkedRig

    /// Per node: (reported stamp, true exposure start), sorted by stamp.
    func entries(_ node: PhaseBenchmark.Node) -> [(stamp: Int64, truth: Int64)] {
        guard let text = try? String(contentsOfFile: node.truth, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line -> (Int64, Int64)? in
            let fields = line.split(separator: " ")
            guard fields.count >= 4, let truth = Int64(fields[2]), let stamp = Int64(fields[3]) else { return nil }
            return (stamp, truth)
        }.sorted { $0.0 < $1.0 }
    }

    /// Every node's log as it is now, read once for a whole capture.
    func read() -> Snapshot {
        Snapshot(logs: self, entries: nodes.map(entries))
    }

    /// The logs read at one moment.
    struct Snapshot {
        let logs: TruthLogs
        let entries: [[(stamp: Int64, truth: Int64)]]

        /// Latest minus earliest true exposure start of a set's frames; nil when a frame is not in the logs.
        func trueSpan(of set: CaptureManifest.SyncSet, in manifest: CaptureManifest) -> Int64? {
            logs.trueSpan(of: set, in: manifest, entries: entries)
        }
    }

    /// Latest minus earliest true exposure start of a set's frames; nil when a frame is not in the logs.
    private func trueSpan(of set: CaptureManifest.SyncSet, in manifest: CaptureManifest, entries: [[(stamp: Int64, truth: Int64)]]) -> Int64? {
        var starts: [Int64] = []
        for frame in set.frames {
            // Host i runs node i.
            guard let index = rig.members.firstIndex(where: { $0.name == manifest.cameras[frame.camera].agent }) else { return nil }
            let member = rig.members[index]
            let log = entries[index]
            // The stamp as the driver gave it: the agent reported it on its (simulated) host clock.
            let stamp = member.clock.monotonic(atReading: frame.agentTimestampNs)
            guard let found = nearest(stamp, in: log), abs(found.stamp - stamp) <= 2_000 else { return nil }
            starts.append(found.truth)
        }
        guard let first = starts.min(), let last = starts.max() else { return nil }
        return last - first
    }

    private func nearest(_ stamp: Int64, in log: [(stamp: Int64, truth: Int64)]) -> (stamp: Int64, truth: Int64)? {
        var low = 0
        var high = log.count
        while low < high {
            let mid = (low + high) / 2
            if log[mid].stamp < stamp { low = mid + 1 } else { high = mid }
        }
        return [low - 1, low].filter { log.indices.contains($0) }.map { log[$0] }.min { abs($0.stamp - stamp) < abs($1.stamp - stamp) }
    }
}

/// A sink that keeps nothing: the benchmark needs the manifests' timing, not the images.
struct DiscardingSink: CaptureSink {
    func begin(_ kind: CaptureKind) async throws -> CaptureHandle {
        CaptureHandle(id: UUID().uuidString, kind: kind, location: URL(fileURLWithPath: "/dev/null"))
    }

    func write(_ bytes: some FrameBytes, layout: FrameLayout, named stem: String, in capture: CaptureHandle) async throws -> String { stem }

    func spill(_ bytes: some FrameBytes, layout: FrameLayout, named stem: String, in capture: CaptureHandle) async throws -> SpilledFrame {
        SpilledFrame(file: stem, stem: stem, layout: layout)
    }

    func convert(_ frame: SpilledFrame, in capture: CaptureHandle) async throws -> String { frame.stem }

    func finish(_ manifest: CaptureManifest, in capture: CaptureHandle) async throws {}
}
