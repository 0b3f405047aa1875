import CamRigCapture
import CamRigClock
import CamRigCoordinator
import CamRigDevices
import CamRigImage
import CamRigLocalRig
import CamRigSecurity
import CamRigStorage
import CamRigTestSupport
import CamRigWire
import Foundation
import Logging
import Testing

/// libcamera's own virtual cameras (libcamera 0.4 from Debian 13, its virtual pipeline handler: cameras
/// from a YAML file, test patterns, no kernel driver), served by a real camrig-agent built against that
/// libcamera inside the Debian 13 root that scripts/libcamera-root makes, and driven by the coordinator
/// over TLS like any agent.
@Suite(
    "libcamera cameras (libcamera's virtual pipeline)", .serialized, .timeLimit(.minutes(3)),
    .enabled(if: LibcameraRoot.agentBuilt, "the Debian 13 root with libcamera is not made: run scripts/libcamera-root")
)
struct LibcameraTests {
    static let launcher = LibcameraRoot.launcher
    static let agent = LibcameraRoot.agent

    /// Two virtual cameras: one at two sizes with a frame-rate range, one at a single rate.
    static let cameras = """
        %YAML 1.1
        ---
        "camrig-virtual-a":
          supported_formats:
            - width: 1280
              height: 720
              frame_rates: [15, 60]
            - width: 640
              height: 480
              frame_rates: [15, 60]
          test_pattern: "bars"
          location: "CameraLocationFront"
          model: "CamRig Virtual A"
        "camrig-virtual-b":
          supported_formats:
            - width: 640
              height: 480
              frame_rates: [30, 30]
          test_pattern: "lines"
          location: "CameraLocationBack"
          model: "CamRig Virtual B"
        """

    /// A scratch directory holding the camera list, removed with `remove()`.
    struct Scratch {
        let directory: URL
        var yaml: URL { directory.appendingPathComponent("virtual.yaml") }
        init(_ cameras: String = LibcameraTests.cameras) throws {
            directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("camrig-libcamera-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            try cameras.write(to: yaml, atomically: true, encoding: .utf8)
        }
        func remove() { try? FileManager.default.removeItem(at: directory) }
        var launcher: (program: URL, arguments: [String], agent: URL) {
            (LibcameraTests.launcher, ["--virtual-cameras", yaml.path], LibcameraTests.agent)
        }
    }

