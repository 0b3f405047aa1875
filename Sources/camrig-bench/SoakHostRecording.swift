import CamRigCLI
import CamRigDeviceModel
import CamRigLocalRig
import Foundation

/// Where an on-host recording's files are offloaded.
enum HostRecordingDestination: String, Encodable, Sendable {
    case folder, store
}

/// What an on-host recording goes through besides the soak's host faults (which strike it too).
enum HostRecordingFault: String, Encodable, Sendable {
    case none
    /// `camrig record` killed with SIGKILL while the hosts record; `captures recover` finishes it.
    case coordinatorKilledRecording = "coordinator killed while recording"
    /// `camrig record` killed with SIGKILL once the recording has ended, as its offload runs.
    case coordinatorKilledOffloading = "coordinator killed while offloading"
    /// The store stopped for a few seconds as the offload runs, then started again in its folder.
    case storeOutage = "store stopped while offloading"

    var killsTheCoordinator: Bool { self == .coordinatorKilledRecording || self == .coordinatorKilledOffloading }
}

/// The n-th on-host recording's destination and fault: folders and the store in turn, each going through
/// its faults in turn.
struct HostRecordingPlan: Sendable {
    var destination: HostRecordingDestination
    var fault: HostRecordingFault

    static func plan(_ index: Int) -> HostRecordingPlan {
        let turn = index / 2
        if index % 2 == 0 {
            let faults: [HostRecordingFault] = [.none, .coordinatorKilledRecording, .coordinatorKilledOffloading]
            return HostRecordingPlan(destination: .folder, fault: faults[turn % faults.count])
        }
        let faults: [HostRecordingFault] = [.storeOutage, .coordinatorKilledRecording, .none, .coordinatorKilledOffloading]
        return HostRecordingPlan(destination: .store, fault: faults[turn % faults.count])
    }
}

/// How one `camrig record --on-hosts` run went, before its capture is read back.
struct HostRecordingRun: Encodable, Sendable {
    var destination: HostRecordingDestination
    var fault: HostRecordingFault
    /// The capture it made; nil when none was begun.
    var captureID: String?
    /// `camrig record`'s exit ("exit status 0", "signal 9").
    var command: String
    /// Why no recording was made (the command's last line of error), when none was.
    var notStarted: String?
    /// Whether the coordinator was killed by the soak (it may have ended before the signal).
    var coordinatorKilled = false
    /// Seconds the store was down.
    var outageSeconds: Double?
    /// `camrig captures recover` runs it took until the capture was settled.
    var recoverRuns = 0
    /// Whether every file ended up offloaded and acknowledged (or reported lost) before the next capture.
    var settled = false
    /// The last failure of `captures recover`, other than "still on the hosts".
    var recoverError: String?
    /// `camrig record` had not ended long after its recording should have: killed, counted as hung.
    var hung = false
}

/// Runs `camrig record` (on-host recording) as a user would, injects its fault, and finishes the capture
/// with `camrig captures recover`, as a user would after a failure. Every wait has a deadline.
struct HostRecordingDriver: Sendable {
    let camrig: String
    /// `--agent …`, `--tls-dir`, `--identity`.
    let rigArguments: [String]
    let folder: URL
    let state: URL
    let store: SoakObjectStore
    /// Where each command's output goes.
    let logs: URL
    /// The agents' recordings folders, to see a recording start.
    let hostFolders: [URL]
    let seconds: Double
    let fps: Int
    let say: @Sendable (String) -> Void

    func destinationArguments(_ destination: HostRecordingDestination) -> [String] {
        switch destination {
        case .folder: ["--out", folder.path]
        case .store: ["--out", "s3://\(SoakObjectStore.bucket)/\(SoakObjectStore.prefix)", "--state", state.path]
        }
    }

    /// Folder recordings are MJPEG; store recordings raw, so that each file goes up in several parts.
    func recordArguments(_ plan: HostRecordingPlan) -> [String] {
        let codec = plan.destination == .store ? "raw" : "mjpeg"
        return [
            "record", "--duration", String(seconds), "--fps", "\(fps)", "--size", "640x480", "--codec", codec, "--segment-seconds", "1",
            "--offload-rate", "4", "--json",
        ]
    }

