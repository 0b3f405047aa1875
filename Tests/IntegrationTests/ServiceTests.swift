import CamRigCoordinator
import CamRigLocalRig
import CamRigService
import CamRigTestSupport
import Foundation
import Logging
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
        let captures = FileManager.default.temporaryDirectory.appendingPathComponent("camrig-routes-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: captures) }
        let logger = Logger(label: "test")
        let service = try RigService(
            pool: AgentPool(endpoints: [], security: .insecure, logger: logger), configuration: .init(capturesDirectory: captures), logger: logger)
        let router = ServiceRoutes.router(
            service: service, metrics: ServiceMetrics(), trustRoot: try pki.directory.trustRoot(), consoleDirectory: Self.console.path)
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
        let captures = FileManager.default.temporaryDirectory.appendingPathComponent("camrig-serve-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: captures) }
        let serve = Process()
        serve.executableURL = Executables.url("camrig")
        serve.arguments = ["serve", "--loopback", "2", "--listen", "127.0.0.1:0", "--json", "--out", captures.path]
        let output = Pipe()
        let errors = Pipe()
        serve.standardOutput = output
        serve.standardError = errors
        try serve.run()
        defer { if serve.isRunning { kill(serve.processIdentifier, SIGKILL) } }

        // The first line says where it serves, with a sign-in token (loopback mode prints one).
        let announcement = try await Task.detached { () -> Data in
            var line = Data()
            while let byte = try output.fileHandleForReading.read(upToCount: 1), !byte.isEmpty, byte != Data("\n".utf8) { line.append(byte) }
            return line
        }.value
        let fields = try #require(
            try JSONSerialization.jsonObject(with: announcement) as? [String: String],
            "camrig serve did not announce itself: \(String(decoding: errors.fileHandleForReading.availableData, as: UTF8.self))")
        let (url, token, tlsDir) = (try #require(fields["url"]), try #require(fields["token"]), try #require(fields["tls_dir"]))

        let screenshots = Self.root.appendingPathComponent(".build/console-screenshots")
        let script = Self.root.appendingPathComponent("Tests/console/console_test.py").path
        let result = try Executables.runTool(
            "/usr/bin/env", ["python3", script, url, token, tlsDir, screenshots.path, Executables.url("camrig").path], timeout: 240)
        #expect(result.status == 0, "console_test.py failed:\n\(result.stdout)\n\(result.stderr)")
        for name in ["console-grid.png", "console-camera-panel.png", "console-photo.png", "console-sync.png"] {
            #expect(FileManager.default.fileExists(atPath: screenshots.appendingPathComponent(name).path), "no screenshot \(name)")
        }

        // The command line goes through the running service when told where it is.
        let through = ["--service", url, "--tls-dir", tlsDir, "--json"]
        let agents = try Executables.run("camrig", ["agents"] + through)
        #expect(agents.status == 0, "camrig agents through the service: \(agents.stderr)")
        let listed = try JSONSerialization.jsonObject(with: Data(agents.stdout.utf8)) as? [String: [[String: Any]]]
        #expect(listed?["agents"]?.map { $0["status"] as? String } == ["connected", "connected"])
        let photo = try Executables.run("camrig", ["capture", "--photo", "--quality", "speed"] + through, timeout: 60)
        #expect(photo.status == 0, "camrig capture through the service: \(photo.stderr)")
        let summary = try JSONSerialization.jsonObject(with: Data(photo.stdout.utf8)) as? [String: Any]
        #expect((summary?["cameras"] as? [Any])?.count == 2)
        #expect((summary?["directory"] as? String)?.hasPrefix(captures.path) == true, "the service stores the capture in its own --out")
        let camera = try #require(
            (try JSONSerialization.jsonObject(with: Data(try Executables.run("camrig", ["devices"] + through).stdout.utf8)) as? [String: [[String: Any]]])?["devices"]?
                .first?["name"] as? String)
        let set = try Executables.run("camrig", ["device", "set", camera, "exposure=continuous"] + through)
        #expect(set.status == 0, "camrig device set through the service: \(set.stderr)")
        let refused = try Executables.run("camrig", ["capture", "--photo", "--deferred"] + through)
        #expect(refused.status != 0 && refused.stderr.contains("not taken through the service"))
        // A service that does not answer: the command says so and works with the agents directly.
        let direct = try Executables.run("camrig", ["agents", "--service", "https://127.0.0.1:1", "--tls-dir", tlsDir, "--agent", "127.0.0.1:1", "--connect-timeout", "1"])
        #expect(direct.stderr.contains("does not answer") && direct.stderr.contains("working with the agents directly"))

        // SIGTERM: the service releases its cameras and its loopback rig, and exits cleanly.
        kill(serve.processIdentifier, SIGTERM)
        let deadline = Date().addingTimeInterval(20)
        while serve.isRunning && Date() < deadline { try await Task.sleep(for: .milliseconds(100)) }
        #expect(!serve.isRunning, "camrig serve did not stop within 20 s of SIGTERM")
        if !serve.isRunning { #expect(serve.terminationStatus == 0) }
    }
}
