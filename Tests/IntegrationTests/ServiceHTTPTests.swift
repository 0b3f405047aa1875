import CamRigTestSupport
import Foundation
import Testing

/// `camrig serve` over real HTTPS as a stranger meets it: curl checking the certificate's names against
/// the address the service prints, a WebSocket upgrade without a token, the refusals the API document
/// promises, symbolic links in a capture, and a property-based run of the API's own OpenAPI document.
@Suite("Coordinator service over HTTPS", .timeLimit(.minutes(8)))
struct ServiceHTTPTests {
    @Test("curl trusts the printed address with the rig's CA; an upgrade without a token is a 401 problem; a size no camera has is refused up front; links never lead out of --out")
    func letter() async throws {
        let served = try await ServedRig(agents: 1)
        // The address printed is one the coordinator's certificate names: curl checks host names.
        let whoami = try await served.curl("/api/v1/whoami")
        #expect(whoami.status == 200 && whoami.output.contains("\"operator\""), "\(whoami.output)")

        let upgrade = ["-H", "Connection: Upgrade", "-H", "Upgrade: websocket", "-H", "Sec-WebSocket-Version: 13", "-H", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="]
        for path in ["/api/v1/events", "/api/v1/previews"] {
            let refused = try await served.curl(path, upgrade, token: false)
            #expect(refused.status == 401 && refused.output.lowercased().contains("content-type: application/problem+json"), "\(refused.output)")
            let plain = try await served.curl(path)
            #expect(plain.status == 426 && plain.output.lowercased().contains("upgrade: websocket"), "\(plain.output)")
        }

        #expect(try await eventually(timeout: .seconds(30), pollingEvery: .milliseconds(200)) { ((try await served.json("/api/v1/session") as? [String: Any])?["cameras"] as? Int) == 1 }, "no session")
        let json = ["-H", "Content-Type: application/json", "-X", "POST"]
        let size = try await served.curl("/api/v1/captures/recording", json + ["--data", #"{"duration": 1, "size": "7x5"}"#])
        #expect(size.status == 409 && size.output.contains("7x5") && size.output.contains("\"device\""), "\(size.output)")
        let jobs = try await served.json("/api/v1/jobs") as? [Any]
        #expect(jobs?.isEmpty == true, "no job was started")

        // A photo, then links in its folder: one to a file outside --out is not served, one inside is.
        let photo = try await served.curl("/api/v1/captures/photo", json + ["--data", #"{"quality": "speed"}"#])
        #expect(photo.status == 202, "\(photo.output)")
        var capture: String?
        #expect(
            try await eventually(timeout: .seconds(60), pollingEvery: .milliseconds(200)) {
                let jobs = try await served.json("/api/v1/jobs") as? [[String: Any]]
                capture = jobs?.first?["capture_id"] as? String
                return capture != nil || jobs?.first?["state"] as? String == "failed"
            })
        let id = try #require(capture, "the photo did not finish")
        let entry = try #require((try await served.json("/api/v1/captures/\(id)") as? [String: Any])?["directory"] as? String)
        let outside = FileManager.default.temporaryDirectory.appendingPathComponent("camrig-secret-\(UUID().uuidString)")
        try Data("secret".utf8).write(to: outside)
        defer { try? FileManager.default.removeItem(at: outside) }
        try FileManager.default.createSymbolicLink(atPath: entry + "/leak.txt", withDestinationPath: outside.path)
        try FileManager.default.createSymbolicLink(atPath: entry + "/manifest-link.json", withDestinationPath: entry + "/manifest.json")
        let leak = try await served.curl("/api/v1/captures/\(id)/files/leak.txt")
        #expect(leak.status == 404 && !leak.output.contains("secret"), "\(leak.output)")
        #expect(try await served.curl("/api/v1/captures/\(id)/files/manifest-link.json").status == 200)
        #expect(await served.stop() != nil, "camrig serve did not stop within 20 s of SIGTERM")
    }

    @Test("`camrig certs init` gives the coordinator a certificate naming localhost, 127.0.0.1, ::1, this host and the names asked for")
    func coordinatorCertificateNames() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("camrig-certs-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let created = try await Executables.run("camrig", ["certs", "init", "--dir", directory.path, "--hostname", "rig.example", "--hostname", "10.0.0.5"])
        #expect(created.status == 0, "\(created.stderr)")
        let text = try await Executables.runTool("/usr/bin/openssl", ["x509", "-noout", "-ext", "subjectAltName", "-in", directory.appendingPathComponent("coordinator.pem").path])
        for name in ["DNS:localhost", "IP Address:127.0.0.1", "IP Address:0:0:0:0:0:0:0:1", "DNS:rig.example", "IP Address:10.0.0.5", "DNS:\(ProcessInfo.processInfo.hostName)"] {
            #expect(text.stdout.contains(name), "\(name) missing from \(text.stdout)")
        }
    }

    @Test("the API passes a property-based run of its own OpenAPI document (schemathesis, all checks)")
    func schemathesis() async throws {
        let served = try await ServedRig(agents: 1)
        #expect(try await eventually(timeout: .seconds(30), pollingEvery: .milliseconds(200)) { ((try await served.json("/api/v1/session") as? [String: Any])?["cameras"] as? Int) == 1 }, "no session")
        let result = try await Executables.runTool(
            "/usr/bin/env",
            [
                "st", "run", served.base + "/openapi.yaml", "--url", served.base, "--tls-verify", served.ca, "-H", "Authorization: Bearer \(served.token)",
                "--checks", "all", "--max-examples", "15", "--seed", "27", "--no-color", "--request-timeout", "20",
                // Not request and response: the two WebSockets (101, then frames) and the endless MJPEG stream.
                // RoutesTests and `letter` test what HTTP they answer.
                "--exclude-path-regex", #"^/api/v1/(events|previews|devices/[^/]+/[^/]+/preview\.mjpeg)$"#,
            ], timeout: 240)
        #expect(result.status == 0, "schemathesis found failures:\n\(result.stdout.suffix(12_000))\n\(result.stderr.suffix(4000))")
        #expect(await served.stop() != nil, "camrig serve did not stop within 20 s of SIGTERM")
    }
}

extension ServedRig {
    /// curl with the rig's CA as its only trust (host names checked), the status and the headers and body.
    func curl(_ path: String, _ arguments: [String] = [], token: Bool = true) async throws -> (status: Int, output: String) {
        let auth = token ? ["-H", "Authorization: Bearer \(self.token)"] : []
        let result = try await Executables.runTool(
            "/usr/bin/curl", ["-sS", "-i", "--http1.1", "--max-time", "20", "--cacert", ca] + auth + arguments + [base + path], timeout: 30)
        #expect(result.status == 0, "curl \(path): \(result.stderr)")
        let statusLine = result.stdout.split(separator: "\r\n").first { $0.hasPrefix("HTTP/") && !$0.contains(" 100 ") } ?? ""
        return (Int(statusLine.split(separator: " ").dropFirst().first ?? "") ?? 0, result.stdout)
    }

    /// The JSON body of a GET with the token.
    func json(_ path: String) async throws -> Any? {
        let (_, output) = try await curl(path)
        guard let body = output.components(separatedBy: "\r\n\r\n").last else { return nil }
        return try? JSONSerialization.jsonObject(with: Data(body.utf8))
    }
}