    /// A rig file naming `agent` (with `pki`'s certificates), for `camrig` commands.
    static func rigFile(in scratch: Scratch, agent: AgentProcess, pki: TestPKI) throws -> String {
        let path = scratch.directory.appendingPathComponent("rig.yaml").path
        try "tls_dir: \(pki.path)\nagents:\n  - 127.0.0.1:\(agent.port)\n".write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    static func pool(_ agents: [AgentProcess], pki: TestPKI) throws -> AgentPool {
        var timing = RemoteAgent.Timing()
        timing.probeInterval = .milliseconds(50)
        return AgentPool(
            endpoints: agents.map { AgentEndpoint(host: $0.host, port: $0.port) },
            security: .tls(try MutualTLS.client(directory: pki.directory, identityName: "coordinator")),
            timing: timing, logger: Logger(label: "test"))
    }

    /// A session over every camera of `agents`, committed at 640x480 and `fps`.
    static func session(_ pool: AgentPool, fps: UInt32) async throws -> RigSession {
        pool.start()
        #expect(await pool.waitUntilReady(clockSamples: 16, timeout: .seconds(20)).isEmpty)
        return try await NetworkFaultTests.session(pool, fps: fps)
    }

    @Test("--list-devices shows both virtual cameras from libcamera: model, position, NV12 sizes and FrameDurationLimits as frame-rate ranges")
    func listing() async throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let run = try await Executables.runTool(
            Self.launcher.path, ["--virtual-cameras", scratch.yaml.path, Self.agent.path, "--list-devices", "--json"], timeout: 60)
        #expect(run.status == 0, "\(run.stderr)")
        let listing = try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any]
        let devices = try #require(listing?["devices"] as? [[String: Any]], "\(run.stdout)")
        #expect(devices.count == 2)
        let a = try #require(devices.first { $0["unique_id"] as? String == "libcamera:camrig-virtual-a" })
        let b = try #require(devices.first { $0["unique_id"] as? String == "libcamera:camrig-virtual-b" })
        #expect(a["backend"] as? String == "libcamera")
        #expect(a["name"] as? String == "CamRig Virtual A")
        #expect(a["position"] as? String == "front")
        #expect(b["position"] as? String == "back")
        func formats(_ device: [String: Any]) -> [String] {
            (device["formats"] as? [[String: Any]] ?? []).map { "\($0["fourcc"]!)-\($0["width"]!)x\($0["height"]!)" }
        }
        // Only the sizes the pipeline takes as they are (StreamFormats also lists standard sizes in between).
        #expect(formats(a) == ["NV12-1280x720", "NV12-640x480"])
        #expect(formats(b) == ["NV12-640x480"])
        let rangeA = try #require((a["formats"] as? [[String: Any]])?.first?["frame_rate_ranges"] as? [[String: Any]])
        #expect(rangeA.count == 1)
        #expect(rangeA.first?["kind"] as? String == "continuous")
        #expect(rangeA.first?["min_frame_duration"] as? String == "1/60")
        #expect(rangeA.first?["max_frame_duration"] as? String == "1/15")
        let rangeB = try #require((b["formats"] as? [[String: Any]])?.first?["frame_rate_ranges"] as? [[String: Any]])
        #expect(rangeB.first?["kind"] as? String == "discrete")
        #expect(rangeB.first?["min_frame_duration"] as? String == "1/30")
        // libcamera's other controls are raw controls by libcamera's id, with their ranges and names.
        let controls = try #require(a["controls"] as? [[String: Any]])
        let faceDetect = try #require(controls.first { $0["name"] as? String == "FaceDetectMode" })
        #expect(faceDetect["type"] as? String == "menu")
    }

