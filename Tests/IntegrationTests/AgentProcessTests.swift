import CamRigCoordinator
import CamRigLocalRig
import CamRigSecurity
import CamRigTestSupport
import CamRigWire
import Foundation
import Testing

/// `camrig-agent` and `camrig` as real processes over TLS on loopback.
@Suite("Agent and CLI over TLS", .serialized, .timeLimit(.minutes(5)))
struct AgentProcessTests {
    @Test("camrig ping reaches a camrig-agent over TLS and reports its id, protocol version and round trips")
    func pingOverTLS() async throws {
        let (pki, agent) = try await AgentProcess.secured(["--identity", "agent-1"])
        defer {
            agent.terminate()
            pki.remove()
        }

        let result = try await Executables.run("camrig", ["ping", "--agent", agent.address, "--tls-dir", pki.path, "--count", "3", "--interval-ms", "0", "--json"])
        #expect(result.status == 0, "stderr: \(result.stderr)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        let agentInfo = try #require(json["agent"] as? [String: Any])
        #expect(agentInfo["id"] as? String == "agent-1")
        #expect(agentInfo["protocol_version"] as? Int == 1)
        #expect((json["client"] as? [String: Any])?["role"] as? String == "coordinator")
        let rtts = try #require(json["rtt_us"] as? [Double])
        #expect(rtts.count == 3)
        #expect(rtts.allSatisfy { $0 > 0 && $0 < 1_000_000 })

        let text = try await Executables.run("camrig", ["ping", "--agent", agent.address, "--tls-dir", pki.path, "--count", "1"])
        #expect(text.status == 0)
        #expect(text.stdout.contains("agent agent-1 at \(agent.address): protocol 1"))
        #expect(agent.log().contains("client ready"))
    }

    @Test("requests from a task on the connection's event loop are written and answered there, errors included")
    func requestsOnTheEventLoop() async throws {
        let (pki, agent) = try await AgentProcess.secured(["--synthetic", "1"])
        defer {
            agent.terminate()
            pki.remove()
        }
        let client = try await AgentClient.connect(
            to: AgentEndpoint(host: agent.host, port: agent.port),
            security: .tls(try MutualTLS.client(directory: pki.directory, identityName: "coordinator"))
        )
        let executor = client.executor
        let devices = try await withTaskExecutorPreference(executor) {
            #expect(executor.eventLoop.inEventLoop)
            for _ in 0..<20 { _ = try await client.ping() }
            // Still on the connection's thread after each reply.
            #expect(executor.eventLoop.inEventLoop)
            let reply = try await client.request(.listDevices(WireListDevices()))
            if case .deviceList(let list) = reply.frame.envelope.body { return list.devices.map(\.uniqueID) }
            return [String]()
        }
        #expect(!devices.isEmpty)
        // An error reply still arrives as an error, and the connection stays usable from any task.
        var lock = WireLock()
        lock.deviceID = "no-such-camera"
        _ = await withTaskExecutorPreference(executor) {
            await #expect(throws: AgentClientError.self) { try await client.request(.lock(lock)) }
        }
        _ = try await client.ping()
        await client.close()
    }

    @Test("a viewer certificate is accepted and the agent tells the client its role")
    func viewer() async throws {
        let (pki, agent) = try await AgentProcess.secured([])
        defer {
            agent.terminate()
            pki.remove()
        }
        let client = try await AgentClient.connect(
            to: AgentEndpoint(host: agent.host, port: agent.port),
            security: .tls(try MutualTLS.client(directory: pki.directory, identityName: "viewer-1"))
        )
        #expect(client.welcome.clientRole == .viewer)
        #expect(client.welcome.clientName == "viewer-1")
        #expect(client.agentIdentity?.name == "agent-1")
        #expect(client.agentIdentity?.role == .agent)
        _ = try await client.ping()
        var lock = WireLock()
        lock.deviceID = "cam0"
        let denied = await #expect(throws: AgentClientError.self) { try await client.request(.lock(lock)) }
        #expect(denied?.code == .permissionDenied)
        #expect(denied?.message.contains("'viewer-1' has a viewer certificate") == true)
        _ = try await client.ping()  // a refused request leaves the connection usable
        await client.close()
    }

