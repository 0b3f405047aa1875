import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigDevices
import Foundation
import CamRigSecurity
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
        subcommands: [SyncBenchmark.self, ThroughputBenchmark.self, LatencyBenchmark.self, ScaleBenchmark.self]
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

    func emit(_ result: some BenchResult) throws {
        if !json {
            print(result.text)
            print("")
        }
        try printJSON(result, snakeCase: true)
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}

protocol BenchResult: Encodable {
    /// The readable table.
    var text: String { get }
}

/// Percentiles of a sample, in the sample's unit.
struct Distribution: Encodable {
    var count: Int
    var p50: Double
    var p99: Double
    var p999: Double
    var max: Double
    var mean: Double

    init(_ values: [Double]) {
        let sorted = values.sorted()
        count = sorted.count
        func at(_ q: Double) -> Double {
            guard !sorted.isEmpty else { return .nan }
            let index = Swift.max(0, Int((q * Double(sorted.count)).rounded(.up)) - 1)
            return sorted[Swift.min(sorted.count - 1, index)]
        }
        p50 = at(0.5)
        p99 = at(0.99)
        p999 = at(0.999)
        max = sorted.last ?? .nan
        mean = sorted.isEmpty ? .nan : sorted.reduce(0, +) / Double(sorted.count)
    }
}

/// A ratio printed as `1.23×`.
func ratio(_ value: Double, _ baseline: Double) -> Double { baseline > 0 ? value / baseline : .nan }
func times(_ value: Double) -> String { String(format: "%.2f×", value) }

/// This process's resident memory in KiB.
func residentKilobytes(pid: Int32 = getpid()) -> Int {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return 0 }
    for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") ?? 0
    }
    return 0
}

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

/// A failure the user sees as `Error: …`.
struct BenchFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

extension Duration {
    var microseconds: Double { Double(components.seconds) * 1e6 + Double(components.attoseconds) / 1e12 }
    var secondsValue: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

/// Opens a session over every camera of the pool, committed at `size` and `fps`.
func openSession(pool: AgentPool, size: Dimensions, fps: UInt32, logger: Logger) async throws -> RigSession {
    let (devices, failures) = await RigDiscovery.devices(in: pool)
    if let failure = failures.first { throw BenchFailure("agent \(failure.agent) did not list its devices: \(failure.error)") }
    let session = RigSession(pool: pool, logger: logger)
    for camera in devices { try await session.addInput(camera) }
    await session.addPhotoOutput()
    await session.addFrameOutput()
    await session.beginConfiguration()
    await session.setPreset(.high)
    await session.setFrameRate(.init(dimensions: size, pixelFormat: .yuyv, frameDuration: FrameDuration(framesPerSecond: fps)))
    return session
}

/// A temporary directory with a rig CA and the agents started from it; `close()` stops them and
/// removes it all.
final class BenchWorkspace {
    let work: URL
    let tls: TLSDirectory
    private(set) var agents: [LocalAgentProcess] = []

    init() throws {
        work = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("camrig-bench-\(UUID().uuidString)")
        tls = TLSDirectory(path: work.appendingPathComponent("tls").path)
        try tls.initialize(caName: "CamRig bench CA")
    }

    /// Starts `camrig-agent` on loopback as `name` (with a certificate of its own, or `--insecure`).
    func startAgent(_ name: String, secure: Bool = true, _ arguments: [String]) throws -> LocalAgentProcess {
        if secure { try tls.issue(name: name, role: .agent, hostnames: ["127.0.0.1", "localhost"]) }
        let agent = try LocalAgentProcess.start(
            arguments: ["--listen", "127.0.0.1:0", "--log-level", "warning", "--spool-dir", work.appendingPathComponent("spool-\(name)").path]
                + (secure ? ["--tls-dir", tls.path, "--identity", name] : ["--insecure"]) + arguments,
            logFile: work.appendingPathComponent("\(name).log")
        )
        agents.append(agent)
        return agent
    }

    /// The coordinator's side of this workspace's TLS.
    func security() throws -> ClientSecurity { .tls(try MutualTLS.client(directory: tls, identityName: "coordinator")) }

    func close() {
        for agent in agents { agent.stop(timeout: 5) }
        agents = []
        try? FileManager.default.removeItem(at: work)
    }
}