    @Test("a session streams both cameras at the rate set through FrameDurationLimits: rising stamps a frame period apart, frames lent from libcamera's buffers")
    func streaming() async throws {
        // Both cameras with a range, so that 20 fps is a rate both take.
        let scratch = try Scratch(Self.cameras.replacingOccurrences(of: "frame_rates: [30, 30]", with: "frame_rates: [10, 30]"))
        defer { scratch.remove() }
        let (pki, agent) = try await AgentProcess.secured([], launcher: scratch.launcher)
        defer { agent.terminate(); pki.remove() }
        let pool = try Self.pool([agent], pki: pki)
        let session = try await Self.session(pool, fps: 20)
        let out = scratch.directory.appendingPathComponent("captures")
        let recording = try await session.record(duration: .seconds(2), into: try CaptureStore(root: out)).manifest
        #expect(recording.cameras.count == 2)
        #expect(recording.cameras.allSatisfy { $0.pixelFormat == "NV12" && $0.width == 640 && $0.height == 480 }, "\(recording.cameras)")
        for camera in recording.cameras.indices {
            let stamps = recording.sets.flatMap(\.frames).filter { $0.camera == camera }.map(\.agentTimestampNs)
            #expect(stamps.count >= 35, "camera \(camera): \(stamps.count) frames in 2 s at 20 fps")
            let steps = zip(stamps, stamps.dropFirst()).map { $1 - $0 }
            #expect(steps.allSatisfy { $0 > 0 }, "stamps rise")
            let sorted = steps.sorted()
            let median = sorted[sorted.count / 2]
            #expect(abs(median - 50_000_000) < 2_000_000, "camera \(camera): median frame interval \(median) ns at 20 fps")
        }
        // The frames themselves: PNGs made from the NV12 frames, their colour bars seen.
        let set = try #require(recording.sets.first { $0.complete })
        for frame in set.frames {
            let file = out.appendingPathComponent(recording.id).appendingPathComponent(frame.file)
            let png = try Data(contentsOf: file)
            #expect(png.starts(with: [0x89, 0x50, 0x4E, 0x47]), "\(frame.file) is a PNG")
        }
        await session.stop()
        await pool.stop()

        // The frames as a client reads them: the period measured at the rate set through FrameDurationLimits,
        // the stamp and what it marks, and NV12's 1.5 bytes a pixel.
        let client = try await agent.connect(pki, as: "viewer-1")
        var start = WireStartStream()
        start.deviceID = "libcamera:camrig-virtual-a"
        var frames: [WireVideoFrame] = []
        var sizes: [Int] = []
        for try await message in client.stream(.startStream(start)) {
            guard case .videoFrame(let frame) = message.envelope.body else { continue }
            frames.append(frame)
            sizes.append(message.payload?.readableBytes ?? 0)
            if frames.count == 10 {
                var stop = WireStopStream()
                stop.streamID = frame.streamID
                _ = try await client.request(.stopStream(stop))
            }
        }
        #expect(frames.count >= 10)
        // The measured period, from the second frame on: the 50 ms the requests were paced at.
        let periods = frames.dropFirst().map(\.measuredFramePeriodNs).sorted()
        #expect(abs(periods[periods.count / 2] - 50_000_000) < 1_000_000, "\(periods)")
        #expect(periods.allSatisfy { abs($0 - 50_000_000) < 5_000_000 }, "\(periods)")
        #expect(frames.allSatisfy { $0.timestamp.marks == .endOfFrame && $0.exposureStart.uncertaintyNs < 20_000_000 }, "\(frames.map(\.exposureStart.uncertaintyNs))")
        #expect(sizes.allSatisfy { $0 == 640 * 480 * 3 / 2 }, "\(sizes)")
        #expect(zip(frames, frames.dropFirst()).allSatisfy { $1.sequence == $0.sequence + 1 })
        await client.close()
        // Each stream's frames went out in libcamera's own buffers, not copies (the agent says so as a stream ends).
        _ = try await eventually(timeout: .seconds(5)) { agent.log().components(separatedBy: "stream ended").count > 2 }
        let log = agent.log()
        let lent = log.split(separator: "\n").filter { $0.contains("stream ended") }.compactMap { line in
            line.split(separator: " ").first { $0.hasPrefix("lent=") }.flatMap { Int($0.dropFirst(5)) }
        }
        #expect(!lent.isEmpty && lent.allSatisfy { $0 > 0 }, "\(log)")
        #expect(!log.contains("error camrig.agent"), "\(log)")
    }

    @Test("a photo at each quality level is a JPEG made from the NV12 frames; a RAW request says the virtual pipeline has no raw stream")
    func photos() async throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let (pki, agent) = try await AgentProcess.secured([], launcher: scratch.launcher)
        defer { agent.terminate(); pki.remove() }
        let pool = try Self.pool([agent], pki: pki)
        let session = try await Self.session(pool, fps: 30)
        let out = scratch.directory.appendingPathComponent("captures")
        for (level, name) in [(WireQualityPrioritization.speed, "speed"), (.balanced, "balanced"), (.quality, "quality")] {
            var settings = WirePhotoSettings()
            settings.qualityPrioritization = level
            settings.outputType = .jpeg
            let report: CaptureReport
            do {
                report = try await session.capturePhoto(into: try CaptureStore(root: out), settings: settings)
            } catch {
                Issue.record("\(name): \(error)\n\(agent.log())")
                throw error
            }
            let set = try #require(report.manifest.sets.first)
            #expect(set.complete, "\(name): \(report.manifest.cameras.compactMap(\.error)) \(agent.log())")
            for frame in set.frames {
                #expect(frame.photo?.quality == name)
                let jpeg = try Data(contentsOf: report.directory.appendingPathComponent(frame.file))
                let decoded = jpeg.withUnsafeBytes { JPEGDecoding.rgb($0) }
                #expect(decoded?.width == 640 && decoded?.height == 480, "\(name): \(frame.file) decodes at 640x480")
                if name == "quality" { #expect((frame.photo?.framesMerged ?? 0) > 1, "a quality photo merges several frames") }
            }
        }
        var raw = WirePhotoSettings()
        raw.outputType = .dng
        let report = try await session.capturePhoto(into: try CaptureStore(root: out), settings: raw)
        let frame = try #require(report.manifest.sets.first?.frames.first)
        let note = try #require(frame.photo?.note)
        #expect(note.contains("DNG needs a Bayer format"), "\(note)")
        await session.stop()
        await pool.stop()
    }