    @Test("an agent survives hostile clients while serving a good one, with flat memory")
    func survivesBadClients() async throws {
        let (pki, agent) = try await AgentProcess.secured(["--log-level", "notice"])
        defer {
            agent.terminate()
            pki.remove()
        }
        let good = try await AgentClient.connect(
            to: AgentEndpoint(host: agent.host, port: agent.port),
            security: .tls(try MutualTLS.client(directory: pki.directory))
        )
        let coordinator = RawPeer.Transport.tls(directory: pki.directory, name: "coordinator")
        let garbage: [UInt8] = (0..<65_536).map { _ in UInt8.random(in: 0...255) }

        // 0xFFFFFFFF length over an authenticated connection: a FRAME_TOO_LARGE error, then close.
        let huge = try await RawPeer.exchange(port: agent.port, transport: coordinator, chunks: [RawPeer.hello, [0xFF, 0xFF, 0xFF, 0xFF]])
        #expect(huge.closedByAgent)
        #expect(huge.errors.map(\.code) == [.frameTooLarge])
        #expect(huge.errors.first?.message.contains("4294967295") == true)

        // Garbage after a valid TLS handshake.
        let noise = try await RawPeer.exchange(port: agent.port, transport: coordinator, chunks: [garbage])
        #expect(noise.closedByAgent)
        #expect(noise.errors.count == 1 && noise.errors.first?.fatal == true)

        // Garbage where TLS is expected, and a TLS client without a certificate.
        let plaintext = try await RawPeer.exchange(port: agent.port, transport: .plaintext, chunks: [garbage])
        #expect(plaintext.closedByAgent)
        let anonymous = try await RawPeer.exchange(port: agent.port, transport: .tlsWithoutCertificate, chunks: [RawPeer.hello])
        #expect(anonymous.closedByAgent)
        #expect(anonymous.frames.isEmpty, "an unauthenticated client must get no protocol message")

        _ = try await good.ping()
        let baseline = try #require(agent.residentKilobytes)

        // Many more of each: memory must not follow the claimed lengths.
        for round in 0..<60 {
            async let a = RawPeer.exchange(port: agent.port, transport: coordinator, chunks: [RawPeer.hello, [0xFF, 0xFF, 0xFF, 0xFF]])
            // A legal claim (just under the agent's 1 MiB limit for client frames) with 64 KiB sent, then the
            // client gives up: the agent holds only what arrived, and frees it.
            async let b = RawPeer.exchange(
                port: agent.port,
                transport: coordinator,
                chunks: [RawPeer.hello, [0x00, 0x0F, 0xFF, 0xFF], garbage],
                timeout: .milliseconds(200)
            )
            async let c = RawPeer.exchange(port: agent.port, transport: .plaintext, chunks: [garbage])
            async let d = RawPeer.exchange(port: agent.port, transport: .tlsWithoutCertificate, chunks: [garbage])
            _ = try await (a, b, c, d)
            if round % 20 == 0 { _ = try await good.ping() }
        }
        _ = try await good.ping()
        let after = try #require(agent.residentKilobytes)
        #expect(after - baseline < 16 * 1024, "resident memory grew from \(baseline) KiB to \(after) KiB")
        #expect(agent.isRunning)

        let log = agent.log()
        #expect(log.contains("refused client: presented no certificate"))
        #expect(log.contains("FRAME_TOO_LARGE"))
        await good.close()
    }

    @Test(
        "certificates that do not belong are refused in the handshake, and the agent's log says which and why",
        arguments: [
            ("expired", "expired at"),
            ("stranger", "was issued by 'CN=Other Rig CA"),
            ("agent-2", "has role agent, but only coordinator or viewer may connect"),
        ]
    )
    func refusedCertificates(name: String, logged: String) async throws {
        let pki = try TestPKI(agents: ["agent-1", "agent-2"])
        defer { pki.remove() }
        try pki.issueExpired(name: "expired", role: .coordinator)
        try pki.issueFromOtherCA(name: "stranger", role: .coordinator)
        let agent = try await AgentProcess.start(["--tls-dir", pki.path, "--identity", "agent-1"])
        defer { agent.terminate() }

        let exchange = try await RawPeer.exchange(port: agent.port, transport: .tls(directory: pki.directory, name: name), chunks: [RawPeer.hello])
        #expect(exchange.closedByAgent)
        #expect(exchange.frames.isEmpty, "a refused client must get no welcome")
        let noted = try await eventually(timeout: .seconds(5)) { agent.log().contains("refused client") }
        #expect(noted, "the refusal was not logged within 5 s")
        let refusals = agent.log().split(separator: "\n").filter { $0.contains("refused client") }
        #expect(refusals.count == 1)
        #expect(refusals.first?.contains(logged) == true, "log: \(refusals)")
        #expect(refusals.first?.contains("'\(name)'") == true)
    }

