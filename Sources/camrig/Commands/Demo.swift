import CamRigDeviceModel
import CamRigViews
import ArgumentParser
import CamRigCLI
import CamRigCapture
import CamRigCoordinator
import CamRigLocalRig
import CamRigStorage
import Foundation

/// `camrig demo`: a whole rig on this machine. Agents with synthetic cameras and deliberately wrong
/// clocks run as separate processes on loopback; the coordinator measures their clocks over TLS, takes
/// a synchronized photo and a synchronized recording, and reports how well it did against the truth.
struct Demo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a synchronized capture on a simulated rig: agent processes on loopback, real TLS, injected clock errors.",
        discussion: """
            Each agent's clock is offset and drifting by a known amount; the table compares the coordinator's \
            estimates with that truth. Captures go to --out (folders with manifest.json, and catalog.sqlite unless --catalog names another).
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

    @Flag(name: .long, help: "Stream the recording's frames here as images instead of recording on the hosts.")
    var stream = false

    @OptionGroup var captures: CaptureOptions
    @OptionGroup var output: OutputOptions

    func validate() throws {
        guard (1...32).contains(agents) else { throw ValidationError("--agents must be within 1…32") }
        guard (1...8).contains(cameras) else { throw ValidationError("--cameras must be within 1…8") }
        guard (1...240).contains(fps) else { throw ValidationError("--fps must be within 1…240") }
        guard duration > 0, duration <= 600 else { throw ValidationError("--duration must be within (0, 600] seconds") }
    }

    /// Skews of the complete sets in real time: each frame's agent timestamp mapped back through the
    /// clock error injected into its agent (which the coordinator does not know). This includes the
    /// clock-estimation error that skews in the coordinator's clock cannot show.
    static func trueSkew(_ manifest: CaptureManifest, rig: LoopbackRig) -> CaptureOutput.TrueSkew {
        let skews = manifest.sets.filter(\.complete).map { set in
            manifest.trueSpan(of: set) { rig.member(named: $0.agent)?.clock ?? .system }
        }.sorted()
        guard let last = skews.last else { return .init(p50Us: 0, maxUs: 0) }
        return .init(p50Us: Double(skews[skews.count / 2]) / 1000, maxUs: Double(last) / 1000)
    }

    func run() async throws {
        let logger = output.makeLogger(label: "camrig.demo")
        do {
            let result = try await captures.withStore(logger: logger) { store in
                say("starting \(agents) agents with \(cameras) synthetic camera(s) each (certificates in a temporary directory)")
                let rig = try await LoopbackRig(agents: LocalAgentSpec.simulated(count: agents, cameras: cameras), caName: "CamRig demo CA")
                return try await rig.run { () async throws -> DemoOutput in
                    do {
                        var timing = RemoteAgent.Timing()
                        timing.probeInterval = .milliseconds(20)
                        let pool = try await rig.connect(timing: timing, clockSamples: 64, timeout: .seconds(20), logger: logger)
                        await RigOptions.settleClocks(pool, timeout: 10, logger: logger)
                        say("clocks measured; configuring one session across \(agents * cameras) cameras")
                        let options = try SessionOptions.parse(["--size", size])
                        let session = try await options.makeSession(pool: pool, preset: .high, fps: FrameDuration(framesPerSecond: UInt32(fps)), logger: logger)
                        say("synchronized photo")
                        let photo = try await session.capturePhoto(into: store)
                        say("synchronized recording, \(duration) s at \(fps) fps, \(stream ? "streamed here" : "on the hosts, then offloaded")")
                        let quiet = output.json
                        let length = Duration.milliseconds(Int64(duration * 1000))
                        let show: @Sendable (RecordingProgress) -> Void = { progress in if !quiet { Record.showProgress(progress) } }
                        let recording =
                            if stream {
                                try await session.record(duration: length, into: store, progress: show)
                            } else {
                                try await session.recordOnHosts(duration: length, into: store, progress: show)
                            }
                        say("")
                        await session.stop()
                        let members = rig.members
                        return DemoOutput(
                            agents: zip(pool.agents, members).map { agent, member in
                                DemoOutput.Agent(
                                    agent.snapshot, injected: member.spec, epoch: rig.epoch,
                                    frames: recording.manifest.cameras.filter { $0.agent == agent.snapshot.agentID }
                                )
                            },
                            captures: [photo, recording].map { report in
                                var output = CaptureOutput(report.manifest, directory: report.directory.path)
                                output.trueSkew = Self.trueSkew(report.manifest, rig: rig)
                                return output
                            },
                            catalog: store.catalog.location
                        )
                    } catch let failure as CommandFailure {
                        throw CommandFailure(failure.description + "\nagent logs:\n" + rig.logs())
                    }
                }
            }
            if output.json {
                try printJSON(result, snakeCase: true)
            } else {
                print(result.text)
            }
        } catch {
            throw userFacing(error)
        }
    }

    /// Progress on standard error (quiet with --json).
    private func say(_ line: String) {
        if !output.json { FileHandle.standardError.write(Data((line + "\n").utf8)) }
    }
}