    @Test(
        "a synchronized photo across a libcamera agent and a V4L2 agent: the virtual cameras queued on the rig's grid, the emulated sensor locked onto it by VBLANK",
        .enabled(if: FileManager.default.fileExists(atPath: "/usr/lib/x86_64-linux-gnu/libv4l/plugins/libcamrig-v4l2-emulator.so"), "the emulated V4L2 device is not installed")
    )
    func synchronizedWithV4L2() async throws {
        let node = try PhaseLockTests.Node(57, timing: "seed=57\nrate_ppm=40\nstartup_delay_us=20000\ntimestamp_jitter_us=10\nframe_duration_control=vblank\n")
        defer { node.remove() }
        let scratch = try Scratch()
        defer { scratch.remove() }
        let pki = try TestPKI(agents: ["agent-1", "agent-2"])
        defer { pki.remove() }
        let libcamera = try await AgentProcess.start(["--tls-dir", pki.path, "--identity", "agent-1"], launcher: scratch.launcher)
        defer { libcamera.terminate() }
        let v4l2 = try await AgentProcess.start(["--tls-dir", pki.path, "--identity", "agent-2", "--v4l2", node.path])
        defer { v4l2.terminate() }
        let pool = try Self.pool([libcamera, v4l2], pki: pki)
        let session = try await Self.session(pool, fps: 30)
        let grid = try await session.lockPhase()
        let settled = await session.waitForPhaseLock(timeout: .seconds(20))
        #expect(settled.count == 3)
        #expect(settled.allSatisfy { $0.status.state == .locked }, "\(settled.map(\.status))")
        for phase in settled {
            #expect(phase.status.method == (phase.deviceID.hasPrefix("libcamera:") ? .triggered : .frameDuration), "\(phase.deviceID): \(phase.status.method)")
        }
        let out = scratch.directory.appendingPathComponent("captures")
        let photo = try await session.capturePhoto(into: try CaptureStore(root: out)).manifest
        let set = try #require(photo.sets.first)
        #expect(set.complete, "\(photo.cameras.compactMap(\.error))")
        #expect(set.frames.count == 3)
        let instant = try #require(set.gridInstantNs, "a photo of locked cameras names its grid instant")
        let period: Int64 = 1_000_000_000 / 30
        #expect(abs(grid.error(of: instant)) < 1)
        for frame in set.frames {
            let camera = photo.cameras[frame.camera]
            if camera.device.hasPrefix("libcamera:") {
                // Queued at the grid instant, never before it (but for the agent clock's estimate, microseconds
                // here): its streaming thread sleeps until the instant, then queues. On a loaded machine the
                // thread wakes late (9 ms seen on two busy cores), but within the period, since an instant it
                // is a period late for is skipped. An unlocked camera's frame would be anywhere in the period
                // on either side of the instant, and its phase would not read locked (above).
                let offset = frame.timestampNs - instant
                #expect(offset > -1_000_000 && offset < period, "\(camera.device): \(offset) ns from the grid instant")
            } else {
                let truth = try #require(node.trueStart(ofStamp: frame.agentTimestampNs), "frame \(frame.sequence) not in the truth log")
                #expect(abs(truth - instant) < 300_000, "the emulated sensor truly exposed \(truth - instant) ns from the grid instant")
            }
        }
        // One instant's frames, not a neighbour's: the set spans less than a period.
        #expect(set.skewNs < period, "skew \(set.skewNs) ns")
        await session.stop()
        await pool.stop()
    }