    @Test("camrig ping explains a refused or expired certificate and exits non-zero")
    func pingWithBadCertificates() async throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        try pki.issueExpired(name: "expired", role: .coordinator)
        try pki.issueFromOtherCA(name: "stranger", role: .coordinator)
        let agent = try await AgentProcess.start(["--tls-dir", pki.path])
        defer { agent.terminate() }

        let expired = try await Executables.run("camrig", ["ping", "--agent", agent.address, "--tls-dir", pki.path, "--identity", "expired"])
        #expect(expired.status != 0)
        #expect(expired.stderr.contains("certificate 'expired' expired at"))

        let stranger = try await Executables.run("camrig", ["ping", "--agent", agent.address, "--tls-dir", pki.path, "--identity", "stranger", "--timeout", "3"])
        #expect(stranger.status != 0)
        #expect(stranger.stderr.contains("agent \(agent.address)"), "stderr: \(stranger.stderr)")

        let unreachable = try await Executables.run("camrig", ["ping", "--agent", "127.0.0.1:1", "--tls-dir", pki.path, "--identity", "coordinator"])
        #expect(unreachable.status != 0)
        #expect(unreachable.stderr.contains("cannot connect"))
    }

    @Test("plaintext needs --insecure on both sides, and the agent warns about it")
    func insecure() async throws {
        let refused = try await Executables.run("camrig-agent", ["--listen", "127.0.0.1:0"], timeout: 10)
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("TLS is required"))

        let agent = try await AgentProcess.start(["--insecure", "--agent-id", "bench-agent"])
        defer { agent.terminate() }
        let ping = try await Executables.run("camrig", ["ping", "--agent", agent.address, "--insecure", "--count", "1", "--json"])
        #expect(ping.status == 0, "stderr: \(ping.stderr)")
        #expect(ping.stdout.contains("\"id\" : \"bench-agent\""))
        #expect(agent.log().contains("WITHOUT TLS"))

        let pki = try TestPKI()
        defer { pki.remove() }
        let mismatched = try await Executables.run("camrig", ["ping", "--agent", agent.address, "--tls-dir", pki.path, "--timeout", "3"])
        #expect(mismatched.status != 0)
    }

    @Test("SIGTERM: the agent says goodbye to connected clients and exits cleanly")
    func gracefulShutdown() async throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        let agent = try await AgentProcess.start(["--tls-dir", pki.path])
        let client = try await AgentClient.connect(
            to: AgentEndpoint(host: agent.host, port: agent.port),
            security: .tls(try MutualTLS.client(directory: pki.directory))
        )
        _ = try await client.ping()
        let status = await agent.stop()
        #expect(status == 0)
        await client.closed
        let error = await #expect(throws: AgentClientError.self) { try await client.ping() }
        #expect(error?.message.contains("shutting down") == true, "got \(String(describing: error))")
    }
}

