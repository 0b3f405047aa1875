import CamRigSecurity
import CamRigTestSupport
import Foundation
import Testing
import X509

/// Zero-touch enrollment through real processes: `camrig certs join-token`, `camrig serve --enroll` and
/// `camrig-agent --enroll`, over TLS on loopback.
@Suite("Zero-touch enrollment", .serialized, .timeLimit(.minutes(3)))
struct EnrollmentTests {
    /// A CA directory made by `camrig certs init`, removed with it.
    struct CA {
        let root: URL
        var path: String { root.appendingPathComponent("ca").path }

        init() async throws {
            root = FileManager.default.temporaryDirectory.appendingPathComponent("camrig-enroll-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
            let made = try await Executables.run("camrig", ["certs", "init", "--dir", path], timeout: 30)
            try #require(made.status == 0, "camrig certs init: \(made.stderr)")
        }

        func token(_ arguments: [String]) async throws -> String {
            let made = try await Executables.run("camrig", ["certs", "join-token", "--dir", path] + arguments, timeout: 30)
            try #require(made.status == 0, "camrig certs join-token: \(made.stderr)")
            return made.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }

        /// A host's own TLS directory (empty until it enrolls).
        func host(_ name: String) -> String { root.appendingPathComponent("host-\(name)").path }

        func remove() { try? FileManager.default.removeItem(at: root) }
    }

    /// An agent that enrolls as `name`; its process once it listens.
    static func enrolledAgent(_ served: ServedRig, ca: CA, token: String, name: String, _ extra: [String] = []) async throws -> AgentProcess {
        try await AgentProcess.start(
            ["--enroll", served.url, "--token", token, "--tls-dir", ca.host(name), "--identity", name, "--synthetic", "1", "--no-realtime"] + extra)
    }

    /// `camrig-agent --enroll` that must fail: its exit status and what it said.
    static func refusedAgent(_ served: ServedRig, ca: CA, token: String, name: String) async throws -> Executables.Result {
        try await Executables.run(
            "camrig-agent",
            ["--enroll", served.url, "--token", token, "--tls-dir", ca.host(name), "--identity", name, "--synthetic", "1", "--no-realtime",
             "--listen", "127.0.0.1:0", "--spool-dir", ca.host(name) + "-spool"], timeout: 60)
    }

    /// The service's recent events of `kind` (`/api/v1/events/recent`).
    static func events(_ served: ServedRig, _ kind: String) async throws -> [[String: Any]] {
        (try await served.json("/api/v1/events/recent") as? [[String: Any]] ?? []).filter { $0["kind"] as? String == kind }
    }

    @Test("a host joins with a token: its key stays on it, the service connects to it with a clock estimate and its camera, lists the enrolment as joined, and takes a photo with it")
    func joins() async throws {
        let ca = try await CA()
        defer { ca.remove() }
        let served = try await ServedRig(enrolling: ca.path)
        let token = try await ca.token(["--prefix", "cam-", "--uses", "2", "--expires", "10m"])
        let first = try await Self.enrolledAgent(served, ca: ca, token: token, name: "host1")
        defer { first.terminate() }
        let second = try await Self.enrolledAgent(served, ca: ca, token: token, name: "cam-host2")
        defer { second.terminate() }

        // Each host made its key, and only the host has it; the CA keeps the certificates.
        for name in ["cam-host1", "cam-host2"] {
            let directory = ca.host(name == "cam-host1" ? "host1" : "cam-host2")
            let mode = try FileManager.default.attributesOfItem(atPath: directory + "/\(name)-key.pem")[.posixPermissions] as? NSNumber
            #expect(mode?.intValue == 0o600)
            #expect(FileManager.default.fileExists(atPath: ca.path + "/\(name).pem"))
            #expect(!FileManager.default.fileExists(atPath: ca.path + "/\(name)-key.pem"))
        }
        var agents: [[String: Any]] = []
        let settled = try await eventually(timeout: .seconds(60), pollingEvery: .milliseconds(250)) {
            agents = try await served.json("/api/v1/agents") as? [[String: Any]] ?? []
            return agents.count == 2 && agents.allSatisfy { $0["status"] as? String == "connected" && $0["clock_settled"] as? Bool == true }
        }
        #expect(settled, "\(agents)\n\(served.log().suffix(3000))")
        #expect(Set(agents.compactMap { $0["agent"] as? String }) == ["cam-host1", "cam-host2"])
        let devices = try await served.json("/api/v1/devices") as? [[String: Any]] ?? []
        #expect(devices.count == 2, "\(devices)")
        let listed = try #require(try await served.json("/api/v1/enrollments") as? [String: Any])
        #expect(listed["enabled"] as? Bool == true)
        #expect(
            try await eventually(timeout: .seconds(10), pollingEvery: .milliseconds(250)) {
                let records = (try await served.json("/api/v1/enrollments") as? [String: Any])?["enrollments"] as? [[String: Any]] ?? []
                return records.filter { $0["state"] as? String == "joined" }.count == 2
            })
        // Each join is an event for the console and scripts, with where the host serves.
        let joined = try await Self.events(served, "agent.enrolled")
        #expect(
            Set(joined.compactMap { $0["agent"] as? String }) == ["cam-host1", "cam-host2"]
                && joined.contains { ($0["data"] as? [String: String])?["endpoint"] == first.address }, "\(joined)")

