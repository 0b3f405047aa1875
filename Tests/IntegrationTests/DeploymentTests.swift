import CamRigAgent
import CamRigCoordinator
import CamRigSecurity
import CamRigTestSupport
import CamRigWire
import Foundation
import Testing

/// The files in deploy/ work as shipped.
@Suite("Deployment files", .timeLimit(.minutes(3)))
struct DeploymentTests {
    static let deploy = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("deploy")

    @Test("the example configuration parses")
    func exampleConfiguration() throws {
        let file = try AgentConfigurationFile(contentsOf: Self.deploy.appendingPathComponent("agent.yaml").path)
        // The agent's own certificates live in its state directory: an enrolling agent writes them there.
        #expect(file.tlsDir == "/var/lib/camrig/tls")
        #expect(file.spool?.dir == "/var/lib/camrig/spool")
        #expect(file.devices?.v4l2 == ["/dev/video*"])
    }

    @Test("an agent takes its settings from --config, and flags override them")
    func configurationFile() async throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        let directory = NSTemporaryDirectory() + "camrig-config-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let config = directory + "/agent.yaml"
        try """
        listen: 127.0.0.1:1
        tls_dir: \(pki.path)
        agent_id: from-file
        spool:
          dir: \(directory)/spool
        devices:
          synthetic: 3
        """.write(toFile: config, atomically: true, encoding: .utf8)
        // AgentProcess adds --listen 127.0.0.1:0, which must win over the file's port 1.
        let agent = try await AgentProcess.start(["--config", config, "--synthetic", "2"])
        defer { agent.terminate() }
        let client = try await AgentClient.connect(
            to: AgentEndpoint(host: agent.host, port: agent.port),
            security: .tls(try MutualTLS.client(directory: pki.directory))
        )
        #expect(client.welcome.agentID == "from-file")
        let answer = try await client.request(.listDevices(.init())).frame.envelope
        guard case .deviceList(let list) = answer.body else {
            Issue.record("expected a device list in reply to list_devices, got \(answer.messageName)")
            return
        }
        #expect(list.devices.count == 2, "--synthetic 2 overrides the file's 3")
        #expect(FileManager.default.fileExists(atPath: directory + "/spool/results"))
        await client.close()

        try "listn: 0.0.0.0:1".write(toFile: config, atomically: true, encoding: .utf8)
        let typo = try await Executables.run("camrig-agent", ["--config", config])
        #expect(typo.status != 0)
        #expect(typo.stderr.contains("unknown key 'listn'"))
    }

    @Test("systemd-analyze verify accepts the agent's unit", .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/systemd-analyze"), "no systemd-analyze"))
    func systemdUnit() async throws {
        try await Self.verify(unit: "camrig-agent.service", program: "/usr/local/bin/camrig-agent", builtAs: "camrig-agent")
    }

    /// Runs systemd-analyze verify on deploy/`unit`, its ExecStart's `program` pointed at the built binary
    /// (verify checks that it exists), and expects no complaint about the unit.
    static func verify(unit: String, program: String, builtAs binary: String) async throws {
        let directory = NSTemporaryDirectory() + "camrig-unit-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let text = try String(contentsOf: deploy.appendingPathComponent(unit), encoding: .utf8)
            .replacingOccurrences(of: program + " ", with: Executables.url(binary).path + " ")
        try text.write(toFile: directory + "/" + unit, atomically: true, encoding: .utf8)
        let result = try await Executables.runTool("/usr/bin/systemd-analyze", ["verify", directory + "/" + unit])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(!result.stderr.contains(unit + ":"), "warnings about the unit: \(result.stderr)")
    }

    @Test("systemd-analyze verify accepts the coordinator service's unit", .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/systemd-analyze"), "no systemd-analyze"))
    func coordinatorUnit() async throws {
        try await Self.verify(unit: "camrig-coordinator.service", program: "/usr/local/bin/camrig", builtAs: "camrig")
    }

    @Test("the coordinator unit's command and its options file use options camrig serve has, and the example rig file names a service")
    func coordinatorOptions() async throws {
        let unit = try String(contentsOf: Self.deploy.appendingPathComponent("camrig-coordinator.service"), encoding: .utf8)
        let defaults = try String(contentsOf: Self.deploy.appendingPathComponent("camrig-coordinator.default"), encoding: .utf8)
            .split(separator: "\n").filter { !$0.hasPrefix("#") }.joined(separator: "\n")
        let execStart = try #require(unit.split(separator: "\n").first { $0.hasPrefix("ExecStart=") })
        #expect(execStart.contains("camrig serve"))
        let flags = (execStart + " " + defaults).split(whereSeparator: { " \"\n=".contains($0) }).filter { $0.hasPrefix("--") }
        #expect(flags.count >= 4)
        let help = try await Executables.run("camrig", ["serve", "--help"])
        for flag in Set(flags) { #expect(help.stdout.contains(String(flag)), "camrig serve has no \(flag)") }
        let rig = try String(contentsOf: Self.deploy.appendingPathComponent("rig.yaml"), encoding: .utf8)
        #expect(rig.contains("# service: https://"))
    }
}