@Suite("camrig-agent --list-devices", .timeLimit(.minutes(3)))
struct ListDevicesTests {
    @Test("synthetic cameras: formats with frame-rate ranges and controls, as JSON and as text")
    func synthetic() async throws {
        let result = try await Executables.run("camrig-agent", ["--list-devices", "--synthetic", "2", "--json"])
        #expect(result.status == 0, "stderr: \(result.stderr)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        let devices = try #require(json["devices"] as? [[String: Any]])
        #expect(devices.map { $0["unique_id"] as? String } == ["synthetic:SYN0001", "synthetic:SYN0002"])
        let formats = try #require(devices[0]["formats"] as? [[String: Any]])
        let hfr = try #require(formats.first { $0["id"] as? String == "YUYV-320x240" })
        let ranges = try #require(hfr["frame_rate_ranges"] as? [[String: Any]])
        #expect(ranges.first?["min_frame_duration"] as? String == "1/120")
        #expect(ranges.first?["kind"] as? String == "discrete")
        #expect(formats.contains { $0["fourcc"] as? String == "MJPG" })
        let bayer = try #require(formats.first { $0["fourcc"] as? String == "RGGB" })
        #expect((bayer["frame_rate_ranges"] as? [[String: Any]])?.first?["step"] as? String == "1/60")
        let controls = try #require(devices[0]["controls"] as? [[String: Any]])
        let power = try #require(controls.first { $0["name"] as? String == "Power Line Frequency" })
        #expect((power["menu"] as? [[String: Any]])?.count == 3)
        #expect(power["value"] as? Int == 1)

        let text = try await Executables.run("camrig-agent", ["--list-devices", "--synthetic", "1"])
        #expect(text.stdout.contains("interval: discrete 1/120 s (120 fps)"))
        #expect(text.stdout.contains("interval: stepwise 1/60 s - 6/60 s with step 1/60 s (10-60 fps)"))
        #expect(text.stdout.contains("0x00980900 Brightness (integer): min=0 max=255 step=1 default=128 value=128"))
    }

    @Test("nodes that are not cameras are skipped with the reason")
    func notCameras() async throws {
        let directory = NSTemporaryDirectory() + "camrig-nodes-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        _ = FileManager.default.createFile(atPath: directory + "/video7", contents: Data("not a device".utf8))
        let result = try await Executables.run("camrig-agent", ["--list-devices", "--v4l2", directory + "/video*", "--json"])
        #expect(result.status == 0)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        #expect((json["devices"] as? [Any])?.isEmpty == true)
        #expect((json["skipped"] as? [String: String])?[directory + "/video7"]?.isEmpty == false)
    }
}

/// `--list-devices` against the emulated V4L2 camera, checked against `v4l2-ctl` reading the same device.
@Suite("camrig-agent --list-devices on the emulated V4L2 device", .timeLimit(.minutes(3)))
struct ListV4L2DevicesTests {
    static let emulator = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("V4L2Emulator")
    static let shim = emulator.appendingPathComponent("libcamrig-v4l2-sysfs-shim.so").path
    static let plugin = "/usr/lib/x86_64-linux-gnu/libv4l/plugins/libcamrig-v4l2-emulator.so"

    static let unavailable: String? = {
        if !FileManager.default.fileExists(atPath: plugin) { return "the emulated V4L2 device is not installed (make -C Tests/V4L2Emulator install)" }
        if !FileManager.default.fileExists(atPath: shim) { return "Tests/V4L2Emulator is not built (make -C Tests/V4L2Emulator)" }
        if !FileManager.default.isExecutableFile(atPath: "/usr/bin/v4l2-ctl") { return "no v4l2-ctl (apt-get install v4l-utils)" }
        return nil
    }()

    /// Runs v4l2-ctl through libv4l2 (-w) with the emulator's sysfs shim and libv4l2's conversion off.
    func v4l2ctl(_ arguments: [String]) async throws -> String {
        var environment = ProcessInfo.processInfo.environment
        environment["LD_PRELOAD"] = Self.shim
        environment["CAMRIG_V4L2_SHIM_NO_CONVERSION"] = "1"
        return try await ToolRunner.run("/usr/bin/v4l2-ctl", ["-w"] + arguments, environment: environment).stdout
    }

