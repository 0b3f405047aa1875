import CamRigCLI
import CamRigLocalRig
import Foundation
import NIOCore

/// chrony as the clock-synchronization baseline: a server in the coordinator's namespace and one
/// client per host namespace, each client reaching the server through a `LinkRelay` with the same
/// conditions as that host's CamRig traffic (reversed: the client sends first).
///
/// Every instance runs with `-x`: it measures and estimates but never adjusts the system clock, which
/// all namespaces share. So the truth for every client is an offset of zero. The clients mark the
/// server `noselect`, so that chronyd does not steer its own notion of time by it either (with `-x` it
/// would otherwise correct a virtual clock and log offsets relative to that): each `statistics.log`
/// "Est. offset" is then chrony's estimate of the raw offset, and so its estimation error.
final class ChronyBaseline: @unchecked Sendable {
    static let chronyd = ["/usr/sbin/chronyd", "/sbin/chronyd", "/usr/bin/chronyd"].first { FileManager.default.isExecutableFile(atPath: $0) }

    let work: URL
    private var processes: [ChildProcess] = []
    private var relays: [LinkRelay] = []
    let logDirectories: [URL]

    /// Starts the server and one client per host of `rig`; clients poll every 2^`pollLog2` s.
    init(rig: NetworkedRig, conditions: PathConditions, pollLog2: Int, seed: UInt64, work: URL) throws {
        guard let chronyd = Self.chronyd else { throw CommandFailure("chronyd is not installed (apt-get install chrony); it is the sync scenario's baseline") }
        self.work = work
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        let (probe, port) = try Baselines.listen()  // a free port number for the server (UDP and TCP ports are distinct, but free TCP is a good guess)
        close(probe)
        let server = """
            port \(port)
            bindaddress 127.0.0.1
            local stratum 1
            allow all
            cmdport 0
            bindcmdaddress /
            pidfile \(work.path)/server.pid
            """
        try server.write(to: work.appendingPathComponent("server.conf"), atomically: true, encoding: .utf8)
        processes.append(try Self.start(URL(fileURLWithPath: chronyd), ["-x", "-u", "root", "-d", "-f", work.appendingPathComponent("server.conf").path], log: work.appendingPathComponent("server.log")))
        var logs: [URL] = []
        for member in rig.members {
            let relay = try LinkRelay(
                listenHost: rig.network.gateway, target: try SocketAddress(ipAddress: "127.0.0.1", port: Int(port)),
                conditions: conditions.reversed, seed: seed &+ UInt64(member.host.index) &* 7919, group: rig.relayGroup
            )
            relays.append(relay)
            let logs_ = work.appendingPathComponent("log-\(member.name)")
            try FileManager.default.createDirectory(at: logs_, withIntermediateDirectories: true)
            logs.append(logs_)
            let client = """
                server \(rig.network.gateway) port \(relay.address.port!) iburst minpoll \(pollLog2) maxpoll \(pollLog2) noselect
                cmdport 0
                bindcmdaddress /
                pidfile \(work.path)/\(member.name).pid
                logdir \(logs_.path)
                log statistics measurements
                """
            let file = work.appendingPathComponent("\(member.name).conf")
            try client.write(to: file, atomically: true, encoding: .utf8)
            let command = rig.network.command(on: member.host, chronyd, ["-x", "-u", "root", "-d", "-f", file.path])
            processes.append(try Self.start(command.executable, command.arguments, log: work.appendingPathComponent("\(member.name).log")))
        }
        logDirectories = logs
    }

    private static func start(_ executable: URL, _ arguments: [String], log: URL) throws -> ChildProcess {
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        let handle = try FileHandle(forWritingTo: log)
        defer { try? handle.close() }
        return try ChildProcess.spawn(executable.path, arguments, stdout: .descriptor(handle.fileDescriptor), stderr: .descriptor(handle.fileDescriptor))
    }

    func stop() {
        for process in processes { process.reapBlocking(grace: .zero) }
        for relay in relays { relay.shutdown() }
        processes = []
        relays = []
    }

    deinit { stop() }

    /// Every client's offset estimates (microseconds) logged at or after `since`.
    func estimates(since: Date) -> [[Double]] {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss"
        return logDirectories.map { directory in
            let text = (try? String(contentsOf: directory.appendingPathComponent("statistics.log"), encoding: .utf8)) ?? ""
            return text.split(separator: "\n").compactMap { line -> Double? in
                // Date Time IP-address Std-dev'n Est-offset Offset-sd Diff-freq Est-skew Stress Ns Bs Nr Asym
                let fields = line.split(separator: " ", omittingEmptySubsequences: true)
                guard fields.count >= 5, let date = formatter.date(from: "\(fields[0]) \(fields[1])"), date >= since,
                    let offset = Double(fields[4])
                else { return nil }
                return offset * 1e6
            }
        }
    }

    /// The server's and clients' logs, for a failure message.
    func logs() -> String {
        ((try? FileManager.default.contentsOfDirectory(at: work, includingPropertiesForKeys: nil)) ?? [])
            .filter { $0.pathExtension == "log" }
            .map { "\($0.lastPathComponent): \(((try? String(contentsOf: $0, encoding: .utf8)) ?? "").suffix(1500))" }
            .joined(separator: "\n")
    }
}
