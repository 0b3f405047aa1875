import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigLocalRig
import CamRigText
import CamRigViews
import CamRigWire
import Foundation
import Logging

/// `camrig-bench libcamera`: libcamera's virtual cameras (libcamera 0.4 in the Debian 13 root that
/// scripts/libcamera-root makes), served by an agent built against it: the agent's CPU per frame with
/// frames lent from libcamera's buffers and copied out, and photo latency beside an emulated V4L2 camera's.
struct LibcameraBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "libcamera",
        abstract: "libcamera's virtual cameras: agent CPU per frame lent versus copied, and photo latency beside an emulated V4L2 camera."
    )

    @Option(name: .long, help: "Seconds of streaming per row.")
    var seconds = 5.0

    @Option(name: .long, help: "Photos per latency row.")
    var photos = 10

    @Option(name: .long, help: ArgumentHelp("camrig-agent built against libcamera (default: .build-trixie/build/release/camrig-agent, else its debug build).", valueName: "path"))
    var agent: String?

    @Option(name: .long, help: "The emulated V4L2 camera's start-up delay, from STREAMON to its first frame, in milliseconds (the virtual camera has none).")
    var v4l2StartupMilliseconds = 0

    @OptionGroup var options: BenchOptions

    struct StreamRow: Encodable {
        var frames: String
        var framesPerSecond: Double
        var agentCpuMillisecondsPerFrame: Double
        var agentCpuShareOfOneCore: Double
    }

    struct Result: BenchResult {
        var scenario = "libcamera"
        var machine: MachineDescription
        var agentBuild: String
        var format = "NV12-1920x1080"
        var streams: [StreamRow]
        /// Copied minus lent agent CPU per frame, and a plain copy of one frame's bytes here, for scale.
        var copyCostMillisecondsPerFrame: Double
        var memcpyMillisecondsPerFrame: Double
        var libcameraPhotos: [PhotoLatencyRow]
        var v4l2StartupMilliseconds: Int
        var v4l2Photos: [PhotoLatencyRow]
        /// Median latency of the libcamera camera over the V4L2 camera's, per row ("speed unprepared", …).
        var libcameraOverV4L2Latency: [String: Double]

        var text: String {
            var lines = ["libcamera: virtual cameras of libcamera 0.4 (Debian 13 root), \(format) at 30 fps, agent \(agentBuild) build; \(machine.text)"]
            lines.append(table(
                ["FRAMES", "FPS", "AGENT CPU ms/FRAME", "AGENT CPU % OF A CORE"],
                streams.map { [$0.frames, String(format: "%.1f", $0.framesPerSecond), String(format: "%.2f", $0.agentCpuMillisecondsPerFrame), String(format: "%.1f", $0.agentCpuShareOfOneCore * 100)] }
            ))
            lines.append(String(format: "copying costs %.2f ms of agent CPU a frame; a plain copy of one frame here: %.2f ms (the virtual pipeline's own pattern making is in both rows)", copyCostMillisecondsPerFrame, memcpyMillisecondsPerFrame))
            lines.append("photo latency, request to TriggerFired, 1920x1080 (libcamera NV12, V4L2 YUYV; the emulated V4L2 camera's first frame \(v4l2StartupMilliseconds) ms after STREAMON):")
            var rows: [[String]] = []
            for (camera, list) in [("libcamera virtual", libcameraPhotos), ("V4L2 emulated", v4l2Photos)] {
                for row in list {
                    rows.append([camera, row.quality, row.prepared ? "yes" : "no", "\(row.photos)", String(format: "%.1f", row.latencyMilliseconds.p50), String(format: "%.1f", row.latencyMilliseconds.p99), String(format: "%.1f", row.captureStageMilliseconds.p50)])
                }
            }
            lines.append(table(["CAMERA", "QUALITY", "PREPARED", "PHOTOS", "LATENCY ms P50", "P99", "CAPTURE STAGE ms P50"], rows))
            lines.append("libcamera / V4L2 latency, p50: " + libcameraOverV4L2Latency.sorted { $0.key < $1.key }.map { "\($0.key) \(times($0.value))" }.joined(separator: ", "))
            return lines.joined(separator: "\n")
        }
    }

    func run() async throws {
        let project = FileManager.default.currentDirectoryPath
        let launcher = URL(fileURLWithPath: project + "/scripts/in-libcamera-root")
        let candidates = [project + "/.build-trixie/build/release/camrig-agent", project + "/.build-trixie/build/debug/camrig-agent"]
        guard let agentPath = agent ?? candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw CommandFailure("no camrig-agent built against libcamera: run scripts/libcamera-root (from the project's folder), or give --agent")
        }
        guard FileManager.default.isExecutableFile(atPath: launcher.path) else {
            throw CommandFailure("run camrig-bench libcamera from the project's folder: it needs scripts/in-libcamera-root")
        }
        let work = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("camrig-bench-libcamera-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }
        let yaml = work.appendingPathComponent("virtual.yaml")
        try """
            %YAML 1.1
            ---
            "bench":
              supported_formats:
                - width: 1920
                  height: 1080
                  frame_rates: [30, 30]
              test_pattern: "bars"
              model: "CamRig bench"
            """.write(to: yaml, atomically: true, encoding: .utf8)
        let frameBytes = 1920 * 1080 * 3 / 2
        let memcpy = Self.copyMilliseconds(bytes: frameBytes)
        try await options.runOnLoopbackRig { rig, logger in
            var streams: [StreamRow] = []
            var photoRows: [PhotoLatencyRow] = []
            for lend in [true, false] {
                options.say("streaming a libcamera virtual camera, 1920x1080 NV12 at 30 fps, frames \(lend ? "lent" : "copied"), for \(seconds) s")
                let process = try await LocalAgentProcess.start(
                    executable: launcher,
                    arguments: ["--virtual-cameras", yaml.path, agentPath, "--insecure", "--listen", "127.0.0.1:0", "--spool-dir", work.appendingPathComponent("spool").path]
                        + (lend ? [] : ["--copy-frames"]),
                    logFile: work.appendingPathComponent("agent-\(lend).log"))
                let client = try await AgentClient.connect(to: process.endpoint, security: .insecure, logger: logger)
                let measured = try await ThroughputBenchmark.stream(
                    client, device: "libcamera:bench", formatID: "NV12-1920x1080", framesPerSecond: 30, seconds: seconds,
                    cpuSeconds: { process.cpuSeconds })
                let cpu = measured.cpuSeconds ?? .nan
                streams.append(StreamRow(
                    frames: lend ? "lent" : "copied", framesPerSecond: Double(measured.frames) / measured.seconds,
                    agentCpuMillisecondsPerFrame: cpu * 1000 / Double(max(measured.frames, 1)), agentCpuShareOfOneCore: cpu / measured.seconds))
                await client.close()
                if lend {
                    // A new connection: the stream's lease ended with the last one.
                    let photoClient = try await AgentClient.connect(to: process.endpoint, security: .insecure, logger: logger)
                    photoRows = try await measurePhotoLatency(
                        client: photoClient, device: "libcamera:bench", photos: photos, label: "a libcamera virtual camera", say: options.say)
                    await photoClient.close()
                }
                _ = await process.stop()
            }
            let v4l2Rows = try await v4l2PhotoLatency(
                rig: rig, logger: logger, photos: photos, startupMilliseconds: v4l2StartupMilliseconds, format: "YUYV-1920x1080", say: options.say)
            var ratios: [String: Double] = [:]
            for row in photoRows {
                guard let other = v4l2Rows.first(where: { $0.quality == row.quality && $0.prepared == row.prepared }) else { continue }
                ratios["\(row.quality) \(row.prepared ? "prepared" : "unprepared")"] = ratio(row.latencyMilliseconds.p50, other.latencyMilliseconds.p50)
            }
            return Result(
                machine: .current, agentBuild: agentPath.contains("/release/") ? "release" : "debug", streams: streams,
                copyCostMillisecondsPerFrame: streams.count == 2 ? streams[1].agentCpuMillisecondsPerFrame - streams[0].agentCpuMillisecondsPerFrame : .nan,
                memcpyMillisecondsPerFrame: memcpy, libcameraPhotos: photoRows, v4l2StartupMilliseconds: v4l2StartupMilliseconds, v4l2Photos: v4l2Rows,
                libcameraOverV4L2Latency: ratios)
        }
    }

    /// The median time of copying `bytes` into freshly allocated memory, as a copied frame is (a new
    /// buffer each time, its pages touched for the first time by the copy), in milliseconds.
    static func copyMilliseconds(bytes: Int) -> Double {
        let source = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes, alignment: 64)
        defer { source.deallocate() }
        for index in 0..<bytes { source[index] = UInt8(truncatingIfNeeded: index &* 31) }
        var samples: [Double] = []
        var check = 0
        for _ in 0..<30 {
            let start = ContinuousClock.now
            let copy = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes, alignment: 64)
            copy.copyMemory(from: UnsafeRawBufferPointer(source))
            samples.append((ContinuousClock.now - start).microseconds / 1000)
            check &+= Int(copy[bytes / 2]) &+ Int(copy[bytes - 1])
            copy.deallocate()
        }
        precondition(check != -1)
        return samples.sorted()[samples.count / 2]
    }
}
