import CamRigCoordinator
import CamRigLocalRig
@testable import CamRigSecurity
@testable import CamRigService
import CamRigServiceClient
import CamRigTestSupport
import CamRigViews
import CamRigWire
import Foundation
import Logging
import ServiceLifecycle
import Testing
import Yams

/// `camrig serve`: its routes against its OpenAPI document, and the service as its users meet it.
@Suite("Coordinator service", .timeLimit(.minutes(5)))
struct ServiceTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let console = root.appendingPathComponent("Sources/CamRigService/Console")

    @Test("the OpenAPI document describes exactly the routes the service serves")
    func openAPIMatchesRoutes() throws {
        let pki = try ScratchPKI(agents: [], viewers: [])
        defer { try? FileManager.default.removeItem(atPath: pki.path) }
        let (service, captures) = try Self.serviceWithoutAgents()
        defer { try? FileManager.default.removeItem(at: captures) }
        let router = ServiceRoutes.router(service: service, trustRoot: try pki.directory.trustRoot(), consoleDirectory: Self.console.path)
        let served = Set(router.routes.map { "\($0.method.rawValue) \($0.path)" })

        let document = try #require(
            try Yams.load(yaml: String(contentsOf: Self.console.appendingPathComponent("openapi.yaml"), encoding: .utf8)) as? [String: Any])
        let paths = try #require(document["paths"] as? [String: [String: Any]])
        var documented = Set<String>()
        for (path, operations) in paths {
            // The router describes a parameter as OpenAPI does, {name}.
            let routerPath = path
            for method in operations.keys where ["get", "put", "post", "delete", "patch"].contains(method) {
                documented.insert("\(method.uppercased()) \(routerPath)")
            }
        }
        #expect(served.subtracting(documented).sorted() == [], "served but not in openapi.yaml")
        #expect(documented.subtracting(served).sorted() == [], "in openapi.yaml but not served")
        #expect(served.count >= 20)
    }

    @Test("the API, metrics and console over a loopback rig, in headless Chromium")
    func consoleInBrowser() async throws {
        let served = try await ServedRig(agents: 2)
        let (url, token, tlsDir, captures) = (served.url, served.token, served.tlsDir, served.captures)

        let screenshots = Self.root.appendingPathComponent(".build/console-screenshots")
        let script = Self.root.appendingPathComponent("Tests/console/console_test.py").path
        let result = try await Executables.runTool(
            "/usr/bin/env", ["python3", script, url, token, tlsDir, screenshots.path, Executables.url("camrig").path, captures.path], timeout: 240)
        #expect(result.status == 0, "console_test.py failed:\n\(result.stdout)\n\(result.stderr)\nthe service's log:\n\(served.log().suffix(8000))")
        for name in ["console-grid.png", "console-camera-panel.png", "console-photo.png", "console-sync.png"] {
            #expect(FileManager.default.fileExists(atPath: screenshots.appendingPathComponent(name).path), "no screenshot \(name)")
        }

        // The command line goes through the running service when told where it is.
        let through = ["--service", url, "--tls-dir", tlsDir, "--json"]
        let agents = try await Executables.run("camrig", ["agents"] + through)
        #expect(agents.status == 0, "camrig agents through the service: \(agents.stderr)")
        let listed = try JSONSerialization.jsonObject(with: Data(agents.stdout.utf8)) as? [String: [[String: Any]]]
        #expect(listed?["agents"]?.map { $0["status"] as? String } == ["connected", "connected"])
        let photo = try await Executables.run("camrig", ["capture", "--photo", "--quality", "speed"] + through, timeout: 60)
        #expect(photo.status == 0, "camrig capture through the service: \(photo.stderr)")
        let summary = try JSONSerialization.jsonObject(with: Data(photo.stdout.utf8)) as? [String: Any]
        #expect((summary?["cameras"] as? [Any])?.count == 2)
        #expect((summary?["directory"] as? String)?.hasPrefix(captures.path) == true, "the service stores the capture in its own --out")
        let devices = try await Executables.run("camrig", ["devices"] + through)
        let camera = try #require(
            (try JSONSerialization.jsonObject(with: Data(devices.stdout.utf8)) as? [String: [[String: Any]]])?["devices"]?
                .first?["name"] as? String)
        let set = try await Executables.run("camrig", ["device", "set", camera, "exposure=continuous"] + through)
        #expect(set.status == 0, "camrig device set through the service: \(set.stderr)")
        let refused = try await Executables.run("camrig", ["capture", "--photo", "--deferred"] + through)
        #expect(refused.status != 0 && refused.stderr.contains("not taken through the service"))
        // A service that does not answer: the command says so and works with the agents directly.
        let direct = try await Executables.run("camrig", ["agents", "--service", "https://127.0.0.1:1", "--tls-dir", tlsDir, "--agent", "127.0.0.1:1", "--connect-timeout", "1"])
        #expect(direct.stderr.contains("does not answer") && direct.stderr.contains("working with the agents directly"))

        // SIGTERM: the service releases its cameras and its loopback rig, and exits cleanly.
        let exit = await served.stop()
        #expect(exit == .exited(0), "camrig serve did not stop cleanly within 20 s of SIGTERM: \(exit.map(String.init(describing:)) ?? "still running")\n\(served.log().suffix(2000))")
    }

    /// A service over no agents, capturing into a new temporary directory (remove it after).
    static func serviceWithoutAgents() throws -> (RigService, URL) {
        let captures = FileManager.default.temporaryDirectory.appendingPathComponent("camrig-service-\(UUID().uuidString)")
        let logger = Logger(label: "test")
        let service = try RigService(
            pool: AgentPool(endpoints: [], security: .insecure, logger: logger), configuration: .init(capturesDirectory: captures), logger: logger)
        return (service, captures)
    }

    @Test("previews watched during a recording cost it no frame; an agent that restarts is back in the session on its own")
    func previewsAndRecovery() async throws {
        let pki = try TestPKI(agents: ["agent-1", "agent-2"])
        defer { pki.remove() }
        let arguments = { (name: String) in ["--tls-dir", pki.path, "--identity", name, "--synthetic", "1"] }
        let first = try await AgentProcess.start(arguments("agent-1"))
        defer { first.terminate() }
        var second = try await AgentProcess.start(arguments("agent-2"))
        defer { second.terminate() }
        let captures = FileManager.default.temporaryDirectory.appendingPathComponent("camrig-service-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: captures) }
        let logger = Logger(label: "test")
        var timing = RemoteAgent.Timing()
        timing.maximumBackoff = .milliseconds(500)
        let pool = AgentPool(
            endpoints: [first, second].map { AgentEndpoint(host: $0.host, port: $0.port) },
            security: .tls(try MutualTLS.client(directory: pki.directory, identityName: "coordinator")), timing: timing, logger: logger)
        var configuration = RigService.Configuration(capturesDirectory: captures)
        configuration.supervisionInterval = .milliseconds(200)
        configuration.rebuildBackoff = .milliseconds(500)
        let service = try RigService(pool: pool, configuration: configuration, logger: logger)
        let (_, events) = service.events.subscribe(backlog: 1000)
        let group = ServiceGroup(services: service.services, logger: logger)
        let running = Task { try await group.run() }
        let access = Access(name: "test", role: .operator, method: "token")

        #expect(try await eventually(timeout: .seconds(30), pollingEvery: .milliseconds(100)) { await service.session?.inputs.count == 2 }, "no session over both cameras")
        let firstSession = try #require(await service.session?.id)

        // Both cameras watched at the agents' highest preview rate while the rig records.
        let cameras = await service.devices
        let watchers = cameras.map { service.previews.watch($0) }
        #expect(try await eventually(timeout: .seconds(10), pollingEvery: .milliseconds(100)) { cameras.allSatisfy { service.previews.receivedCount($0.name) > 0 } }, "no previews")
        let job = try await service.startRecording(.init(duration: 2, fps: 30), by: access)
        #expect(try await eventually(timeout: .seconds(60), pollingEvery: .milliseconds(100)) { await service.job(job.id)?.state != .running })
        let finished = await service.job(job.id)
        let recording = try #require(finished?.summary, "recording failed: \(finished?.error ?? "")")
        #expect(recording.droppedFrames == 0, "previews cost the recording \(recording.droppedFrames) frame(s)")
        #expect(recording.cameras.allSatisfy { $0.framesDelivered >= 55 }, "frames per camera: \(recording.cameras.map(\.framesDelivered))")
        #expect(recording.maxSkewUs <= 100, "previews cost the recording its sync: skew max \(recording.maxSkewUs) µs")
        let before = cameras.map { service.previews.receivedCount($0.name) }
        #expect(
            try await eventually(timeout: .seconds(5), pollingEvery: .milliseconds(100)) { zip(cameras, before).allSatisfy { service.previews.receivedCount($0.name) > $1 } },
            "previews did not come back after the recording")
        // A photo while the cameras are previewed is still taken at one instant.
        let watchedPhoto = try await service.startPhoto(.init(quality: "balanced"), by: access)
        #expect(try await eventually(timeout: .seconds(30), pollingEvery: .milliseconds(100)) { await service.job(watchedPhoto.id)?.state != .running })
        let watchedSummary = try #require(await service.job(watchedPhoto.id)?.summary)
        #expect(watchedSummary.maxSkewUs <= 100, "previews cost the photo its sync: skew \(watchedSummary.maxSkewUs) µs")
        for (camera, watcher) in zip(cameras, watchers) { service.previews.stopWatching(camera.name, id: watcher.id) }
        #expect(cameras.allSatisfy { service.previews.watcherCount($0.name) == 0 })

        // agent-2 is killed and comes back on its port: the service notices both and rebuilds the session.
        let port = second.port
        await second.crash()
        #expect(try await eventually(timeout: .seconds(20), pollingEvery: .milliseconds(100)) { await service.session?.id != firstSession || pool.agents[1].snapshot.status != .connected })
        second = try await AgentProcess.start(["--listen", "127.0.0.1:\(port)"] + arguments("agent-2"))
        let rebuilt = try await eventually(timeout: .seconds(30), pollingEvery: .milliseconds(100)) {
            guard let session = await service.session else { return false }
            let count = await session.inputs.count
            return session.id != firstSession && count == 2
        }
        #expect(rebuilt, "the session was not rebuilt over both cameras after agent-2 restarted")
        let photo = try await service.startPhoto(.init(quality: "speed"), by: access)
        #expect(try await eventually(timeout: .seconds(30), pollingEvery: .milliseconds(100)) { await service.job(photo.id)?.state != .running })
        let photoJob = await service.job(photo.id)
        #expect(photoJob?.summary?.cameras.count == 2, "photo after the restart: \(photoJob?.error ?? "")")

        await group.triggerGracefulShutdown()
        try await running.value
        var kinds: [String] = []
        for await event in events { kinds.append(event.kind.rawValue + (event.agent.map { ":" + $0 } ?? "")) }
        #expect(kinds.contains("agent.down:agent-2") && kinds.contains("capture.finished"))
        #expect(kinds.filter { $0 == "session.committed" }.count >= 2)
        #expect(kinds.last == "service.stopped")
    }

    @Test(
        "the service listens to its agents instead of polling them: a quiet rig is asked nothing for its devices, spools or phase locks, and what it shows is what the agents pushed; the safety net reads it all again",
        arguments: [false, true])
    func listensInsteadOfPolling(safetyNet: Bool) async throws {
        let pki = try TestPKI(agents: ["agent-1"])
        defer { pki.remove() }
        // Every request the agent answers is in its log at trace level.
        let agent = try await AgentProcess.start(["--tls-dir", pki.path, "--identity", "agent-1", "--synthetic", "1", "--log-level", "trace"])
        defer { agent.terminate() }
        let captures = FileManager.default.temporaryDirectory.appendingPathComponent("camrig-service-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: captures) }
        let logger = Logger(label: "test")
        let pool = AgentPool(
            endpoints: [AgentEndpoint(host: agent.host, port: agent.port)],
            security: .tls(try MutualTLS.client(directory: pki.directory, identityName: "coordinator")), logger: logger)
        var configuration = RigService.Configuration(capturesDirectory: captures)
        configuration.supervisionInterval = .milliseconds(200)
        // The safety net's full reads: once a second when they are what is tested, else never here.
        configuration.fullLookInterval = safetyNet ? .seconds(1) : .seconds(3600)
        let service = try RigService(pool: pool, configuration: configuration, logger: logger)
        let group = ServiceGroup(services: service.services, logger: logger)
        let running = Task { try await group.run() }
        let camera = "agent-1/synthetic:SYN0001"
        #expect(try await eventually(timeout: .seconds(30), pollingEvery: .milliseconds(100)) { await service.session?.inputs.count == 1 }, "no session")
        let locked = try await eventually(timeout: .seconds(20), pollingEvery: .milliseconds(100)) { await service.phases[camera]?.status.state == .locked }
        let phase = await service.phases[camera]
        #expect(locked, "the camera's phase as the service shows it: \(String(describing: phase?.status)) \(phase?.failure ?? "")")
        #expect(await service.devices.first { $0.name == camera }?.description.lease.holder == "coordinator", "the session's lease, as pushed")
        #expect(try await eventually(timeout: .seconds(5), pollingEvery: .milliseconds(100)) { await service.spools["agent-1"] != nil }, "no spool figures")

        // Three quiet seconds: fifteen looks at the rig, which used to ask for the devices and phase
        // locks at every look and the spool every five seconds. With the safety net at every second,
        // each is asked again two or three times.
        func asked(_ message: String, since start: Int = 0) -> Int {
            let log = agent.log().utf8
            return String(decoding: log.dropFirst(start), as: UTF8.self).ranges(of: "message=\(message) ").count
        }
        #expect(asked("list_devices") >= 1, "the agent's log shows no request at all: is it at trace level?")
        let quiet = agent.log().utf8.count
        try await Task.sleep(for: .seconds(3))
        for message in ["list_devices", "get_phase_status", "get_spool_status"] {
            let count = asked(message, since: quiet)
            #expect(safetyNet ? (1...6).contains(count) : count == 0, "\(message) asked \(count) times in 3 quiet seconds")
        }
        // Still shown as pushed: the lock held, its figures from the agent's latest PHASE_STATUS.
        #expect(await service.phases[camera]?.status.state == .locked)
        #expect(await service.spools["agent-1"]?.capacityBytes ?? 0 > 0)

        await group.triggerGracefulShutdown()
        try await running.value
    }
}

