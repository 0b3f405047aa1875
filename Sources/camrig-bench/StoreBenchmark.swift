import ArgumentParser
import CamRigCLI
import CamRigCapture
import CamRigClock
import CamRigLocalRig
import CamRigObjectStore
import Crypto
import Foundation
import NIOCore

/// `camrig-bench store`: how fast agents put their files into an S3-compatible store, against boto3 putting
/// the same bytes into the same store in the same run.
///
/// The store is a real one, started by `scripts/object-store` (OpenStack Swift's s3api on loopback). Each
/// "agent" is the agent's own upload (`ObjectUpload` from a file: MD5 and SHA-256 of every part, a
/// signed request per part, a resumable multipart upload checked against the store's entity tags), in
/// parts of `--part-size` MiB, `--part-concurrency` at a time.
///
/// - Per agent: one file uploaded alone.
/// - Aggregate: `--agents` files at once, one per agent.
///
/// Like an agent offloading a recording, the upload knows its file's SHA-256 beforehand (the recorder
/// notes it as it writes): it reads the file once, hashing each part for the store (MD5, SHA-256) and
/// the whole to check it before completing.
///
/// The baseline is `scripts/s3-put-baseline` (boto3's transfer manager, the same part size and
/// concurrency), one process per agent, over the same files.
struct StoreBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "store",
        abstract: "Upload MB/s of the agents' object store uploads, per agent and aggregate, against boto3 on the same bytes and store."
    )

    @Option(name: .long, help: "Agents uploading at once for the aggregate.")
    var agents = 4

    @Option(name: .customLong("file-mib"), help: "MiB per agent's file.")
    var fileMiB = 64

    @Option(name: .long, help: "MiB per part.")
    var partSize = 8

    @Option(name: .long, help: "Parts in flight per upload.")
    var partConcurrency = 4

    @Option(name: .long, help: "Repetitions; the best of each is kept.")
    var repeats = 3

    @OptionGroup var options: BenchOptions

    struct Result: BenchResult {
        var machine: MachineDescription
        var store: String
        var agents: Int
        var fileBytes: Int
        var partBytes: Int
        var partConcurrency: Int
        var perAgentMBps: Double
        var perAgentBaselineMBps: Double
        var aggregateMBps: Double
        var aggregateBaselineMBps: Double

        var text: String {
            """
            camrig-bench store — \(machine.text)
            \(store), files of \(fileBytes >> 20) MiB in parts of \(partBytes >> 20) MiB, \(partConcurrency) at a time
                                          camrig agent      boto3 (baseline)   ratio
              one agent                  \(String(format: "%8.1f MB/s", perAgentMBps))   \(String(format: "%8.1f MB/s", perAgentBaselineMBps))      \(times(ratio(perAgentMBps, perAgentBaselineMBps)))
              \(String(format: "%2d", agents)) agents at once, total     \(String(format: "%8.1f MB/s", aggregateMBps))   \(String(format: "%8.1f MB/s", aggregateBaselineMBps))      \(times(ratio(aggregateMBps, aggregateBaselineMBps)))
            """
        }
    }

    func validate() throws {
        guard (1...32).contains(agents), (1...4096).contains(fileMiB), (5...512).contains(partSize), (1...32).contains(partConcurrency), (1...20).contains(repeats)
        else {
            throw ValidationError("--agents 1…32, --file-mib 1…4096, --part-size 5…512, --part-concurrency 1…32, --repeats 1…20")
        }
    }

    /// The package's `scripts/` folder (benchmarks run from a checkout).
    static let scripts = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("scripts")

    func run() async throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("camrig-bench-store-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        let serverDirectory = scratch.appendingPathComponent("store")
        let started = try await ToolRunner.run(Self.scripts.appendingPathComponent("object-store").path, ["start", serverDirectory.path], timeout: 120)
        guard started.status == 0 else { throw CommandFailure("scripts/object-store start failed:\n\(started.stderr)") }
        defer { Self.stopStore(serverDirectory) }
        let environment = ProcessInfo.processInfo.environment.merging(
            ToolRunner.environment(fromLines: try String(contentsOf: serverDirectory.appendingPathComponent("env"), encoding: .utf8))) { $1 }
        let location = try ObjectStoreLocation.parse("s3://bench", environment: environment)

        options.say("writing \(agents) files of \(fileMiB) MiB…")
        var files: [URL] = []
        for index in 0..<agents {
            let file = scratch.appendingPathComponent("agent\(index).bin")
            var bytes = [UInt8](repeating: 0, count: fileMiB << 20)
            var state = UInt64(index + 1) &* 0x9E37_79B9_7F4A_7C15
            for offset in stride(from: 0, to: bytes.count, by: 8) {
                state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                withUnsafeBytes(of: state) { word in
                    for byte in 0..<min(8, bytes.count - offset) { bytes[offset + byte] = word[byte] }
                }
            }
            try Data(bytes).write(to: file)
            files.append(file)
        }
        // What an agent knows of its recorded files before it uploads them: their SHA-256, noted by the recorder.
        var digests: [String] = []
        for file in files { digests.append(SignatureV4.hex(SHA256.hash(data: try Data(contentsOf: file)))) }
        var perAgent = 0.0
        var perAgentBaseline = 0.0
        var aggregate = 0.0
        var aggregateBaseline = 0.0
        try await S3Client.with(location, timeout: .seconds(300)) { client in
            try await client.createBucket()
            for round in 1...repeats {
                options.say("round \(round) of \(repeats): one agent…")
                perAgent = max(perAgent, try await upload([files[0]], digests: digests, round: round, client: client))
                perAgentBaseline = max(perAgentBaseline, try await baseline([files[0]], round: round, environment: environment))
                options.say("round \(round) of \(repeats): \(agents) agents at once…")
                aggregate = max(aggregate, try await upload(files, digests: digests, round: round, client: client))
                aggregateBaseline = max(aggregateBaseline, try await baseline(files, round: round, environment: environment))
            }
        }
        try options.emit(
            Result(
                machine: .current, store: "OpenStack Swift \(Self.swiftVersion()) s3api on loopback", agents: agents, fileBytes: fileMiB << 20,
                partBytes: partSize << 20, partConcurrency: partConcurrency, perAgentMBps: perAgent, perAgentBaselineMBps: perAgentBaseline,
                aggregateMBps: aggregate, aggregateBaselineMBps: aggregateBaseline))
    }

    /// MB/s of `files` uploaded at once, each as an agent does.
    private func upload(_ files: [URL], digests: [String], round: Int, client: S3Client) async throws -> Double {
        let start = ContinuousClock.now
        let partBytes = partSize << 20
        let concurrency = partConcurrency
        let stored = try await withThrowingTaskGroup(of: UInt64.self) { group in
            for (index, file) in files.enumerated() {
                group.addTask {
                    let upload = ObjectUpload(
                        key: "camrig/\(round)/\(files.count)/agent\(index).bin", source: .file(file.path), partSize: partBytes, concurrency: concurrency,
                        sha256: digests[index])
                    return try await upload.run(with: client).size
                }
            }
            return try await group.reduce(0, +)
        }
        return Double(stored) / 1e6 / (ContinuousClock.now - start).seconds
    }

    /// MB/s of `files` uploaded at once by boto3, one process per file: the bytes over the longest of the
    /// processes' own upload times (each times its uploads only, not Python's start nor its imports).
    private func baseline(_ files: [URL], round: Int, environment: [String: String]) async throws -> Double {
        let script = Self.scripts.appendingPathComponent("s3-put-baseline").path
        let (partConcurrency, partSize) = (self.partConcurrency, self.partSize)
        // One process per agent, all at once; each is run and reaped on a thread of its own (ToolRunner).
        let results = try await withThrowingTaskGroup(of: ToolRunner.Result.self) { group in
            for file in files {
                group.addTask {
                    try await ToolRunner.run(
                        script,
                        [
                            "--bucket", "bench", "--prefix", "boto3/\(round)/\(files.count)/", "--concurrency", "\(partConcurrency)", "--part-size",
                            "\(partSize)", file.path,
                        ], environment: environment, timeout: 600)
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        var bytes = 0.0
        var longest = 0.0
        for result in results {
            guard result.status == 0,
                let fields = try? JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any],
                let sent = fields["bytes"] as? Double ?? (fields["bytes"] as? Int).map(Double.init), let seconds = fields["seconds"] as? Double
            else {
                throw CommandFailure("scripts/s3-put-baseline failed (\(result.status)): \(result.stdout)\(result.stderr)")
            }
            bytes += sent
            longest = max(longest, seconds)
        }
        return bytes / 1e6 / longest
    }

    static func stopStore(_ directory: URL) {
        _ = try? ToolRunner.run(scripts.appendingPathComponent("object-store").path, ["stop", directory.path], timeout: 60)
    }

    static func swiftVersion() -> String {
        (try? ToolRunner.run("/usr/bin/dpkg-query", ["-W", "-f", "${Version}", "swift-proxy"], timeout: 10).stdout) ?? "?"
    }
}
