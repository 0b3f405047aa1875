import CamRigCapture
import CamRigLocalRig
import CamRigStorage
import CamRigTestSupport
import Foundation
import Testing

/// On-host recordings as an operator makes them: real agents record into Matroska files, `camrig`
/// offloads them, and FFmpeg's own tools read the files.
@Suite("On-host recordings", .serialized, .timeLimit(.minutes(6)))
struct HostRecordingTests {
    static let emulatorPlugin = "/usr/lib/x86_64-linux-gnu/libv4l/plugins/libcamrig-v4l2-emulator.so"
    static let emulatorDirectory = ProcessInfo.processInfo.environment["CAMRIG_V4L2_EMULATOR_DIR"] ?? "/dev/shm/camrig-v4l2"

    /// Agents of their own (`agent-1`…), a folder for captures, and the `camrig` arguments that reach them.
    final class Rig {
        let pki: TestPKI
        var agents: [AgentProcess]
        let spools: [String]
        let work: String
        var captures: String { work + "/captures" }
        let extraArguments: [[String]]

        init(_ agentArguments: [[String]]) async throws {
            let names = agentArguments.indices.map { "agent-\($0 + 1)" }
            pki = try TestPKI(agents: names)
            work = NSTemporaryDirectory() + "camrig-hostrec-\(UUID().uuidString)"
            spools = names.map { "\(NSTemporaryDirectory())camrig-hostrec-spool-\($0)-\(UUID().uuidString)" }
            extraArguments = agentArguments
            agents = []
            for index in names.indices { agents.append(try await Self.start(index, names: names, pki: pki, spools: spools, arguments: agentArguments)) }
        }

        static func start(_ index: Int, names: [String], pki: TestPKI, spools: [String], arguments: [[String]]) async throws -> AgentProcess {
            try await AgentProcess.start(["--tls-dir", pki.path, "--identity", names[index], "--spool-dir", spools[index]] + arguments[index])
        }

        /// Agent `index` again (after a crash), on the same spool.
        func restart(_ index: Int) async throws {
            agents[index] = try await Self.start(index, names: agents.indices.map { "agent-\($0 + 1)" }, pki: pki, spools: spools, arguments: extraArguments)
        }

        var rigArguments: [String] { agents.flatMap { ["--agent", $0.address] } + ["--tls-dir", pki.path, "--out", captures] }

        func camrig(_ arguments: [String], timeout: Double = 120) async throws -> ToolRunner.Result {
            try await ToolRunner.run(Executables.url("camrig").path, arguments + rigArguments, timeout: timeout)
        }

        /// `camrig` commands that read the captures folder only.
        func camrigHere(_ arguments: [String]) async throws -> ToolRunner.Result {
            try await ToolRunner.run(Executables.url("camrig").path, arguments + ["--out", captures], timeout: 120)
        }

        /// What agent `index` still holds in its recordings folder.
        func held(_ index: Int) -> [String] {
            (try? FileManager.default.contentsOfDirectory(atPath: spools[index] + "/recordings")) ?? []
        }

        func manifest() async throws -> (CaptureManifest, URL) {
            let store = try CaptureStore(root: URL(fileURLWithPath: captures))
            let entry = try #require(try await store.catalog.list().first)
            return (try store.manifest(of: entry), store.root.appendingPathComponent(entry.directory))
        }

        func remove() {
            // Each spool goes once its agent has exited: a recording agent finishes its files on SIGTERM.
            for (agent, spool) in zip(agents, spools) { agent.terminate(removing: [URL(fileURLWithPath: spool)]) }
            pki.remove()
            try? FileManager.default.removeItem(atPath: work)
        }
    }

