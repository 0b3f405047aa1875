import CamRigTestSupport
import Foundation
import Testing

/// The independent Python client (Tests/interop/camrig_client.py, written from PROTOCOL.md and
/// camrig.proto alone) against a real agent: if it works, the specification is enough to build a client.
@Suite("Interoperability", .timeLimit(.minutes(3)))
struct InteropTests {
    static let python = "/usr/bin/python3"

    /// Why the interop client cannot run here, or nil if it can.
    static let unavailable: String? = {
        guard FileManager.default.isExecutableFile(atPath: python) else { return "no \(python)" }
        guard let check = try? Executables.runTool(python, ["-c", "import google.protobuf"]), check.status == 0 else {
            return "\(python) has no google.protobuf (Debian: apt-get install python3-protobuf)"
        }
        guard let protoc = try? Executables.runTool("/usr/bin/env", ["protoc", "--version"]), protoc.status == 0 else {
            return "no protoc (Debian: apt-get install protobuf-compiler)"
        }
        return nil
    }()

    static var script: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("interop/camrig_client.py").path
    }

    @Test("a Python client written from the specification completes hello and pings over TLS", .enabled(if: unavailable == nil, "\(unavailable ?? "")"))
    func pythonClient() async throws {
        let (pki, agent) = try await AgentProcess.secured([])
        defer {
            agent.terminate()
            pki.remove()
        }
        for identity in ["coordinator", "viewer-1"] {
            let result = try await Executables.runTool(Self.python, [Self.script, "--agent", agent.address, "--tls-dir", pki.path, "--identity", identity, "--count", "3", "--json"])
            #expect(result.status == 0, "stderr: \(result.stderr)")
            let json = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
            #expect(json["agent_id"] as? String == "agent-1")
            #expect(json["protocol_version"] as? Int == 1)
            #expect((json["rtt_us"] as? [Any])?.count == 3)
            #expect((json["client_role"] as? String)?.hasSuffix(identity == "coordinator" ? "COORDINATOR" : "VIEWER") == true)
        }
        #expect(!agent.log().contains("TLS error"), "the client closes TLS cleanly")
    }
}
