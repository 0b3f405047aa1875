import ArgumentParser
import CamRigCLI
import CamRigCapture
import CamRigClock
import CamRigCoordinator
import CamRigDeviceModel
import CamRigDevices
import CamRigImage
import CamRigLocalRig
import CamRigMedia
import CamRigStorage
import CamRigText
import CamRigWire
import Foundation
import Logging
import NIOCore

/// `camrig-bench record`: hosts in network namespaces, each behind a link limited to 1 Gbit/s each way,
/// one camera each at 1920×1080 and 30 fps. The same recording streamed to the coordinator
/// (`--stream`) and made on the hosts with each codec, in one run; the offload against raw TCP and TLS
/// transfers of the same bytes over the same links.
struct RecordBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "record",
        abstract: "Streamed versus on-host recordings over 1 Gbit/s links, per codec; offload versus raw TCP and TLS.",
        discussion: "Needs root (network namespaces, tc). Use a release build: a debug build's synthetic cameras cannot make 1080p frames in real time."
    )

    @Option(name: .long, help: "Hosts, one camera each.")
    var hosts = 2
    @Option(name: .long, help: "Seconds of every recording.")
    var seconds = 60.0
    @Option(name: .long, help: "Frame rate.")
    var fps: UInt32 = 30
    @Option(name: .long, help: "Each host's link, in Mbit/s each way.")
    var linkMbit = 1000
    @Option(name: .long, help: "Rows, comma-separated: stream, copy (the camera's MJPEG), mjpeg, ffv1, h264, raw.")
    var modes = "stream,copy,mjpeg,raw,h264,ffv1"
    @Option(name: .long, help: "Frames per codec in the writer-only measurement.")
    var writerFrames = 60
    @Option(name: .long, help: "How much slower a Pi-class host's core is than this machine's, for the Pi column (a stated estimate).")
    var piFactor = 4.0

    @OptionGroup var options: BenchOptions

    struct Row: Encodable {
        var mode: String
        var codec: String
        var framesPerCamera: [Int]
        var gapsPerCamera: [Int]
        var sets: Int
        var completeSets: Int
        /// CPU of every agent process (camera included) per recorded frame.
        var agentCpuMsPerFrame: Double
        var bytesPerFrame: Double
        var offloadMegabytesPerSecond: Double?
        /// The same bytes per host, at once from every host, over the same links: raw TCP and TLS (Python).
        var rawTcpMegabytesPerSecond: Double?
        var rawTlsMegabytesPerSecond: Double?
        /// From the recording's end until every file (or image) is on the coordinator.
        var secondsStopToAllHere: Double
        var error: String?
    }

    struct Writer: Encodable {
        var codec: String
        var msPerFrame: Double
        var piMsPerFrame: Double
        var bytesPerFrame: Double
        var keepsUpAtFps: Bool
    }

    struct Result: BenchResult {
        var scenario = "record"
        var machine: MachineDescription
        var hosts: Int
        var seconds: Double
        var fps: UInt32
        var linkMbit: Int
        var rows: [Row]
        var cameraOnlyCpuMsPerFrame: Double
        var writers: [Writer]
        var piFactor: Double

        var text: String {
            var lines = [
                "record: \(hosts) hosts in network namespaces on \(linkMbit) Mbit/s links (tbf), one synthetic 1920x1080 camera each at \(fps) fps, \(seconds) s; \(machine.text)"
            ]
            lines.append(table(
                ["MODE", "CODEC", "FRAMES/CAMERA", "GAPS/DROPS", "SETS COMPLETE", "AGENT CPU ms/frame", "BYTES/frame", "OFFLOAD MB/s", "TCP MB/s", "vs TCP", "TLS MB/s", "vs TLS", "STOP→HERE s"],
                rows.map { row in
                    [
                        row.mode, row.codec, row.framesPerCamera.map(String.init).joined(separator: "/"), row.gapsPerCamera.map(String.init).joined(separator: "/"),
                        "\(row.completeSets)/\(row.sets)", String(format: "%.1f", row.agentCpuMsPerFrame), String(format: "%.0f", row.bytesPerFrame),
                        row.offloadMegabytesPerSecond.map { String(format: "%.1f", $0) } ?? "-",
                        row.rawTcpMegabytesPerSecond.map { String(format: "%.1f", $0) } ?? "-",
                        row.offloadMegabytesPerSecond.flatMap { offload in row.rawTcpMegabytesPerSecond.map { times(ratio(offload, $0)) } } ?? "-",
                        row.rawTlsMegabytesPerSecond.map { String(format: "%.1f", $0) } ?? "-",
                        row.offloadMegabytesPerSecond.flatMap { offload in row.rawTlsMegabytesPerSecond.map { times(ratio(offload, $0)) } } ?? "-",
                        String(format: "%.1f", row.secondsStopToAllHere),
                    ]
                }))
            lines.append(String(format: "offload and its baselines: aggregate over the hosts, every host sending its own bytes at once (the baselines: as many bytes as the row's largest offload per host, at most 1 GB); the camera alone: %.1f ms agent CPU/frame", cameraOnlyCpuMsPerFrame))
            lines.append(table(
                ["WRITER (in process)", "ms/frame here", String(format: "Pi est. ×%.0f", piFactor), "BYTES/frame", "KEEPS UP AT \(fps) fps ON A PI"],
                writers.map { [$0.codec, String(format: "%.2f", $0.msPerFrame), String(format: "%.1f", $0.piMsPerFrame), String(format: "%.0f", $0.bytesPerFrame), $0.keepsUpAtFps ? "yes" : "no"] }))
            for row in rows where row.error != nil { lines.append("\(row.mode) \(row.codec): \(row.error!)") }
            return lines.joined(separator: "\n")
        }
    }

    func validate() throws {
        guard (1...8).contains(hosts), seconds > 0, fps > 0, linkMbit > 0 else { throw ValidationError("--hosts 1…8, positive --seconds, --fps and --link-mbit") }
        for mode in modes.split(separator: ",") where !["stream", "copy", "mjpeg", "ffv1", "h264", "raw"].contains(String(mode)) {
            throw ValidationError("unknown mode '\(mode)'")
        }
    }

    func run() async throws {
        if let reason = HostNetwork.unavailableReason { throw CommandFailure("the record scenario needs network namespaces: \(reason)") }
        let logger = options.makeLogger("camrig.bench")
        options.say("writers in process: \(writerFrames) frames of 1920x1080 per codec")
        let writers = try measureWriters()
        options.say("starting \(hosts) hosts on \(linkMbit) Mbit/s links")
        let specs = (0..<hosts).map { index in
            NetworkedRig.AgentSpec(cameras: 1, extraArguments: ["--synthetic-seed", "\(index + 1)", "--synthetic-high-speed"])
        }
        let rig = try await NetworkedRig.start(agents: specs, agentExecutable: try LocalAgentProcess.executable(), seed: 3)
        defer { rig.shutdown() }
        for member in rig.members { try rig.network.limitRate(member.host, megabitsPerSecond: linkMbit) }
        let pool = AgentPool(endpoints: rig.endpoints, security: try rig.clientSecurity(), logger: logger)
        pool.start()
        defer { Task { await pool.stop() } }
        let notReady = await pool.waitUntilReady(clockSamples: 16, timeout: .seconds(30))
        guard notReady.isEmpty else { throw CommandFailure("agents not ready: \(notReady.map(\.name).joined(separator: ", "))\n\(rig.logs())") }
        let cpu = { rig.members.compactMap(\.process.cpuSeconds).reduce(0, +) }
        let out = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("camrig-bench-record-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: out) }

        var rows: [Row] = []
        for mode in modes.split(separator: ",").map(String.init) {
            let compressed = mode == "copy"
            let session = try await openSession(
                pool: pool, size: Dimensions(width: 1920, height: 1080), pixelFormat: compressed ? .mjpeg : .yuyv, fps: fps, logger: logger)
            try await session.commitConfiguration()
            try await session.lockPhase()
            _ = await session.waitForPhaseLock(timeout: .seconds(10))
            let store = try CaptureStore(root: out.appendingPathComponent(mode))
            options.say("\(mode): recording \(seconds) s")
            let duration = Duration.milliseconds(Int64(seconds * 1000))
            // What follows the recording's end (the frames converted here, the hosts' files closed) takes a
            // while at 1080p in a debug build: four times the duration, and five minutes more.
            let recordingTimeout = duration * 4 + .seconds(300)
            let cpuBefore = cpu()
            do {
                if mode == "stream" {
                    let started = ContinuousClock.now
                    let report = try await withDeadline(recordingTimeout, "\(mode): a streamed recording of \(seconds) s from \(hosts) hosts to end") {
                        try await session.record(duration: duration, into: store)
                    }
                    let cpuAfter = cpu()
                    let manifest = report.manifest
                    let frames = manifest.cameras.map(\.framesDelivered)
                    let bytes = Self.folderSize(report.directory)
                    rows.append(Row(
                        mode: "streamed", codec: "png (here)", framesPerCamera: frames, gapsPerCamera: manifest.cameras.map(\.framesDropped),
                        sets: manifest.summary.sets, completeSets: manifest.summary.completeSets,
                        agentCpuMsPerFrame: (cpuAfter - cpuBefore) * 1000 / Double(max(1, frames.reduce(0, +))),
                        bytesPerFrame: Double(bytes) / Double(max(1, frames.reduce(0, +))), offloadMegabytesPerSecond: nil,
                        secondsStopToAllHere: max(0, (ContinuousClock.now - started).seconds - seconds)))
                } else {
                    var hostOptions = HostRecordingOptions()
                    hostOptions.codec = RecordingCodec(rawValue: mode) ?? .auto
                    hostOptions.offload = false
                    let report = try await withDeadline(
                        recordingTimeout, "\(mode): an on-host recording of \(seconds) s on \(hosts) hosts to end"
                    ) { [hostOptions] in
                        try await session.recordOnHosts(duration: duration, options: hostOptions, into: store)
                    }
                    let cpuAfter = cpu()
                    let stopped = ContinuousClock.now
                    let handle = CaptureHandle(id: report.manifest.id, kind: .recording, location: report.directory)
                    let offload = RecordingOffload(pool: pool, sink: store, logger: logger)
                    let (manifest, outcome) = await offload.offload(report.manifest, capture: handle)
                    let here = (ContinuousClock.now - stopped).seconds
                    let tracks = manifest.hostRecording?.tracks ?? []
                    let frames = tracks.map(\.frames)
                    let perHost = min(Dictionary(grouping: tracks, by: \.agent).values.map { $0.flatMap(\.files).reduce(UInt64(0)) { $0 + $1.size } }.max() ?? 0, 1_000_000_000)
                    options.say("\(mode): baselines, \(perHost / 1_000_000) MB from every host at once, raw TCP then TLS")
                    let tcp = try await Self.rawTransfer(rig: rig, bytes: perHost, tls: false, linkMbit: linkMbit)
                    let tlsRate = try await Self.rawTransfer(rig: rig, bytes: perHost, tls: true, linkMbit: linkMbit)
                    rows.append(Row(
                        mode: "on host", codec: tracks.first?.codec ?? mode, framesPerCamera: frames, gapsPerCamera: tracks.map(\.gaps),
                        sets: manifest.summary.sets, completeSets: manifest.summary.completeSets,
                        agentCpuMsPerFrame: (cpuAfter - cpuBefore) * 1000 / Double(max(1, frames.reduce(0, +))),
                        bytesPerFrame: Double(outcome.bytes) / Double(max(1, frames.reduce(0, +))),
                        offloadMegabytesPerSecond: outcome.seconds > 0 ? Double(outcome.bytes) / 1e6 / outcome.seconds : nil,
                        rawTcpMegabytesPerSecond: tcp, rawTlsMegabytesPerSecond: tlsRate, secondsStopToAllHere: here,
                        error: outcome.waiting.isEmpty ? nil : outcome.waiting.joined(separator: "; ")))
                }
            } catch {
                rows.append(Row(mode: mode == "stream" ? "streamed" : "on host", codec: mode, framesPerCamera: [], gapsPerCamera: [], sets: 0, completeSets: 0, agentCpuMsPerFrame: .nan, bytesPerFrame: .nan, offloadMegabytesPerSecond: nil, secondsStopToAllHere: .nan, error: "\(error)"))
            }
            await session.stop()
            try? FileManager.default.removeItem(at: out.appendingPathComponent(mode))
        }

        // The camera alone: a streaming camera's CPU with nothing recorded, over the same time.
        options.say("camera alone: \(min(seconds, 10)) s of streaming into no recording")
        let cameraOnly = try await measureCameraAlone(pool: pool, logger: logger, cpu: cpu)

        try options.emit(Result(
            machine: .current, hosts: hosts, seconds: seconds, fps: fps, linkMbit: linkMbit, rows: rows, cameraOnlyCpuMsPerFrame: cameraOnly,
            writers: writers, piFactor: piFactor))
    }

    /// The agents' CPU per frame while their cameras stream and nobody records: a preview stream of
    /// one frame a second keeps each camera running.
    func measureCameraAlone(pool: AgentPool, logger: Logger, cpu: () -> Double) async throws -> Double {
        let session = try await openSession(pool: pool, size: Dimensions(width: 1920, height: 1080), pixelFormat: .yuyv, fps: fps, logger: logger)
        try await session.commitConfiguration()
        let inputs = await session.inputs
        let span = min(seconds, 10)
        let before = cpu()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for input in inputs {
                group.addTask {
                    guard let client = try? input.agent.client() else { return }
                    var start = WireStartStream()
                    start.deviceID = input.deviceID
                    var preview = WirePreviewOptions()
                    preview.maxFramesPerSecond = 0.2
                    preview.maxWidth = 64
                    start.preview = preview
                    let stopAt = ContinuousClock.now + .milliseconds(Int64(span * 1000))
                    // The stream is stopped at `stopAt` by a task of its own (a preview frame comes only every
                    // five seconds, so the loop cannot be the one to notice the time), and read until it ends;
                    // a minute more is left for the camera to start and the stream to end once stopped.
                    try await withDeadline(
                        .milliseconds(Int64(span * 1000)) + .seconds(60),
                        "agent \(input.agent.name), \(input.deviceID): the preview stream to end after StopStream at \(span) s"
                    ) { [start] in
                        do {
                            for try await frame in client.stream(.startStream(start)) {
                                guard case .streamStarted(let started) = frame.envelope.body else { continue }
                                var stop = WireStopStream()
                                stop.streamID = started.streamID
                                // Not awaited here: the reply comes over this stream's connection, which this
                                // loop keeps reading. Should the stop fail, the deadline ends the wait.
                                Task { [stop] in
                                    try? await Task.sleep(until: stopAt)
                                    _ = try? await client.request(.stopStream(stop))
                                }
                            }
                        } catch {}  // a stream that fails counts as the camera alone all the same, as it always did
                    }
                }
            }
            try await group.waitForAll()
        }
        let after = cpu()
        await session.stop()
        return (after - before) * 1000 / (span * Double(fps) * Double(inputs.count))
    }

    /// Each codec's writer on this machine, in this process: the agent's own code path (JPEG from YUYV
    /// through libjpeg-turbo for mjpeg, libavcodec for ffv1 and h264, the muxer alone for copy and raw).
    func measureWriters() throws -> [Writer] {
        let width = 1920, height = 1080
        let format = DeviceFormat(pixelFormat: .yuyv, dimensions: Dimensions(width: UInt32(width), height: UInt32(height)), frameRateRanges: [], bytesPerLine: UInt32(width * 2))
        var random = SeededRandom(seed: 7)
        // A picture with edges and noise, as a camera's: gradients and a checkerboard, plus sensor noise.
        var pixels = [UInt8](repeating: 0, count: width * height * 2)
        for y in 0..<height {
            for x in 0..<(width / 2) {
                let base = y * width * 2 + x * 4
                let luma = UInt8(truncatingIfNeeded: (x + y) / 8 + ((x / 32 + y / 32) % 2 == 0 ? 60 : 0))
                pixels[base] = luma &+ UInt8.random(in: 0...6, using: &random)
                pixels[base + 1] = UInt8(truncatingIfNeeded: 128 + x / 64)
                pixels[base + 2] = luma &+ UInt8.random(in: 0...6, using: &random)
                pixels[base + 3] = UInt8(truncatingIfNeeded: 128 - y / 64)
            }
        }
        var buffer = ByteBufferAllocator().buffer(capacity: pixels.count)
        buffer.writeBytes(pixels)
        let frame = CapturedFrame(
            deviceID: "bench", sequence: 0, timestamp: 0, timestampMarks: .startOfExposure, format: format, bytes: buffer,
            metadata: CaptureMetadata(settings: CameraSettings()))
        let jpeg = try PhotoEncoder.jpeg(frame, quality: 90)
        let folder = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("camrig-bench-writers-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        var results: [Writer] = []
        for codec in ["copy", "mjpeg", "raw", "h264", "ffv1"] {
            let media: MediaCodec = codec == "copy" || codec == "mjpeg" ? .mjpeg : (codec == "raw" ? .raw : (codec == "h264" ? .h264 : .ffv1))
            let fourcc = media == .mjpeg ? PixelFormat.mjpeg.rawValue : PixelFormat.yuyv.rawValue
            let path = folder.appendingPathComponent("\(codec).mkv").path
            let writer = try MediaWriter(
                path: path, options: MediaWriter.Options(codec: media, pixelFormat: fourcc, width: width, height: height, bytesPerLine: width * 2, rate: (Int32(fps), 1)))
            let started = ContinuousClock.now
            for index in 0..<writerFrames {
                let pts = Int64(index) * 1_000_000_000 / Int64(fps)
                switch codec {
                case "copy": try jpeg.withUnsafeReadableBytes { try writer.write($0, at: pts) }
                case "mjpeg": try PhotoEncoder.jpeg(frame, quality: 90).withUnsafeReadableBytes { try writer.write($0, at: pts) }
                default: try pixels.withUnsafeBytes { try writer.write($0, at: pts) }
                }
            }
            try writer.close()
            let ms = (ContinuousClock.now - started).seconds * 1000 / Double(writerFrames)
            let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.doubleValue ?? 0
            results.append(Writer(
                codec: codec, msPerFrame: ms, piMsPerFrame: ms * piFactor, bytesPerFrame: size / Double(writerFrames),
                keepsUpAtFps: ms * piFactor < 1000 / Double(fps)))
        }
        return results
    }

    static func folderSize(_ url: URL) -> UInt64 {
        guard let walker = FileManager.default.enumerator(at: url, includingPropertiesForKeys: [.fileSizeKey]) else { return 0 }
        var total: UInt64 = 0
        for case let file as URL in walker { total += UInt64((try? file.resourceValues(forKeys: [.fileSizeKey]).fileSize) ?? 0) }
        return total
    }

    /// Every host sends `bytes` at once to a receiver on this side of the links (Python's sockets, and its
    /// ssl with the rig's certificates for TLS), each over its link of `linkMbit`; returns the aggregate MB/s.
    /// Bounded: a receiver that does not start, or a transfer that does not finish, is killed and fails it.
    static func rawTransfer(rig: NetworkedRig, bytes: UInt64, tls: Bool, linkMbit: Int) async throws -> Double {
        let port = 7600 + Int.random(in: 0..<300)
        let certificate = rig.work.appendingPathComponent("tls/agent-1.pem").path
        let key = rig.work.appendingPathComponent("tls/agent-1-key.pem").path
        let receiver = """
            import socket, ssl, sys, threading, time
            n = \(rig.members.count)
            server = socket.socket(); server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(("\(rig.network.gateway)", \(port))); server.listen(n)
            print("ready", flush=True)
            context = None
            if \(tls ? "True" : "False"):
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); context.load_cert_chain("\(certificate)", "\(key)")
            spans = []
            def serve(connection):
                if context: connection = context.wrap_socket(connection, server_side=True)
                first = None; total = 0
                while True:
                    chunk = connection.recv(1 << 20)
                    if not chunk: break
                    if first is None: first = time.monotonic()
                    total += len(chunk)
                spans.append((first, time.monotonic(), total))
            threads = []
            for _ in range(n):
                connection, _ = server.accept()
                thread = threading.Thread(target=serve, args=(connection,)); thread.start(); threads.append(thread)
            for thread in threads: thread.join()
            start = min(s[0] for s in spans); end = max(s[1] for s in spans); total = sum(s[2] for s in spans)
            print(total / (end - start) / 1e6, flush=True)
            """
        let sender = """
            import socket, ssl
            connection = socket.create_connection(("\(rig.network.gateway)", \(port)))
            if \(tls ? "True" : "False"):
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT); context.check_hostname = False; context.verify_mode = ssl.CERT_NONE
                connection = context.wrap_socket(connection)
            block = bytes(1 << 20); left = \(bytes)
            while left > 0:
                sent = connection.send(block[:min(left, len(block))]); left -= sent
            connection.close()
            """
        let python = ["/usr/bin/python3", "/usr/local/bin/python3"].first { FileManager.default.isExecutableFile(atPath: $0) } ?? "python3"
        let output = Pipe()
        let server = try ChildProcess.spawn(python, ["-c", receiver], stdout: .descriptor(output.fileHandleForWriting.fileDescriptor), stderr: .null)
        try output.fileHandleForWriting.close()
        let reader = output.fileHandleForReading
        do {
            // Python starts and binds in a second or two; the read returns once the receiver is killed.
            _ = try await withDeadline(.seconds(60), "the \(tls ? "TLS" : "TCP") receiver on \(rig.network.gateway):\(port) (Python) to say ready") {
                try await onDedicatedThread("raw-transfer-ready") { reader.availableData }
            }
        } catch {
            await server.reap(grace: .zero)
            throw error
        }
        let senders: [(name: String, process: ChildProcess)]
        do {
            senders = try rig.members.map { member in
                let command = rig.network.command(on: member.host, python, ["-c", sender])
                return (member.name, try ChildProcess.spawn(command.executable.path, command.arguments, stdout: .null, stderr: .null))
            }
        } catch {
            await server.reap(grace: .zero)
            throw error
        }
        // Each host sends over its own link, and one Python process receives from all of them: the bytes at
        // the link's rate three times over, or every host's bytes at 20 MB/s (Python's TLS on a busy
        // machine), whichever is longer, plus two minutes. A sender or the receiver still running then is
        // killed, and the transfer fails saying which.
        let linkSeconds = Double(bytes) * 8 / (Double(linkMbit) * 1e6)
        let receiverSeconds = Double(bytes) * Double(rig.members.count) / 20e6
        let grace = Duration.seconds(120 + max(3 * linkSeconds, receiverSeconds))
        let until = ContinuousClock.now + grace
        var stuck: [String] = []
        for (name, sender) in senders {
            if await sender.reap(grace: max(.zero, until - ContinuousClock.now)) == .signalled(SIGKILL) { stuck.append("the sender on \(name)") }
        }
        if await server.reap(grace: max(.seconds(10), until - ContinuousClock.now)) == .signalled(SIGKILL) { stuck.append("the receiver") }
        guard stuck.isEmpty else {
            throw CommandFailure("raw \(tls ? "TLS" : "TCP") transfer of \(bytes) bytes from every host: \(stuck.joined(separator: ", ")) did not finish within \(describeTimeout(grace)); killed")
        }
        let text = try await onDedicatedThread("raw-transfer-result") { String(decoding: reader.readDataToEndOfFile(), as: UTF8.self) }
        return Double(text.trimmingCharacters(in: .whitespacesAndNewlines)) ?? .nan
    }
}