    static func json(_ text: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any], "not JSON: \(text)")
    }

    /// `ffprobe`'s count of the frames it decodes, and each packet's time in milliseconds.
    static func probe(_ file: URL) async throws -> (frames: Int, codec: String, milliseconds: [Int64]) {
        let count = try await ToolRunner.run(
            "/usr/bin/ffprobe", ["-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries", "stream=nb_read_frames,codec_name", "-of", "default=nw=1", file.path])
        #expect(count.status == 0, "ffprobe \(file.lastPathComponent): \(count.stderr)")
        var fields: [String: String] = [:]
        for line in count.stdout.split(separator: "\n") {
            let parts = line.split(separator: "=", maxSplits: 1)
            if parts.count == 2 { fields[String(parts[0])] = String(parts[1]) }
        }
        let packets = try await ToolRunner.run("/usr/bin/ffprobe", ["-v", "error", "-show_entries", "packet=pts", "-of", "csv=p=0", file.path])
        let pts = packets.stdout.split(separator: "\n").compactMap { Int64($0.trimmingCharacters(in: .whitespaces)) }
        return (Int(fields["nb_read_frames"] ?? "") ?? -1, fields["codec_name"] ?? "", pts)
    }

    /// `ffmpeg` decoding the whole file prints no error.
    static func decodesCleanly(_ file: URL) async throws -> String {
        let result = try await ToolRunner.run("/usr/bin/ffmpeg", ["-v", "error", "-i", file.path, "-f", "null", "-"], timeout: 120)
        return result.status == 0 ? result.stderr : "exit \(result.status): \(result.stderr)"
    }

    /// Checks every camera's files against its frame table and the manifest: ffprobe's frame count and
    /// packet times equal the table's frames and rig-clock times (to Matroska's millisecond), and ffmpeg
    /// decodes each file without an error.
    static func checkFiles(_ manifest: CaptureManifest, in folder: URL) async throws {
        let recording = try #require(manifest.hostRecording)
        for track in recording.tracks {
            let table = try RecordedFrameTable(parsing: String(contentsOf: folder.appendingPathComponent("\(track.stem).frames.csv"), encoding: .utf8))
            let stored = table.rows.filter { $0.frame != nil }
            #expect(stored.count == track.frames, "\(track.stem): the frame table lists \(stored.count) frames, the manifest \(track.frames)")
            #expect(table.rows.filter { $0.flag == .gap }.count == track.gaps, "\(track.stem): gaps are indexes no frame fell on")
            #expect(table.rows.filter { $0.flag == .lost }.count == track.lost ?? 0, "\(track.stem): lost instants are counted apart")
            #expect(Set(table.rows.map(\.gridIndex)) == Set(0..<recording.gridCount), "\(track.stem): one row for every grid index")
            var times: [Int64] = []
            var frames = 0
            for video in track.videos {
                let url = folder.appendingPathComponent(video.name)
                let probed = try await probe(url)
                frames += probed.frames
                times += probed.milliseconds
                await #expect(try decodesCleanly(url) == "", "\(video.name) decodes without an error")
            }
            #expect(frames == track.frames, "\(track.stem): ffprobe counts \(frames) frames, the manifest \(track.frames)")
            let tableTimes = stored.map { ($0.rigTimeNs + 500_000) / 1_000_000 }
            #expect(times == tableTimes, "\(track.stem): the blocks' times are the frames' rig-clock exposure starts")
            let timecodes = try String(contentsOf: folder.appendingPathComponent("\(track.stem).timecodes.txt"), encoding: .utf8)
                .split(separator: "\n").dropFirst().compactMap { Double($0) }
            #expect(timecodes.count == track.frames)
            #expect(zip(timecodes, stored).allSatisfy { abs($0 * 1e6 - Double($1.rigTimeNs)) < 1 }, "timecodes hold the table's times in ms")
        }
    }

    static func emulatorNode(_ number: Int) throws -> String? {
        guard FileManager.default.fileExists(atPath: emulatorPlugin) else { return nil }
        let path = "\(emulatorDirectory)/video\(number)"
        try FileManager.default.createDirectory(atPath: emulatorDirectory, withIntermediateDirectories: true)
        for suffix in ["", ".state", ".lock", ".unplugged", ".timing", ".truth"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        try "seed=\(number)\nrate_ppm=40\ntimestamp_jitter_us=20\nframe_duration_control=vblank\n".write(toFile: path + ".timing", atomically: true, encoding: .utf8)
        _ = FileManager.default.createFile(atPath: path, contents: nil)
        return path
    }

    @Test("two hosts, a synthetic camera and an emulated V4L2 camera: each records its own file, offloaded and deleted from the host; ffprobe agrees with the frame tables and the manifest; exports trim to equal frame counts")
    func recordsOffloadsAndExports() async throws {
        let node = try Self.emulatorNode(51)
        defer { if let node { for suffix in ["", ".state", ".lock", ".timing"] { try? FileManager.default.removeItem(atPath: node + suffix) } } }
        let rig = try await Rig([["--synthetic", "1"], node.map { ["--v4l2", $0] } ?? ["--synthetic", "1", "--synthetic-seed", "2"]])
        defer { rig.remove() }
        let result = try await rig.camrig(["record", "--duration", "2", "--fps", "30", "--size", "640x480", "--json"])
        #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
        let summary = try Self.json(result.stdout)
        #expect(summary["state"] as? String == "complete", "\(result.stdout)")
        let (manifest, folder) = try await rig.manifest()
        let recording = try #require(manifest.hostRecording)
        #expect(recording.gridCount == 60)
        #expect(recording.tracks.map(\.codec) == ["mjpeg", "mjpeg"], "YUYV cameras record as MJPEG made on the host")
        #expect(recording.tracks.allSatisfy { $0.state == "complete" && $0.files.allSatisfy(\.offloaded) })
        #expect(manifest.summary.completeSets == 60, "every grid instant has a frame of both cameras: \(manifest.summary)")
        #expect(manifest.sets.first?.complete == true, "set 0 is complete: the synthetic camera started on grid instant 0")
        try await Self.checkFiles(manifest, in: folder)
        #expect(rig.held(0).isEmpty && rig.held(1).isEmpty, "the hosts deleted what was offloaded: \(rig.held(0)) \(rig.held(1))")
        // The sets' frames point into the files.
        let set = try #require(manifest.sets.dropFirst(10).first)
        #expect(set.frames.count == 2 && set.frames.allSatisfy { $0.videoFrame != nil && $0.file.hasSuffix(".mkv") })
        #expect(set.skewNs < 5_000_000, "phase-locked cameras expose within milliseconds: \(set.skewNs) ns")

        // Videos for motion-capture tools: one per camera, equal frame counts.
        let videos = rig.work + "/videos"
        let exported = try await rig.camrigHere(["captures", "export", manifest.id, "--videos", videos, "--sets", "5:44", "--json"])
        #expect(exported.status == 0, "\(exported.stdout)\n\(exported.stderr)")
        let files = try FileManager.default.contentsOfDirectory(atPath: videos).filter { $0.hasSuffix(".mkv") }.sorted()
        #expect(files.count == 2)
        var counts: [Int] = []
        for file in files { counts.append(try await Self.probe(URL(fileURLWithPath: videos + "/" + file)).frames) }
        #expect(counts == [40, 40], "both cameras' videos cover sets 5…44: \(counts)")

        // Frames for photogrammetry tools: a folder per set, an image per camera.
        let frames = rig.work + "/frames"
        let images = try await rig.camrigHere(["captures", "export", manifest.id, "--frames", frames, "--seconds", "0:0.5"])
        #expect(images.status == 0, "\(images.stdout)\n\(images.stderr)")
        let sets = try FileManager.default.contentsOfDirectory(atPath: frames).sorted()
        #expect(sets.count == 16 && sets.first == "set-000000", "\(sets)")
        let first = try FileManager.default.contentsOfDirectory(atPath: frames + "/" + sets[0]).sorted()
        #expect(first.count == 2 && first.allSatisfy { $0.hasSuffix(".jpg") }, "MJPEG videos give their JPEGs as recorded: \(first)")
        let jpeg = try Data(contentsOf: URL(fileURLWithPath: frames + "/" + sets[0] + "/" + first[0]))
        #expect(jpeg.prefix(2) == Data([0xFF, 0xD8]))
    }

    @Test("a host with four cameras records each, one file each, every one from grid instant 0")
    func camerasOnOneHost() async throws {
        let rig = try await Rig([["--synthetic", "4"]])
        defer { rig.remove() }
        let result = try await rig.camrig(["record", "--duration", "1", "--fps", "30", "--size", "640x480", "--json"])
        #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
        let (manifest, folder) = try await rig.manifest()
        let tracks = try #require(manifest.hostRecording?.tracks)
        #expect(tracks.count == 4 && Set(tracks.map(\.agent)) == ["agent-1"], "\(tracks)")
        // The host sets the recording up, then starts its cameras one after the other (its first recording
        // slowest of all): the start instant leaves room for every one, so none's first frame slips to
        // instant 1 (set 0 was seen with no frame at all).
        let first = try #require(manifest.sets.first)
        #expect(first.complete && first.frames.count == 4, "set 0 has every camera's frame: \(first.frames.map(\.camera))")
        #expect(tracks.allSatisfy { $0.state == "complete" && $0.frames == 30 }, "\(tracks.map { ($0.state, $0.frames) })")
        try await Self.checkFiles(manifest, in: folder)
    }

    @Test("a camera that delivers MJPEG is recorded as it comes (copy); a codec it cannot take is refused before anything starts, naming the host")
    func copiesCompressedFrames() async throws {
        let rig = try await Rig([["--synthetic", "1"]])
        defer { rig.remove() }
        let refused = try await rig.camrig(["record", "--duration", "1", "--fps", "30", "--size", "640x480", "--pixel-format", "MJPG", "--codec", "ffv1"])
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("agent-1") && refused.stderr.contains("choose copy") && refused.stderr.contains("nothing was started"), "\(refused.stderr)")
        #expect(rig.held(0).isEmpty)

        let result = try await rig.camrig(["record", "--duration", "1", "--fps", "30", "--size", "640x480", "--pixel-format", "MJPG", "--json"])
        #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
        let (manifest, folder) = try await rig.manifest()
        let track = try #require(manifest.hostRecording?.tracks.first)
        #expect(track.codec == "copy")
        #expect(track.frames == 30 && track.gaps == 0, "\(track)")
        #expect(manifest.sets.first?.complete == true, "the camera's first frame is on grid instant 0")
        try await Self.checkFiles(manifest, in: folder)
        #expect(try await Self.probe(folder.appendingPathComponent(track.videos[0].name)).codec == "mjpeg")
    }

    @Test("a recording a host has no room for is refused before it starts, naming the host and the room it has")
    func refusesWhatDoesNotFit() async throws {
        let rig = try await Rig([["--synthetic", "1"], ["--synthetic", "1", "--synthetic-seed", "2", "--recording-space-mb", "2"]])
        defer { rig.remove() }
        let result = try await rig.camrig(["record", "--duration", "30", "--fps", "30", "--size", "640x480", "--codec", "raw"])
        #expect(result.status != 0)
        #expect(result.stderr.contains("agent-2 has room for 2 MiB"), "\(result.stderr)")
        #expect(!result.stderr.contains("agent-1 has room"), "agent-1 has the room: \(result.stderr)")
        #expect(result.stderr.contains("nothing was started"))
        #expect(rig.held(0).isEmpty && rig.held(1).isEmpty, "neither host began recording")
    }

    @Test("an agent killed with -9 mid-recording closes its file at the next start: playable up to its last cluster, the frame table marks what was lost, and captures offload fetches it")
    func agentKilledMidRecording() async throws {
        let rig = try await Rig([["--synthetic", "1"], ["--synthetic", "1", "--synthetic-seed", "2"]])
        defer { rig.remove() }
        let recording = try ChildProcess.spawn(
            Executables.url("camrig").path, ["record", "--duration", "6", "--fps", "30", "--size", "640x480", "--segment-mb", "2", "--json"] + rig.rigArguments,
            stdout: .null, stderr: .null)
        // Once agent-2 has been writing for a while, it dies.
        let writing = try await eventually(timeout: .seconds(30), pollingEvery: .milliseconds(50)) {
            guard let folder = rig.held(1).first else { return false }
            let path = "\(rig.spools[1])/recordings/\(folder)"
            let videos = ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).filter { $0.hasSuffix(".mkv") }
            let bytes = videos.compactMap { (try? FileManager.default.attributesOfItem(atPath: "\(path)/\($0)")[.size] as? NSNumber)?.intValue }.reduce(0, +)
            return videos.count >= 3 && bytes > 6_000_000
        }
        #expect(writing, "agent-2 began writing")
        await rig.agents[1].crash()
        await recording.exit()
        #expect(recording.terminationStatus == 0, "the recording ends, with agent-1's part")

        let (before, _) = try await rig.manifest()
        #expect(before.state == .offloading, "agent-2's files are still to come")
        try await rig.restart(1)
        let closed = try await eventually(timeout: .seconds(30)) { rig.agents[1].log().contains("closed a recording cut short") }
        #expect(closed, "the next start closed the file: \(rig.agents[1].log())")
        let offload = try await rig.camrig(["captures", "offload", before.id, "--json"])
        #expect(offload.status == 0, "\(offload.stdout)\n\(offload.stderr)")
        let (manifest, folder) = try await rig.manifest()
        let track = try #require(manifest.hostRecording?.tracks.first { $0.agent == "agent-2" })
        #expect(track.state == "cut_short")
        #expect(track.frames >= 30 && track.frames < 180, "\(track.frames) frames survived")
        #expect(manifest.state == .incomplete)
        try await Self.checkFiles(manifest, in: folder)
        let table = try RecordedFrameTable(parsing: String(contentsOf: folder.appendingPathComponent("\(track.stem).frames.csv"), encoding: .utf8))
        #expect(table.rows.last?.flags == "lost", "the grid instants the agent never reached are listed as lost")
        #expect(track.videos.count >= 3, "the recording spans several segments: \(track.videos.map(\.name))")
        #expect(rig.held(1).isEmpty)
    }

    @Test("the coordinator killed mid-recording loses nothing: the hosts finish, and captures recover fetches every file")
    func coordinatorKilledMidRecording() async throws {
        let rig = try await Rig([["--synthetic", "1"], ["--synthetic", "1", "--synthetic-seed", "2"]])
        defer { rig.remove() }
        let recording = try ChildProcess.spawn(
            Executables.url("camrig").path, ["record", "--duration", "3", "--fps", "30", "--size", "640x480", "--segment-seconds", "1"] + rig.rigArguments,
            stdout: .null, stderr: .null)
        let started = try await eventually(timeout: .seconds(30), pollingEvery: .milliseconds(20)) { !rig.held(0).isEmpty && !rig.held(1).isEmpty }
        #expect(started)
        try await Task.sleep(for: .seconds(1))
        recording.send(SIGKILL)
        await recording.exit()
        let (before, _) = try await rig.manifest()
        #expect(before.state == .inProgress)

        // The hosts go on to the recording's end; recover waits for them, then fetches.
        var recovered = try await rig.camrig(["captures", "recover", "--json"])
        _ = try await eventually(timeout: .seconds(30), pollingEvery: .seconds(1)) {
            if recovered.status != 2 { return true }
            recovered = try await rig.camrig(["captures", "recover", "--json"])
            return false
        }
        #expect(recovered.status == 0, "\(recovered.stdout)\n\(recovered.stderr)")
        let (manifest, folder) = try await rig.manifest()
        #expect(manifest.state == .complete, "\(recovered.stdout)")
        #expect(manifest.hostRecording?.tracks.allSatisfy { $0.state == "complete" && $0.frames == 90 } == true, "\(String(describing: manifest.hostRecording?.tracks))")
        #expect(manifest.hostRecording?.tracks.allSatisfy { $0.videos.count == 3 } == true, "a file a second: \(String(describing: manifest.hostRecording?.tracks.map { $0.videos.map(\.name) }))")
        try await Self.checkFiles(manifest, in: folder)
        #expect(rig.held(0).isEmpty && rig.held(1).isEmpty)
    }

    @Test("files left on the hosts are offloaded later; a copy that does not match its checksum is thrown away and fetched again")
    func offloadLaterAndChecksum() async throws {
        let rig = try await Rig([["--synthetic", "1"]])
        defer { rig.remove() }
        let result = try await rig.camrig(["record", "--duration", "1", "--fps", "30", "--size", "640x480", "--no-offload", "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        let (before, folder) = try await rig.manifest()
        #expect(before.state == .offloading)
        #expect(!rig.held(0).isEmpty)
        let video = try #require(before.hostRecording?.tracks.first?.videos.first)
        // A partial copy with wrong bytes (as a disk error would leave): the offload resumes after it,
        // finds the checksum wrong, and says so; the host keeps the file.
        try Data(repeating: 0x55, count: 1000).write(to: folder.appendingPathComponent(".\(video.name).partial"))
        let spoiled = try await rig.camrig(["captures", "offload", before.id])
        #expect(spoiled.status == 2, "\(spoiled.stdout)\n\(spoiled.stderr)")
        #expect(spoiled.stdout.contains("SHA-256"), "\(spoiled.stdout)")
        #expect(!rig.held(0).isEmpty, "the host keeps what was not received whole")
        let again = try await rig.camrig(["captures", "offload", before.id])
        #expect(again.status == 0, "\(again.stdout)\n\(again.stderr)")
        let (manifest, _) = try await rig.manifest()
        #expect(manifest.state == .complete)
        try await Self.checkFiles(manifest, in: folder)
        #expect(rig.held(0).isEmpty)
    }
}