extension ServiceTests {
    @Test("a connection that sends nothing is closed, and a certificate revoked while its connection is open loses its access")
    func silentConnectionsAndRevocation() async throws {
        let pki = try ScratchPKI(agents: [], viewers: ["viewer-1"])
        defer { try? FileManager.default.removeItem(atPath: pki.path) }
        let (service, captures) = try Self.serviceWithoutAgents()
        defer { try? FileManager.default.removeItem(at: captures) }
        let logger = Logger(label: "test")
        let verifier = try ReloadingVerifier(directory: pki.directory)
        let port = PortBox()
        let app = try ServiceServer.application(
            service: service, host: "127.0.0.1", port: 0,
            tls: try ServiceServer.tlsConfiguration(directory: pki.directory, identityName: "coordinator", verifier: verifier),
            trustRoot: try pki.directory.trustRoot(), verifier: verifier, consoleDirectory: Self.console.path, connectionTimeout: .seconds(3),
            logger: logger
        ) { bound in port.set(bound) }
        let running = Task { try await app.runService() }
        defer { running.cancel() }
        #expect(try await eventually(timeout: .seconds(10), pollingEvery: .milliseconds(100)) { port.value != 0 })

        // A peer that opens a TCP connection and says nothing (not even a TLS hello) is let go.
        let silent = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(silent) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port.value).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(silent, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        #expect(connected == 0)
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(silent, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let started = ContinuousClock.now
        var byte: UInt8 = 0
        let read = recv(silent, &byte, 1, 0)
        #expect(read == 0, "the silent connection was not closed (recv returned \(read))")
        #expect(ContinuousClock.now - started < .seconds(5))

        // A viewer's connection stays open across its certificate's revocation: its next request is refused.
        let client = try ServiceClient(url: "https://127.0.0.1:\(port.value)", directory: pki.directory, identityName: "viewer-1")
        do {
            let before: Access = try await client.get("/api/v1/whoami")
            #expect(before.role == .viewer)
            _ = try pki.directory.revoke(name: "viewer-1", reason: .keyCompromise)
            let refused = await #expect(throws: ServiceClient.Failure.self) { let _: Access = try await client.get("/api/v1/whoami") }
            #expect(refused?.status == 401 && refused?.detail.contains("revoked") == true, "\(String(describing: refused))")
        } catch {
            // Shut down on every path: a client dropped without it stops the whole test process.
            await client.shutdown()
            throw error
        }
        await client.shutdown()
    }
}

/// The port a test server bound, set from its start-up callback.
final class PortBox: @unchecked Sendable {
    private let lock = NSLock()
    private var port = 0
    var value: Int { lock.withLock { port } }
    func set(_ value: Int) { lock.withLock { port = value } }
}

extension ServiceTests {
    @Test("an access token is refused when forged, signed by another CA, expired or revoked, and says which")
    func accessTokens() throws {
        let pki = try ScratchPKI(agents: [], viewers: [])
        let other = try ScratchPKI(agents: [], viewers: [])
        defer {
            try? FileManager.default.removeItem(atPath: pki.path)
            try? FileManager.default.removeItem(atPath: other.path)
        }
        let authority = try pki.directory.loadAuthority()
        let root = try pki.directory.trustRoot()
        let token = try AccessTokens.issue(name: "booth", role: .viewer, expires: Date().addingTimeInterval(3600), authority: authority)
        #expect(try AccessTokens.verify(token, trustRoot: root).get() == Access(name: "booth", role: .viewer, method: "token"))

        func refusal(_ result: Result<Access, AccessTokens.Refusal>) -> String {
            if case .failure(let refusal) = result { return refusal.description }
            return "accepted"
        }
        #expect(refusal(AccessTokens.verify("not-a-token", trustRoot: root)).contains("not a CamRig access token"))
        let foreign = try AccessTokens.issue(name: "x", role: .operator, expires: Date().addingTimeInterval(3600), authority: try other.directory.loadAuthority())
        #expect(refusal(AccessTokens.verify(foreign, trustRoot: root)).contains("not issued by this rig"))
        // The role changed in the payload: the signature no longer matches.
        let parts = token.split(separator: ".").map(String.init)
        let payload = String(decoding: AccessTokens.unbase64url(parts[1])!, as: UTF8.self).replacingOccurrences(of: "viewer", with: "operator")
        let tampered = [parts[0], AccessTokens.base64url(Data(payload.utf8)), parts[2]].joined(separator: ".")
        #expect(refusal(AccessTokens.verify(tampered, trustRoot: root)).contains("not issued by this rig"))
        let expired = try AccessTokens.issue(name: "old", role: .operator, expires: Date().addingTimeInterval(-60), authority: authority)
        #expect(refusal(AccessTokens.verify(expired, trustRoot: root)).contains("expired"))

        let denyList = TokenDenyList(directory: pki.directory)
        let claims = try #require(AccessTokens.claims(of: token, trustRoot: root))
        #expect(denyList.revokedAt(claims.id) == nil)
        _ = try TokenDenyList.revoke(claims, in: pki.directory)
        #expect(refusal(AccessTokens.verify(token, trustRoot: root, revokedAt: denyList.revokedAt)).contains("revoked"))
        let other2 = try AccessTokens.issue(name: "booth-2", role: .viewer, expires: Date().addingTimeInterval(3600), authority: authority)
        #expect((try? AccessTokens.verify(other2, trustRoot: root, revokedAt: denyList.revokedAt).get()) != nil, "only the revoked token is refused")
    }
}
