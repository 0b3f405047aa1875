import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigDevices
import CamRigSecurity
import CamRigStorage
import CamRigWire
import Foundation
import Logging

/// `camrig demo`: a whole rig on this machine. Agents with synthetic cameras and deliberately wrong
/// clocks run as separate processes on loopback; the coordinator measures their clocks over TLS, takes
/// a synchronized photo and a synchronized recording, and reports how well it did against the truth.
struct Demo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a synchronized capture on a simulated rig: agent processes on loopback, real TLS, injected clock errors.",
        discussion: """
            Each agent's clock is offset and drifting by a known amount; the table compares the coordinator's \
            estimates with that truth. Captures go to --out (folders with manifest.json, and catalog.sqlite).
            """
    )

    @Option(name: .long, help: "Agent processes to start.")
    var agents = 3

    @Option(name: .long, help: "Synthetic cameras per agent.")
    var cameras = 1

    @Option(name: .long, help: "Frames per second of the recording.")
    var fps = 30

    @Option(name: .long, help: "Seconds to record.")
    var duration = 2.0

    @Option(name: .long, help: ArgumentHelp("Frame size, WxH.", valueName: "WxH"))
    var size = "640x480"

    @OptionGroup var captures: CaptureOptions
    @OptionGroup var output: OutputOptions

    func validate() throws {
        guard (1...32).contains(agents) else { throw ValidationError("--agents must be within 1…32") }
        guard (1...8).contains(cameras) else { throw ValidationError("--cameras must be within 1…8") }
        guard (1...240).contains(fps) else { throw ValidationError("--fps must be within 1…240") }
        guard duration > 0, duration <= 600 else { throw ValidationError("--duration must be within (0, 600] seconds") }
    }

    /// The clock error injected into agent `index`.
    static func injected(_ index: Int) -> (offsetMicroseconds: Double, driftPPM: Double) { HostClock.simulatedError(host: index) }

    /// Skews of the complete sets in real time: each frame's agent timestamp mapped back through the
    /// clock error injected into its agent (which the coordinator does not know). This includes the
    /// clock-estimation error that skews in the coordinator's clock cannot show.
    static func trueSkew(_ manifest: CaptureManifest, epoch: Int64, agents: [String]) -> CaptureOutput.TrueSkew {
        let clocks = manifest.cameras.map { camera -> HostClock in
            let injected = Self.injected(agents.firstIndex(of: camera.agent) ?? 0)
            return HostClock(offsetNanoseconds: Int64((injected.offsetMicroseconds * 1000).rounded()), driftPPM: injected.driftPPM, epoch: epoch)
        }
        let skews = manifest.sets.filter(\.complete).map { set in manifest.trueSpan(of: set) { clocks[$0.index] } }.sorted()
        guard !skews.isEmpty else { return .init(p50Us: 0, maxUs: 0) }
        return .init(p50Us: Double(skews[skews.count / 2]) / 1000, maxUs: Double(skews.last!) / 1000)
    }

    func run() async throws {
        let logger = output.makeLogger(label: "camrig.demo")
        let say: (String) -> Void = { line in
            if !output.json { FileHandle.standardError.write(Data((line + "\n").utf8)) }
        }
        let work = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("camrig-demo-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: work) }
        var processes: [LocalAgentProcess] = []
        defer { for process in processes { process.stop() } }
        do {
            let store = try captures.store()
            let tls = TLSDirectory(path: work.appendingPathComponent("tls").path)
            try tls.initialize(caName: "CamRig demo CA")
            let epoch = HostClock.monotonicNow()
            say("starting \(agents) agents with \(cameras) synthetic camera(s) each (certificates in a temporary directory)")
            for index in 0..<agents {
                let name = "agent-\(index + 1)"
                try tls.issue(name: name, role: .agent, hostnames: ["127.0.0.1", "localhost"])
                let clock = Self.injected(index)
                processes.append(try LocalAgentProcess.start(arguments: [
                    "--listen", "127.0.0.1:0",
                    "--tls-dir", tls.path, "--identity", name,
                    "--synthetic", "\(cameras)", "--synthetic-seed", "\(index * 16 + 1)",
                    "--simulate-clock-offset-us=\(clock.offsetMicroseconds)",
                    "--simulate-clock-drift-ppm=\(clock.driftPPM)",
                    "--simulate-clock-epoch-ns", "\(epoch)",
                    "--spool-dir", work.appendingPathComponent("spool-\(name)").path,
                    "--log-level", "warning",
                ], logFile: work.appendingPathComponent("\(name).log")))
            }
            let security = ClientSecurity.tls(try MutualTLS.client(directory: tls, identityName: "coordinator"))
            var timing = RemoteAgent.Timing()
            timing.probeInterval = .milliseconds(20)
            let pool = AgentPool(endpoints: processes.map(\.endpoint), security: security, timing: timing, logger: logger)
            pool.start()
            let notReady = await pool.waitUntilReady(clockSamples: 64, timeout: .seconds(20))
            guard notReady.isEmpty else {
                throw ValidationFailure("agents not ready: " + notReady.map { "\($0.name) (\($0.snapshot.status.name))" }.joined(separator: ", "))
            }
            say("clocks measured; configuring one session across \(agents * cameras) cameras")
            let result: DemoOutput
            do {
                let options = try SessionOptions.parse(["--size", size])
                let session = try await options.makeSession(pool: pool, preset: .high, fps: FrameDuration(framesPerSecond: UInt32(fps)), logger: logger)
                say("synchronized photo")
                let photo = try await session.capturePhoto(into: store)
                say("synchronized recording, \(duration) s at \(fps) fps")
                let quiet = output.json
                let recording = try await session.record(duration: .milliseconds(Int64(duration * 1000)), into: store) { progress in
                    if !quiet { Record.showProgress(progress) }
                }
                if !output.json { FileHandle.standardError.write(Data("\n".utf8)) }
                await session.stop()
                result = DemoOutput(
                    agents: pool.agents.enumerated().map { index, agent in
                        DemoOutput.Agent(agent.snapshot, injected: Self.injected(index), epoch: epoch, frames: recording.manifest.cameras.filter { $0.agent == agent.snapshot.agentID })
                    },
                    captures: [photo, recording].map { report in
                        var output = CaptureOutput(report.manifest, directory: report.directory.path)
                        output.trueSkew = Self.trueSkew(report.manifest, epoch: epoch, agents: pool.agents.map(\.snapshot.agentID))
                        return output
                    },
                    catalog: store.catalog.path
                )
            } catch {
                await pool.stop()
                throw error
            }
            await pool.stop()
            if output.json {
                try printJSON(result, snakeCase: true)
            } else {
                print(result.text)
            }
        } catch let failure as ValidationFailure {
            let logs = processes.map { "\($0.endpoint): \($0.log().suffix(2000))" }.joined(separator: "\n")
            throw ValidationFailure(failure.description + (logs.isEmpty ? "" : "\nagent logs:\n" + logs))
        } catch {
            throw userFacing(error)
        }
    }
}

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

        init(_ snapshot: RemoteAgent.Snapshot, injected: (offsetMicroseconds: Double, driftPPM: Double), epoch: Int64, frames cameras: [CaptureManifest.Camera]) {
            agent = snapshot.name
            address = snapshot.endpoint.description
            let clock = snapshot.clock
            // The truth at the estimate's reference instant: offset + drift × (t − epoch).
            let reference = clock?.reference ?? epoch
            injectedOffsetUs = injected.offsetMicroseconds + injected.driftPPM * Double(reference - epoch) / 1e9
            injectedDriftPpm = injected.driftPPM
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