        #expect(try await eventually(timeout: .seconds(30), pollingEvery: .milliseconds(200)) { ((try await served.json("/api/v1/session") as? [String: Any])?["cameras"] as? Int) == 2 }, "no session over both cameras")
        let photo = try await served.curl("/api/v1/captures/photo", ["-H", "Content-Type: application/json", "-X", "POST", "--data", #"{"quality": "speed"}"#])
        #expect(photo.status == 202, "\(photo.output)")
        var job: [String: Any]?
        #expect(
            try await eventually(timeout: .seconds(60), pollingEvery: .milliseconds(200)) {
                job = (try await served.json("/api/v1/jobs") as? [[String: Any]])?.first
                return job?["capture_id"] != nil || job?["state"] as? String == "failed"
            })
        #expect(job?["capture_id"] != nil, "the photo failed: \(job ?? [:])")
    }

    @Test("a wrong, used-up, revoked, expired or another rig's token is refused: the agent exits saying why, the service logs the reason and lists the refusal")
    func refusals() async throws {
        let ca = try await CA()
        defer { ca.remove() }
        let served = try await ServedRig(enrolling: ca.path)
        let once = try await ca.token(["--uses", "1"])
        let first = try await Self.enrolledAgent(served, ca: ca, token: once, name: "only")
        defer { first.terminate() }

        var cases: [(token: String, name: String, reason: String)] = [(once, "again", "used up (1 of 1 uses)")]
        var parts = once.split(separator: ".").map(String.init)
        parts[1] = String(parts[1].reversed())
        cases.append((parts.joined(separator: "."), "wrong", "wrong secret"))
        let revoked = try await ca.token(["--uses", "5"])
        let id = String(revoked.dropFirst(JoinToken.prefix.count).prefix(8))
        let revocation = try await Executables.run("camrig", ["certs", "join-token", "--dir", ca.path, "--revoke", id], timeout: 30)
        #expect(revocation.status == 0, "\(revocation.stderr)")
        cases.append((revoked, "late", "was revoked"))
        let expiring = try await ca.token(["--expires", "1s"])
        try await Task.sleep(for: .milliseconds(1500))
        cases.append((expiring, "slow", "expired"))
        let other = try await CA()
        defer { other.remove() }
        await cases.append((try other.token([]), "stray", "does not match the token's pin"))

        for (token, name, reason) in cases {
            let result = try await Self.refusedAgent(served, ca: ca, token: token, name: name)
            #expect(result.status != 0, "\(name) enrolled")
            #expect(result.stderr.contains(reason), "\(name): \(result.stderr)")
            #expect(!result.stderr.contains(token), "the agent printed its token")
        }
        let log = served.log()
        for reason in cases.dropLast().map(\.reason) { #expect(log.contains(reason), "the service's log has no '\(reason)'") }
        let records = (try await served.json("/api/v1/enrollments") as? [String: Any])?["enrollments"] as? [[String: Any]] ?? []
        #expect(records.filter { $0["state"] as? String == "refused" }.count == 4, "\(records)")
        let refusals = try await Self.events(served, "enrollment.refused")
        #expect(refusals.count == 4, "\(refusals)")
        for reason in cases.dropLast().map(\.reason) {
            #expect(refusals.contains { ($0["message"] as? String ?? "").contains(reason) }, "no refusal event says '\(reason)': \(refusals)")
        }
    }

    @Test("an enrolled agent renews its certificate two thirds into its life without a restart, and a revocation reaches it from the service with nothing copied")
    func renewsAndRevokes() async throws {
        let ca = try await CA()
        defer { ca.remove() }
        // Certificates of 8.6 s: renewed about 5.8 s after they are issued.
        let served = try await ServedRig(enrolling: ca.path, ["--certificate-days", "0.0001"])
        let agent = try await Self.enrolledAgent(served, ca: ca, token: try ca.token([]), name: "pi", ["--crl-refresh", "1"])
        defer { agent.terminate() }
        let directory = TLSDirectory(path: ca.host("pi"))
        let first = try #require(try directory.entries().first { $0.name == "pi" }).certificate
        #expect(
            try await eventually(timeout: .seconds(20), pollingEvery: .milliseconds(250)) {
                (try? directory.entries().first { $0.name == "pi" })??.certificate.serialNumber != first.serialNumber
            }, "not renewed: \(agent.log().suffix(2000))")
        // The new certificate is on disk before the agent loads it and logs the renewal.
        #expect(try await eventually(timeout: .seconds(5), pollingEvery: .milliseconds(100)) { agent.log().contains("certificate renewed") })
        let renewed = try #require(try directory.entries().first { $0.name == "pi" }).certificate
        #expect(renewed.publicKey != first.publicKey, "the renewal kept the old key")
        #expect(agent.isRunning)
        #expect(try await Self.events(served, "agent.renewed").contains { $0["agent"] as? String == "pi" })

        // A viewer reaches the agent; once its certificate is revoked on the CA's machine, the agent, having
        // fetched the list from the service, refuses it.
        let issued = try await Executables.run("camrig", ["certs", "issue", "--dir", ca.path, "--name", "viewer-1", "--role", "viewer"], timeout: 30)
        try #require(issued.status == 0, "\(issued.stderr)")
        func viewerLists() async throws -> Executables.Result {
            try await Executables.run("camrig", ["devices", "--agent", agent.address, "--tls-dir", ca.path, "--identity", "viewer-1", "--json"], timeout: 30)
        }
        let before = try await viewerLists()
        #expect(before.status == 0, "\(before.stderr)")
        let revoked = try await Executables.run("camrig", ["certs", "revoke", "--dir", ca.path, "--name", "viewer-1"], timeout: 30)
        #expect(revoked.status == 0, "\(revoked.stderr)")
        #expect(
            try await eventually(timeout: .seconds(15), pollingEvery: .milliseconds(250)) { agent.log().contains("new revocation list from the service installed") },
            "\(agent.log().suffix(2000))")
        #expect(FileManager.default.contentsEqual(atPath: ca.host("pi") + "/crl.pem", andPath: ca.path + "/crl.pem"))
        let after = try await viewerLists()
        #expect(after.status != 0, "a revoked viewer still reached the agent: \(after.stdout)")
    }

    @Test("a host revoked while the service runs is cut off within seconds, without a restart: an enrolled one leaves the rig, one given by address is listed down, saying it is revoked")
    func revokedWhileServing() async throws {
        let ca = try await CA()
        defer { ca.remove() }
        let issued = try await Executables.run("camrig", ["certs", "issue", "--dir", ca.path, "--name", "fixed-1", "--role", "agent"], timeout: 30)
        try #require(issued.status == 0, "\(issued.stderr)")
        let fixed = try await AgentProcess.start(["--tls-dir", ca.path, "--identity", "fixed-1", "--synthetic", "1", "--no-realtime"])
        defer { fixed.terminate() }
        let served = try await ServedRig(enrolling: ca.path, ["--agent", fixed.address])
        let joined = try await Self.enrolledAgent(served, ca: ca, token: try ca.token([]), name: "joined-1")
        defer { joined.terminate() }
        func agents() async throws -> [String: [String: Any]] {
            let list = try await served.json("/api/v1/agents") as? [[String: Any]] ?? []
            return Dictionary(list.compactMap { agent in (agent["agent"] as? String).map { ($0, agent) } }, uniquingKeysWith: { first, _ in first })
        }
        var listed: [String: [String: Any]] = [:]
        #expect(
            try await eventually(timeout: .seconds(60), pollingEvery: .milliseconds(250)) {
                listed = try await agents()
                return Set(listed.keys) == ["fixed-1", "joined-1"] && listed.values.allSatisfy { $0["status"] as? String == "connected" }
            }, "\(listed)\n\(served.log().suffix(3000))")

        // The enrolled host's certificate is revoked where the CA is: within seconds the service lets go of it.
        let first = try await Executables.run("camrig", ["certs", "revoke", "--dir", ca.path, "--name", "joined-1"], timeout: 30)
        #expect(first.status == 0, "\(first.stderr)")
        #expect(
            try await eventually(timeout: .seconds(15), pollingEvery: .milliseconds(250)) {
                listed = try await agents()
                return Set(listed.keys) == ["fixed-1"] && listed["fixed-1"]?["status"] as? String == "connected"
            }, "the revoked host is still in the rig: \(listed)\n\(served.log().suffix(3000))")
        // The host leaves the rig before the service logs what it applied, so the line may come a moment later.
        #expect(
            try await eventually(timeout: .seconds(5), pollingEvery: .milliseconds(100)) {
                served.log().contains("revocation list applied to the connections to agents")
            }, "\(served.log().suffix(3000))")

        #expect(try await Self.events(served, "agent.revoked").map { $0["agent"] as? String } == ["joined-1"])

        // A host given by address stays listed, down, with the reason; it is not connected to again.
        let second = try await Executables.run("camrig", ["certs", "revoke", "--dir", ca.path, "--name", "fixed-1"], timeout: 30)
        #expect(second.status == 0, "\(second.stderr)")
        #expect(
            try await eventually(timeout: .seconds(15), pollingEvery: .milliseconds(250)) {
                listed = try await agents()
                return listed["fixed-1"]?["status"] as? String == "down" && (listed["fixed-1"]?["reason"] as? String ?? "").contains("revoked")
            }, "\(listed)\n\(served.log().suffix(3000))")
        try await Task.sleep(for: .seconds(2))
        await #expect(try agents()["fixed-1"]?["status"] as? String != "connected", "a revoked agent was connected to again")
        #expect(fixed.isRunning && joined.isRunning)
    }

    @Test("an enrolled host that comes back serving on another port is followed once it renews: the rig reaches it there, and its old endpoint leaves the rig")
    func movedHostIsFollowed() async throws {
        let ca = try await CA()
        defer { ca.remove() }
        // Certificates of 8.6 s: renewed about 5.8 s after they are issued.
        let served = try await ServedRig(enrolling: ca.path, ["--certificate-days", "0.0001"])
        var agent = try await Self.enrolledAgent(served, ca: ca, token: try ca.token([]), name: "mover")
        defer { agent.terminate() }
        func agents() async throws -> [[String: Any]] { try await served.json("/api/v1/agents") as? [[String: Any]] ?? [] }
        var listed: [[String: Any]] = []
        #expect(
            try await eventually(timeout: .seconds(30), pollingEvery: .milliseconds(250)) {
                listed = try await agents()
                return listed.count == 1 && listed[0]["status"] as? String == "connected"
            }, "\(listed)")
        let before = agent.address
        // The same host, restarted: same TLS directory and enrollment, no token, a new port.
        await agent.stop()
        agent = try await AgentProcess.start(["--tls-dir", ca.host("mover"), "--synthetic", "1", "--no-realtime", "--crl-refresh", "1"])
        #expect(agent.address != before)
        #expect(
            try await eventually(timeout: .seconds(30), pollingEvery: .milliseconds(250)) {
                listed = try await agents()
                return listed.count == 1 && listed[0]["address"] as? String == agent.address && listed[0]["status"] as? String == "connected"
            }, "the rig did not follow the host to \(agent.address): \(listed)\n\(served.log().suffix(3000))\n\(agent.log().suffix(3000))")
        #expect(served.log().contains("agent moved"))
    }
}
