import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigDeviceModel
import CamRigDevices
import CamRigLocalRig
import Foundation
import Logging

/// `camrig-bench`: measures CamRig against baselines run in the same process, on the same machine,
/// at the same time, so that each figure comes with a ratio that a noisy shared machine cannot fake.
@main
struct Bench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "camrig-bench",
        abstract: "Benchmarks of CamRig against baselines measured in the same run.",
        discussion: """
            Each scenario prints a table and then one JSON object (only the JSON with --json). \
            BENCHMARKS.md explains the scenarios, their baselines and the latest figures. The sync \
            scenario needs root (network namespaces) and chrony.
            """,
        subcommands: [SyncBenchmark.self, PhotoBenchmark.self, ColdStartBenchmark.self, PhaseBenchmark.self, ThroughputBenchmark.self, LatencyBenchmark.self, ScaleBenchmark.self, SoakBenchmark.self, TriggerBenchmark.self, RecordBenchmark.self, LibcameraBenchmark.self, EnrollBenchmark.self, StoreBenchmark.self, CatalogBenchmark.self]
    )
}

struct BenchOptions: ParsableArguments {
    @Flag(name: .long, help: "Print only the JSON object.")
    var json = false

    @Option(name: .long, help: "Log level of the coordinator side (default warning).")
    var logLevel: Logger.Level = .warning

    func makeLogger(_ label: String) -> Logger {
        var logger = Logger(label: label) { StreamLogHandler.standardError(label: $0) }
        logger.logLevel = logLevel
        return logger
    }

    /// Progress on standard error (quiet with --json).
    func say(_ line: String) {
        if !json { FileHandle.standardError.write(Data((line + "\n").utf8)) }
    }

    /// Starts a loopback rig of `agents` (none: the scenario starts its own), runs `measure` on it,
    /// shuts the rig down and prints the result.
    func runOnLoopbackRig<Result: BenchResult>(
        agents: [LocalAgentSpec] = [], _ measure: (LoopbackRig, Logger) async throws -> Result
    ) async throws {
        let logger = makeLogger("camrig.bench")
        let rig = try await LoopbackRig(agents: agents, caName: "CamRig bench CA")
        try emit(try await rig.run { try await measure(rig, logger) })
    }

    func emit(_ result: some BenchResult) throws {
        if !json {
            print(result.text)
            print("")
        }
        try printJSON(result, snakeCase: true)
    }
}


protocol BenchResult: Encodable {
    /// The readable table.
    var text: String { get }
}

/// A ratio printed as `1.23×`.
func ratio(_ value: Double, _ baseline: Double) -> Double { baseline > 0 ? value / baseline : .nan }
func times(_ value: Double) -> String { String(format: "%.2f×", value) }

/// The machine, for the record.
struct MachineDescription: Encodable {
    var cpus: Int
    var cpuModel: String
    var kernel: String

    static var current: MachineDescription {
        let info = (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)) ?? ""
        let model = info.split(separator: "\n").first { $0.hasPrefix("model name") }.map { String($0.split(separator: ":", maxSplits: 1).last ?? "").trimmingCharacters(in: .whitespaces) } ?? "unknown"
        var name = utsname()
        uname(&name)
        let release = withUnsafeBytes(of: &name.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        return MachineDescription(cpus: ProcessInfo.processInfo.activeProcessorCount, cpuModel: model, kernel: release)
    }

    var text: String { "\(cpus) CPUs (\(cpuModel)), Linux \(kernel)" }
}

/// Opens a session over every camera of the pool (with `skippingAbsentAgents`, of the agents that list
/// their devices now), to be committed at `size` and `fps`.
func openSession(
    pool: AgentPool, size: Dimensions, pixelFormat: PixelFormat = .yuyv, fps: UInt32, skippingAbsentAgents: Bool = false, logger: Logger
) async throws -> RigSession {
    let (devices, failures) = await RigDiscovery.devices(in: pool)
    if !skippingAbsentAgents, let failure = failures.first {
        throw CommandFailure("agent \(failure.agent) did not list its devices: \(failure.error)")
    }
    guard !devices.isEmpty else { throw CommandFailure("no agent listed any device") }
    let session = RigSession(pool: pool, logger: logger)
    for camera in devices { try await session.addInput(camera) }
    await session.addPhotoOutput()
    await session.addFrameOutput()
    await session.beginConfiguration()
    await session.setPreset(.high)
    await session.setFrameRate(.init(dimensions: size, pixelFormat: pixelFormat, frameDuration: FrameDuration(framesPerSecond: fps)))
    return session
}
