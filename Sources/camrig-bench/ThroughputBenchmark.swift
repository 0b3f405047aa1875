import CamRigClock
import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigDeviceModel
import CamRigDevices
import CamRigLocalRig
import CamRigText
import CamRigWire
import CamRigWireModel
import Foundation
import Logging
import NIOCore

/// `camrig-bench throughput`: 1920×1080 YUYV frames from an agent to this coordinator, over TLS and
/// over plaintext, against a plain TCP pair and an OpenSSL TLS pair carrying the same frame bytes.
struct ThroughputBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "throughput",
        abstract: "Frame streaming, TLS and plaintext, against a raw TCP pair and an openssl s_server/s_client pair."
    )

    @Option(name: .long, help: "Seconds to measure each CamRig stream (after one second of warm-up).")
    var seconds = 5.0

    @Option(name: .long, help: "Frames the baselines send.")
    var baselineFrames = 400

    @Option(name: .long, help: "Seconds to measure each emulated V4L2 stream (frames lent, then copied); 0 skips them.")
    var v4l2Seconds = 10.0

    @OptionGroup var options: BenchOptions

    /// An emulated V4L2 camera's 1080p30 stream over plaintext, with frames lent from the driver's
    /// buffers or copied out of them.
    struct V4L2Stream: Encodable {
        var frames: String
        var framesPerSecond: Double
        var agentCpuMillisecondsPerFrame: Double
        var agentCpuShareOfOneCore: Double
    }

    struct Transport: Encodable {
        var transport: String
        var frames: Int
        var seconds: Double
        var framesPerSecond: Double
        var megabytesPerSecond: Double
        var framesDroppedByAgent: UInt64
        var baseline: String
        var baselineMegabytesPerSecond: Double
        var ratio: Double
    }

    struct Result: BenchResult {
        var scenario = "throughput"
        var machine: MachineDescription
        var frameBytes: Int
        var format: String
        var transports: [Transport]
        var aesGcmOneCoreMegabytesPerSecond: Double?
        var tlsShareOfAesGcm: Double?
        var v4l2: [V4L2Stream]?
        var v4l2CopyCostMillisecondsPerFrame: Double?

        var text: String {
            var lines = ["throughput: \(format) frames of \(frameBytes) bytes, agent → coordinator on loopback; \(machine.text)"]
            lines.append(table(
                ["TRANSPORT", "FRAMES/S", "MB/S", "AGENT DROPS", "BASELINE", "BASELINE MB/S", "RATIO"],
                transports.map { [
                    $0.transport, String(format: "%.1f", $0.framesPerSecond), String(format: "%.0f", $0.megabytesPerSecond), "\($0.framesDroppedByAgent)",
                    $0.baseline, String(format: "%.0f", $0.baselineMegabytesPerSecond), times($0.ratio),
                ] }
            ))
            if let aes = aesGcmOneCoreMegabytesPerSecond, let share = tlsShareOfAesGcm {
                lines.append(String(format: "AES-128-GCM sealing 16 KiB records on one core (BoringSSL): %.0f MB/s; CamRig TLS streaming is %.0f%% of it", aes, share * 100))
            }
            if let v4l2, !v4l2.isEmpty {
                lines.append("emulated V4L2 camera, YUYV 1920x1080 at 30 fps, plaintext; agent CPU includes the emulator drawing each frame:")
                lines.append(table(
                    ["FRAMES", "FRAMES/S", "AGENT CPU MS/FRAME", "AGENT CPU % OF A CORE"],
                    v4l2.map { [$0.frames, String(format: "%.1f", $0.framesPerSecond), String(format: "%.2f", $0.agentCpuMillisecondsPerFrame), String(format: "%.1f", $0.agentCpuShareOfOneCore * 100)] }
                ))
                if let cost = v4l2CopyCostMillisecondsPerFrame { lines.append(String(format: "copying each frame out of the driver's buffer costs %.2f ms of agent CPU per frame", cost)) }
            }
            return lines.joined(separator: "\n")
        }
    }

    func run() async throws {
        try await options.runOnLoopbackRig(measure)
    }

    func measure(_ rig: LoopbackRig, logger: Logger) async throws -> Result {
        var transports: [Transport] = []
        var sample: [UInt8] = []
        for secure in [true, false] {
            options.say("streaming 1920x1080 YUYV over \(secure ? "TLS" : "plaintext") for \(seconds) s")
            let agent = try await rig.startAgent(
                LocalAgentSpec(cameras: 1, secure: secure, extraArguments: ["--synthetic-high-speed"]), name: secure ? "agent-1" : "agent-plain"
            )
            let security: ClientSecurity = secure ? try rig.clientSecurity() : .insecure
            let client = try await AgentClient.connect(to: agent.endpoint, security: security, logger: logger)
            let measured = try await Self.stream(client, device: "synthetic:SYN0001", framesPerSecond: 1000, seconds: seconds)
            await client.close()
            await rig.stop(agent)
            if sample.isEmpty { sample = measured.sample }
            transports.append(Transport(
                transport: secure ? "CamRig TLS" : "CamRig plaintext", frames: measured.frames, seconds: measured.seconds,
                framesPerSecond: Double(measured.frames) / measured.seconds, megabytesPerSecond: Double(measured.bytes) / measured.seconds / 1e6,
                framesDroppedByAgent: measured.dropped, baseline: "", baselineMegabytesPerSecond: .nan, ratio: .nan
            ))
        }
        options.say("baselines: openssl s_server/s_client and a raw TCP pair, \(baselineFrames) frames each")
        let tls = rig.pki.directory
        let openssl = try Baselines.opensslPair(
            frame: sample, count: baselineFrames,
            certificate: tls.certificateFile(for: "agent-1"), key: tls.keyFile(for: "agent-1"), ca: tls.caCertificatePath
        )
        let tcp = try Baselines.tcpPair(frame: sample, count: baselineFrames)
        transports[0].baseline = "openssl s_server/s_client"
        transports[0].baselineMegabytesPerSecond = openssl / 1e6
        transports[0].ratio = ratio(transports[0].megabytesPerSecond, openssl / 1e6)
        transports[1].baseline = "raw TCP pair"
        transports[1].baselineMegabytesPerSecond = tcp / 1e6
        transports[1].ratio = ratio(transports[1].megabytesPerSecond, tcp / 1e6)
        let aes: Double? = Baselines.aesGCMSpeed() / 1e6
        let v4l2 = try await measureV4L2(rig, logger: logger)
        let lent = v4l2.first { $0.frames == "lent" }
        let copied = v4l2.first { $0.frames == "copied" }
        return Result(
            machine: .current, frameBytes: sample.count, format: "YUYV-1920x1080", transports: transports,
            aesGcmOneCoreMegabytesPerSecond: aes, tlsShareOfAesGcm: aes.map { transports[0].megabytesPerSecond / $0 },
            v4l2: v4l2.isEmpty ? nil : v4l2,
            v4l2CopyCostMillisecondsPerFrame: lent.flatMap { lent in copied.map { $0.agentCpuMillisecondsPerFrame - lent.agentCpuMillisecondsPerFrame } }
        )
    }

    /// The emulated camera's 1080p30 stream from an agent over plaintext, frames lent then copied
    /// (`--v4l2-copy-frames`); empty when the emulator is not installed or `--v4l2-seconds` is 0.
    func measureV4L2(_ rig: LoopbackRig, logger: Logger) async throws -> [V4L2Stream] {
        guard v4l2Seconds > 0, let directory = try emulatorDirectory("/dev/shm/camrig-bench-throughput", say: options.say) else { return [] }
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // video0: discrete sizes, among them 1920x1080 YUYV at 30 fps.
        let node = "\(directory)/video0"
        var rows: [V4L2Stream] = []
        for lend in [true, false] {
            _ = FileManager.default.createFile(atPath: node, contents: nil)
            options.say("streaming an emulated V4L2 camera, 1920x1080 YUYV at 30 fps, frames \(lend ? "lent" : "copied"), for \(v4l2Seconds) s")
            let agent = try await rig.startAgent(
                LocalAgentSpec(cameras: 0, secure: false, extraArguments: ["--v4l2", node] + (lend ? [] : ["--v4l2-copy-frames"])),
                name: lend ? "agent-v4l2-lent" : "agent-v4l2-copied"
            )
            let client = try await AgentClient.connect(to: agent.endpoint, security: .insecure, logger: logger)
            let measured = try await Self.stream(
                client, device: "v4l2:camrig-emu:platform:camrig-emu-0", framesPerSecond: 30, seconds: v4l2Seconds, cpuSeconds: { agent.process.cpuSeconds })
            await client.close()
            await rig.stop(agent)
            for suffix in ["", ".state", ".lock"] { try? FileManager.default.removeItem(atPath: node + suffix) }
            let cpu = measured.cpuSeconds ?? .nan
            rows.append(V4L2Stream(
                frames: lend ? "lent" : "copied", framesPerSecond: Double(measured.frames) / measured.seconds,
                agentCpuMillisecondsPerFrame: cpu * 1000 / Double(max(measured.frames, 1)), agentCpuShareOfOneCore: cpu / measured.seconds
            ))
        }
        return rows
    }

    /// Locks `device`, sets `formatID` (1920×1080 YUYV) at `framesPerSecond`, and counts what arrives for `seconds`
    /// after a second of warm-up, with the CPU time `cpuSeconds` reports used over that time.
    ///
    /// The stream, its stop and its end are bounded together: a second of warm-up, `seconds`, and a minute
    /// for the camera to start and the stream to end once stopped. A stop that fails (its reply lost, the
    /// agent gone) leaves the stream running; the deadline turns that into an error instead of a hang.
    static func stream(
        _ client: AgentClient, device: String, formatID: String = "YUYV-1920x1080", framesPerSecond: Int, seconds: Double,
        cpuSeconds: @escaping @Sendable () -> Double? = { nil }
    ) async throws -> (frames: Int, bytes: Int, seconds: Double, dropped: UInt64, sample: [UInt8], cpuSeconds: Double?) {
        _ = try await configureDevice(client, device: device, formatID: formatID, frameDuration: FrameDuration(framesPerSecond: UInt32(framesPerSecond))!)
        var start = WireStartStream()
        start.deviceID = device
        start.maxQueuedFrames = 4
        let timeout = Duration.seconds(1) + .milliseconds(Int64(seconds * 1000)) + .seconds(60)
        let measured = try await withDeadline(timeout, "agent \(client.endpoint), \(device): the stream of \(seconds) s (and a second of warm-up) to end after StopStream") { [start] in
            let warmUp = ContinuousClock.now + .seconds(1)
            var measured = MeasuredStream()
            var measuring: ContinuousClock.Instant?
            var streamID = ""
            for try await message in client.stream(.startStream(start)) {
                switch message.envelope.body {
                case .streamStarted(let started): streamID = started.streamID
                case .videoFrame(let frame):
                    let now = ContinuousClock.now
                    guard let payload = message.payload else { continue }
                    if measured.sample.isEmpty { measured.sample = Array(payload.readableBytesView) }
                    guard let since = measuring else {
                        if now >= warmUp {
                            measuring = now
                            measured.start = now
                            measured.cpuAtStart = cpuSeconds()
                        }
                        continue
                    }
                    guard measured.end == nil else { continue }
                    measured.frames += 1
                    measured.bytes += payload.readableBytes
                    measured.dropped += frame.droppedBefore
                    if now - since >= .milliseconds(Int64(seconds * 1000)) {
                        measured.end = now
                        measured.cpuAtEnd = cpuSeconds()
                        var stop = WireStopStream()
                        stop.streamID = streamID
                        // Not awaited here: the reply comes over this stream's connection, which this loop
                        // must keep reading. Should the stop fail, the deadline ends the wait.
                        Task { _ = try? await client.request(.stopStream(stop)) }
                    }
                case .streamEnded: break
                default: continue
                }
            }
            return measured
        }
        guard let measuring = measured.start, let end = measured.end else { throw CommandFailure("the stream ended before the measurement did") }
        let cpu = measured.cpuAtStart.flatMap { start in measured.cpuAtEnd.map { $0 - start } }
        return (measured.frames, measured.bytes, (end - measuring).seconds, measured.dropped, measured.sample, cpu)
    }

    /// What `stream` counted, as the stream came.
    struct MeasuredStream: Sendable {
        var start: ContinuousClock.Instant?
        var end: ContinuousClock.Instant?
        var frames = 0
        var bytes = 0
        var dropped: UInt64 = 0
        var sample: [UInt8] = []
        var cpuAtStart: Double?
        var cpuAtEnd: Double?
    }
}

/// Leases `device` and sets `formatID` (and `frameDuration`, when given) on it; returns the lease's id.
func configureDevice(_ client: AgentClient, device: String, formatID: String, frameDuration: FrameDuration? = nil) async throws -> String {
    var lock = WireLock()
    lock.deviceID = device
    guard case .lease(let lease) = try await client.request(.lock(lock)).frame.envelope.body else { throw CommandFailure("the agent did not lease \(device)") }
    var configure = WireConfigure()
    configure.deviceID = device
    configure.leaseID = lease.lease.leaseID
    configure.formatID = formatID
    if let frameDuration {
        configure.minFrameDuration = WireRational(frameDuration)
        configure.maxFrameDuration = WireRational(frameDuration)
    }
    _ = try await client.request(.configure(configure))
    return lease.lease.leaseID
}