    @Test("camrig device get and set work on a libcamera camera as on any other: the frame rate and a raw control by libcamera's id set and read back; an exposure it has no control for refused, naming the camera")
    func deviceCommands() async throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let (pki, agent) = try await AgentProcess.secured(["--identity", "agent-1"], launcher: scratch.launcher)
        defer { agent.terminate(); pki.remove() }
        let rigFile = try Self.rigFile(in: scratch, agent: agent, pki: pki)
        func camrig(_ arguments: [String]) async throws -> Executables.Result {
            try await Executables.run("camrig", arguments + ["--rig", rigFile], timeout: 60)
        }
        let camera = "agent-1/libcamera:camrig-virtual-a"
        let set = try await camrig(["device", "set", camera, "format=NV12-1280x720", "fps=24", "0x271b=0"])
        #expect(set.status == 0, "camrig device set: \(set.stderr)")
        let got = try await camrig(["device", "get", camera, "--json"])
        try #require(got.status == 0, "camrig device get: \(got.stderr)")
        let device = try SessionTests.object(got.stdout)
        let state = try #require(device["state"] as? [String: Any], "\(got.stdout)")
        #expect(state["format"] as? String == "NV12-1280x720", "\(state)")
        #expect(state["fps"] as? String == "24.000", "\(state)")
        let controls = try #require(device["controls"] as? [[String: Any]], "\(got.stdout)")
        let faceDetect = try #require(controls.first { $0["name"] as? String == "FaceDetectMode" })
        #expect(faceDetect["value"] as? Int == 0)

        let refused = try await camrig(["device", "set", camera, "exposure=locked", "exposure-duration=1/100"])
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("libcamera:camrig-virtual-a"), "\(refused.stderr)")
    }

    @Test("camrig record on a libcamera agent records each NV12 camera on the host (packed, as MJPEG), offloaded; ffprobe agrees with the frame tables")
    func recordsOnTheHost() async throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let (pki, agent) = try await AgentProcess.secured(["--identity", "agent-1"], launcher: scratch.launcher)
        defer { agent.terminate(); pki.remove() }
        let rigFile = try Self.rigFile(in: scratch, agent: agent, pki: pki)
        let captures = scratch.directory.appendingPathComponent("captures")
        let result = try await ToolRunner.run(
            Executables.url("camrig").path,
            ["record", "--duration", "2", "--fps", "30", "--size", "640x480", "--json", "--rig", rigFile, "--out", captures.path], timeout: 120)
        #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
        let store = try CaptureStore(root: captures)
        let entry = try #require(try await store.catalog.list().first)
        let manifest = try store.manifest(of: entry)
        let recording = try #require(manifest.hostRecording)
        #expect(recording.tracks.count == 2)
        #expect(recording.tracks.allSatisfy { $0.codec == "mjpeg" && $0.state == "complete" && $0.files.allSatisfy(\.offloaded) }, "\(recording.tracks)\n\(result.stderr)")
        #expect(recording.tracks.allSatisfy { $0.frames >= 55 && $0.gaps <= 5 }, "\(recording.tracks.map { ($0.frames, $0.gaps) })")
        try await HostRecordingTests.checkFiles(manifest, in: store.root.appendingPathComponent(entry.directory))
    }
}

/// The Debian 13 root scripts/libcamera-root makes, and the agent built in it.
enum LibcameraRoot {
    static let project = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let launcher = project.appendingPathComponent("scripts/in-libcamera-root")
    static let agent = URL(
        fileURLWithPath: ProcessInfo.processInfo.environment["CAMRIG_LIBCAMERA_AGENT"]
            ?? project.appendingPathComponent(".build-trixie/build/debug/camrig-agent").path)
    static var agentBuilt: Bool { FileManager.default.isExecutableFile(atPath: agent.path) }
}
