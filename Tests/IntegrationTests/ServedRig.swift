import CamRigLocalRig
import CamRigTestSupport
import Foundation
import Testing

/// A running `camrig serve --loopback N`: its address, sign-in token and TLS directory, as it announced
/// them on its first line. Killed (with its loopback agents, which die with it) when the test lets go of it.
final class ServedRig: Sendable {
    let process: ChildProcess
    let url: String
    let token: String
    let tlsDir: String
    /// Its `--out`, unless the arguments gave another.
    let captures: URL
    private let logFile: URL

    /// `camrig serve --loopback N` with `arguments` added (they may give an --out of their own) and
    /// `environment` over this process's.
    convenience init(agents: Int, _ arguments: [String] = [], environment: [String: String] = [:]) async throws {
        try await self.init(["serve", "--loopback", "\(agents)"] + arguments, tlsDir: nil, environment: environment)
    }

    /// `camrig serve --enroll` for the rig whose CA is in `tlsDir` (a rig file with no agents: they join
    /// by enrollment), signed in with an operator token from that CA; `arguments` are added.
    convenience init(enrolling tlsDir: String, _ arguments: [String] = []) async throws {
        let rigFile = tlsDir + "-rig.yaml"
        try "tls_dir: \(tlsDir)\nagents: []\n".write(toFile: rigFile, atomically: true, encoding: .utf8)
        try await self.init(["serve", "--rig", rigFile, "--enroll"] + arguments, tlsDir: tlsDir)
    }

    private init(_ arguments: [String], tlsDir directory: String?, environment: [String: String] = [:]) async throws {
        let captures = FileManager.default.temporaryDirectory.appendingPathComponent("camrig-serve-\(UUID().uuidString)")
        let logFile = URL(fileURLWithPath: captures.path + ".log")
        _ = FileManager.default.createFile(atPath: logFile.path, contents: nil)
        let log = try FileHandle(forWritingTo: logFile)
        defer { try? log.close() }
        let output = Pipe()
        let out = arguments.contains("--out") ? [] : ["--out", captures.path]
        process = try ChildProcess.spawn(
            Executables.url("camrig").path,
            arguments + ["--listen", "127.0.0.1:0", "--json", "--log-level", "info"] + out,
            environment: environment.isEmpty ? nil : ProcessInfo.processInfo.environment.merging(environment) { $1 },
            stdout: .descriptor(output.fileHandleForWriting.fileDescriptor), stderr: .descriptor(log.fileDescriptor))
        try? output.fileHandleForWriting.close()
        (self.captures, self.logFile) = (captures, logFile)
        let announcement = try await Task.detached { () -> Data in
            var line = Data()
            while let byte = try output.fileHandleForReading.read(upToCount: 1), !byte.isEmpty, byte != Data("\n".utf8) { line.append(byte) }
            return line
        }.value
        let said = (try? String(contentsOf: logFile, encoding: .utf8)) ?? ""
        let fields = try #require(
            try? JSONSerialization.jsonObject(with: announcement) as? [String: String], "camrig serve did not announce itself: \(said.suffix(2000))")
        url = try #require(fields["url"])
        if let directory {
            tlsDir = directory
            let issued = try await Executables.run("camrig", ["certs", "token", "--dir", directory, "--name", "test-operator", "--role", "operator"], timeout: 30)
            token = issued.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        } else {
            (token, tlsDir) = (try #require(fields["token"]), try #require(fields["tls_dir"]))
        }
    }

    /// SIGTERM, as systemd stops it: it releases its cameras and stops its loopback agents. Its exit, or
    /// nil when it did not stop within 20 s.
    func stop() async -> ChildProcess.Termination? {
        process.terminate()
        let stopped = try? await eventually(timeout: .seconds(20), pollingEvery: .milliseconds(100)) { !process.isRunning }
        return stopped == true ? process.termination : nil
    }

    /// What it wrote to standard error.
    func log() -> String { (try? String(contentsOf: logFile, encoding: .utf8)) ?? "" }

    var base: String { url.hasSuffix("/") ? String(url.dropLast()) : url }
    var ca: String { tlsDir + "/ca.pem" }

    deinit {
        process.send(SIGKILL)
        try? FileManager.default.removeItem(at: captures)
        try? FileManager.default.removeItem(at: logFile)
    }
}
