import CamRigCoordinator
import CamRigTestSupport
import CamRigWire
import Foundation
import NIOCore
import Testing

/// One agent process (`agent-1`, with synthetic cameras) and a rig file naming it, in a folder of
/// their own, for tests that run `camrig` as an operator would; removed by `remove()`.
struct CommandLineRig {
    let pki: TestPKI
    let agent: AgentProcess
    /// The test's folder: the rig file, and captures under `captures/`.
    let work: String
    var rigFile: String { work + "/rig.yaml" }
    var captures: String { work + "/captures" }

    init(cameras: Int) async throws {
        pki = try TestPKI(agents: ["agent-1"])
        agent = try await AgentProcess.start(["--tls-dir", pki.path, "--identity", "agent-1", "--synthetic", "\(cameras)"])
        work = NSTemporaryDirectory() + "camrig-cli-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        try "tls_dir: \(pki.path)\nagents:\n  - 127.0.0.1:\(agent.port)\n".write(toFile: rigFile, atomically: true, encoding: .utf8)
    }

    /// Runs `camrig ARGUMENTS --rig RIG` (with `--out CAPTURES` for commands that take it: not `device`).
    func camrig(_ arguments: [String], timeout: Double = 120) async throws -> Executables.Result {
        let out = arguments.first == "device" ? [] : ["--out", captures]
        return try await Executables.run("camrig", arguments + ["--rig", rigFile] + out, timeout: timeout)
    }

    /// The manifest of the capture in `directory`.
    static func manifest(in directory: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: directory + "/manifest.json"))) as? [String: Any])
    }

    /// The first set's frames of the capture in `directory`.
    static func frames(in directory: String) throws -> [[String: Any]] {
        try #require((try manifest(in: directory)["sets"] as? [[String: Any]])?.first?["frames"] as? [[String: Any]])
    }

    func remove() {
        agent.terminate()
        pki.remove()
        try? FileManager.default.removeItem(atPath: work)
    }
}

extension AgentClient {
    /// Every result of `session` the agent's spool offers, with its image (not acknowledged).
    func spooledResults(session: String) async throws -> [(WirePhotoResult, ByteBuffer)] {
        var fetch = WireFetchResults()
        fetch.sessionID = session
        var results: [(WirePhotoResult, ByteBuffer)] = []
        for try await message in stream(.fetchResults(fetch)) {
            if case .photoResult(let result) = message.envelope.body { results.append((result, message.payload ?? ByteBuffer())) }
        }
        return results
    }
}