    func run(_ plan: HostRecordingPlan, index: Int, random: inout SeededRandom) async -> HostRecordingRun {
        var run = HostRecordingRun(destination: plan.destination, fault: plan.fault, command: "not run")
        let before = await SoakCaptures.ids(plan.destination, folder: folder, store: store)
        let heldBefore = held()
        let out = logs.appendingPathComponent("record-\(index).out")
        let err = logs.appendingPathComponent("record-\(index).err")
        let child: ChildProcess
        do {
            child = try spawn(recordArguments(plan) + destinationArguments(plan.destination), stdout: out, stderr: err)
        } catch {
            run.notStarted = "\(error)"
            return run
        }
        let killAfter = Double.random(in: 0.3...max(0.4, seconds * 0.8), using: &random)
        let outage = Double.random(in: 3...6, using: &random)
        // The fault strikes while this function waits for the child: it runs beside it and is awaited
        // (never left behind) before the run is accounted.
        let fault = Task { () -> (killed: Bool, outage: Double?) in
            guard plan.fault != .none, await recordingStarted(besides: heldBefore, within: .seconds(40)) else { return (false, nil) }
            switch plan.fault {
            case .none: return (false, nil)
            case .coordinatorKilledRecording:
                try? await Task.sleep(for: .seconds(killAfter))
                guard child.isRunning else { return (false, nil) }
                child.send(SIGKILL)
                return (true, nil)
            case .coordinatorKilledOffloading:
                try? await Task.sleep(for: .seconds(seconds + 0.3))
                guard child.isRunning else { return (false, nil) }
                child.send(SIGKILL)
                return (true, nil)
            case .storeOutage:
                try? await Task.sleep(for: .seconds(seconds + 0.3))
                do {
                    try await store.stop()
                    try? await Task.sleep(for: .seconds(outage))
                    try await store.resume()
                } catch {
                    say("  store outage: \(error)")
                    try? await store.resume()
                }
                return (false, outage)
            }
        }
        let (termination, hung) = await Self.exit(of: child, within: .seconds(seconds + 180))
        let injected = await fault.value
        run.command = termination.description
        run.hung = hung
        run.coordinatorKilled = injected.killed
        run.outageSeconds = injected.outage
        let made = await SoakCaptures.ids(plan.destination, folder: folder, store: store).subtracting(before)
        run.captureID = made.first
        guard run.captureID != nil else {
            let text = (try? String(contentsOf: err, encoding: .utf8)) ?? ""
            run.notStarted = text.split(separator: "\n").last.map(String.init) ?? termination.description
            return run
        }
        // A recording whose command ended well can still have files on a host a fault struck: recover
        // fetches those too.
        let manifest = await SoakCaptures.manifest(made.first!, destination: plan.destination, folder: folder, store: store)
        if let manifest, SoakCaptures.isSettled(manifest) {
            run.settled = true
        } else {
            await settle(plan.destination, within: .seconds(120), run: &run)
        }
        return run
    }

    /// `camrig captures recover` until it says nothing is left on the hosts (exit status 0), or `timeout`.
    func settle(_ destination: HostRecordingDestination, within timeout: Duration, run: inout HostRecordingRun) async {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            run.recoverRuns += 1
            let result = await recover(destination)
            if result.status == 0 {
                run.settled = true
                return
            }
            if result.status != 2 { run.recoverError = SoakBenchmark.reasonClass(result.stderr.split(separator: "\n").last.map(String.init) ?? "exit \(result.status)") }
            try? await Task.sleep(for: .seconds(2))
        }
    }

    /// One `camrig captures recover` against `destination`: its exit status (2: files still on hosts) and
    /// its standard error.
    func recover(_ destination: HostRecordingDestination) async -> (status: Int32, stderr: String) {
        let arguments = ["captures", "recover", "--json"] + destinationArguments(destination) + rigArguments
        do {
            let result = try await ToolRunner.run(camrig, arguments, environment: store.commandEnvironment, timeout: 150)
            return (result.status, result.stderr)
        } catch {
            return (-1, "\(error)")
        }
    }

    /// Files and folders under `folder` (0 when it does not exist).
    static func entries(under folder: URL) -> Int {
        guard let enumerator = FileManager.default.enumerator(atPath: folder.path) else { return 0 }
        var count = 0
        while enumerator.nextObject() != nil { count += 1 }
        return count
    }

    private func spawn(_ arguments: [String], stdout: URL, stderr: URL) throws -> ChildProcess {
        _ = FileManager.default.createFile(atPath: stdout.path, contents: nil)
        _ = FileManager.default.createFile(atPath: stderr.path, contents: nil)
        let output = try FileHandle(forWritingTo: stdout)
        let errors = try FileHandle(forWritingTo: stderr)
        defer {
            try? output.close()
            try? errors.close()
        }
        return try ChildProcess.spawn(
            camrig, arguments + rigArguments, environment: store.commandEnvironment, stdout: .descriptor(output.fileDescriptor),
            stderr: .descriptor(errors.fileDescriptor))
    }

    /// What the hosts hold in their recordings folders (`agent/name`).
    func held() -> Set<String> {
        var names: Set<String> = []
        for folder in hostFolders {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? [] {
                names.insert("\(folder.path)/\(name)")
            }
        }
        return names
    }

    /// Whether a host began a recording it did not hold before, within `timeout`.
    func recordingStarted(besides before: Set<String>, within timeout: Duration) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if !held().subtracting(before).isEmpty { return true }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return false
    }

    /// The child's end; killed with SIGKILL (and reported hung) when it has not ended after `timeout`.
    static func exit(of child: ChildProcess, within timeout: Duration) async -> (ChildProcess.Termination, hung: Bool) {
        // Beside the wait for the child's exit, which cannot be cancelled; cancelled and awaited once it ends.
        let watchdog = Task { () -> Bool in
            try await Task.sleep(for: timeout)
            child.send(SIGKILL)
            return true
        }
        let termination = await child.exit()
        watchdog.cancel()
        let hung = (try? await watchdog.value) ?? false
        return (termination, hung)
    }
}