    @Test(
        "formats, sizes and controls match what v4l2-ctl reads from the same device: discrete (video51), stepwise (video52) and continuous (video53) frame sizes",
        .enabled(if: unavailable == nil, "\(unavailable ?? "")"), arguments: [51, 52, 53])
    func matchesV4L2Ctl(node: Int) async throws {
        // The emulator gives every format of videoN the same kind of frame sizes: N % 3 == 0 discrete,
        // 1 stepwise, 2 continuous.
        let directory = ProcessInfo.processInfo.environment["CAMRIG_V4L2_EMULATOR_DIR"] ?? "/dev/shm/camrig-v4l2"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let path = directory + "/video\(node)"
        for suffix in ["", ".state", ".lock", ".unplugged"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        _ = FileManager.default.createFile(atPath: path, contents: nil)
        defer { for suffix in ["", ".state", ".lock"] { try? FileManager.default.removeItem(atPath: path + suffix) } }

        let result = try await Executables.run("camrig-agent", ["--list-devices", "--v4l2", path, "--json"])
        #expect(result.status == 0, "stderr: \(result.stderr)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        let device = try #require((json["devices"] as? [[String: Any]])?.first)
        let formats = try #require(device["formats"] as? [[String: Any]])
        let controls = try #require(device["controls"] as? [[String: Any]])

        let controlText = try await v4l2ctl(["-d", path, "--list-ctrls"])
        let reported = Set(controlText.matches(of: /0x([0-9a-f]{8})/).compactMap { UInt32($0.1, radix: 16) })
        let ours = Set(controls.filter { $0["type"] as? String != "class" }.compactMap { ($0["id"] as? NSNumber)?.uint32Value })
        #expect(!reported.isEmpty)
        #expect(ours == reported)

        let formatText = try await v4l2ctl(["-d", path, "--list-formats"])
        let fourccs = Set(formatText.matches(of: /'([A-Z0-9 ]{4})'/).map { String($0.1) })
        #expect(Set(formats.compactMap { $0["fourcc"] as? String }) == fourccs)

        let sizeText = try await v4l2ctl(["-d", path, "--list-framesizes", "YUYV"])
        let ourSizes = formats.compactMap { $0["id"] as? String }.filter { $0.hasPrefix("YUYV-") }
        if node % 3 == 0 {
            let sizes = Set(sizeText.matches(of: /Discrete (\d+)x(\d+)/).map { "YUYV-\($0.1)x\($0.2)" })
            #expect(!sizes.isEmpty && Set(ourSizes) == sizes, "\(sizeText)")
        } else {
            // One range ("Stepwise 64x48 - 1280x1024 with step 16/8", "Continuous 32x32 - 1280x1024"): the
            // agent offers sizes inside it, on its grid, the largest being the range's maximum.
            let kind = node % 3 == 1 ? "Stepwise" : "Continuous"
            let range = try #require(
                sizeText.firstMatch(of: /Size: (Stepwise|Continuous) (\d+)x(\d+) - (\d+)x(\d+)(?: with step (\d+)\/(\d+))?/),
                "\(sizeText)")
            #expect(String(range.1) == kind)
            let (minW, minH, maxW, maxH) = (Int(range.2)!, Int(range.3)!, Int(range.4)!, Int(range.5)!)
            let (stepW, stepH) = (range.6.flatMap { Int($0) } ?? 1, range.7.flatMap { Int($0) } ?? 1)
            let dimensions = ourSizes.compactMap { id -> (Int, Int)? in
                let parts = id.dropFirst(5).split(separator: "x").compactMap { Int($0) }
                return parts.count == 2 ? (parts[0], parts[1]) : nil
            }
            #expect(dimensions.count == ourSizes.count && dimensions.count > 1)
            let onGrid = dimensions.allSatisfy { size in
                let (w, h) = size
                return w >= minW && w <= maxW && h >= minH && h <= maxH && (w - minW) % stepW == 0 && (h - minH) % stepH == 0
            }
            #expect(onGrid, "\(ourSizes)")
            #expect(ourSizes.contains("YUYV-\(maxW)x\(maxH)"))
        }
        let intervalText = try await v4l2ctl(["-d", path, "--list-frameintervals", "width=640,height=480,pixelformat=YUYV"])
        let yuyv = try #require(formats.first { $0["id"] as? String == "YUYV-640x480" })
        #expect((yuyv["frame_rate_ranges"] as? [Any])?.count == intervalText.matches(of: /Interval: Discrete/).count)
        // Stepwise and continuous intervals, on every kind of node.
        let rgb = try #require(formats.first { $0["id"] as? String == "RGB3-800x600" })
        #expect((rgb["frame_rate_ranges"] as? [[String: Any]])?.first?["kind"] as? String == "stepwise")
        let grey = try #require(formats.first { $0["id"] as? String == "GREY-1280x1024" })
        #expect((grey["frame_rate_ranges"] as? [[String: Any]])?.first?["kind"] as? String == "continuous")
    }
}
