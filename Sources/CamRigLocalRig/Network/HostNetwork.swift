import CLinux
import Foundation
import NIOConcurrencyHelpers

/// Several hosts on one machine: one Linux network namespace per host, each joined by a veth pair to a
/// bridge in the caller's namespace, where the coordinator runs.
///
///     caller's namespace                   camrig-<pid>-<n>h0       camrig-<pid>-<n>h1
///     bridge crb<pid>g<n>  10.N.P.1/24  ──  veth ── eth0 10.N.P.10  ── eth0 10.N.P.11 …
///
/// Everything is built by `init` and removed by `shutdown()` (or `deinit`); namespaces left behind by a
/// process that died are removed the next time a network is built. A host can be cut off (its bridge
/// port goes down: packets are lost, connections stall as on a pulled cable) and brought back.
///
/// Needs root (`CAP_NET_ADMIN`) and iproute2; `unavailableReason` says why not, for tests to skip.
public final class HostNetwork: Sendable {
    /// One simulated host.
    public struct Host: Sendable {
        /// Its position in `hosts`.
        public var index: Int
        /// The network namespace, as `ip netns exec` takes it.
        public var namespace: String
        /// The host's address on the bridge.
        public var address: String
        /// The bridge side of its veth pair: down means cut off.
        public var bridgePort: String
        /// A loopback address of its own in the caller's namespace, where a relay to it can listen on
        /// the host's own port numbers (so that ports an agent announces hold through the relay).
        public var relayAddress: String
    }

    /// The hosts, in order.
    public let hosts: [Host]
    /// The bridge's address: the coordinator's address as the hosts see it.
    public let gateway: String
    /// The bridge's interface name.
    public let bridge: String
    private let removed = NIOLockedValueBox(false)
    /// The write end of the janitor's standard input; closing it (or this process dying) starts the clean-up.
    private let janitorLine: Int32

    /// Why namespaces cannot be built here, or nil when they can (checked once per process).
    public static let unavailableReason: String? = {
        guard geteuid() == 0 else { return "network namespaces need root (CAP_NET_ADMIN); run as root to use the multi-host harness" }
        guard let ip = ipPath else { return "iproute2's `ip` is not installed (apt-get install iproute2)" }
        let probe = "camrig-probe-\(getpid())"
        let result = run(ip, ["netns", "add", probe])
        defer { _ = run(ip, ["netns", "delete", probe]) }
        guard result.status == 0 else { return "`ip netns add` is not permitted here: \(result.output.trimmingCharacters(in: .whitespacesAndNewlines))" }
        return nil
    }()

    private static let serial = NIOLockedValueBox(0)

    static let ipPath: String? = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"].first { FileManager.default.isExecutableFile(atPath: $0) }

    /// Builds `count` hosts (at most 200).
    public init(hosts count: Int) throws {
        precondition((1...200).contains(count), "a host network has 1…200 hosts")
        if let reason = Self.unavailableReason { throw HostNetworkError(reason) }
        Self.removeStale()
        let pid = getpid()
        // Several networks may exist in one process: each gets its own names and subnet.
        let serial = Self.serial.withLockedValue { serial in
            defer { serial += 1 }
            return serial
        }
        let tag = "\(String(pid, radix: 16))g\(serial)"
        let octets = "\(200 + serial % 50).\(Int(pid) % 250)"
        let bridge = "crb\(tag)"
        self.bridge = bridge
        gateway = "10.\(octets).1"
        let hosts = (0..<count).map { index in
            Host(
                index: index, namespace: "camrig-\(pid)-\(serial)h\(index)", address: "10.\(octets).\(10 + index)", bridgePort: "crv\(tag)x\(index)",
                relayAddress: "127.\(octets).\(10 + index)"
            )
        }
        self.hosts = hosts
        // A janitor outlives this process to remove what it builds: the namespaces would otherwise stay behind
        // a process killed with SIGKILL (their processes die with it; a namespace is a mount and does not).
        janitorLine = Self.startJanitor(namespaces: hosts.map(\.namespace), bridge: bridge)
        do {
            try Self.ip("link", "add", bridge, "type", "bridge")
            try Self.ip("addr", "add", "\(gateway)/24", "dev", bridge)
            try Self.ip("link", "set", bridge, "up")
            for host in hosts {
                try Self.ip("netns", "add", host.namespace)
                try Self.ip("link", "add", host.bridgePort, "type", "veth", "peer", "name", "eth0", "netns", host.namespace)
                try Self.ip("link", "set", host.bridgePort, "master", bridge, "up")
                try Self.ip("-n", host.namespace, "addr", "add", "\(host.address)/24", "dev", "eth0")
                try Self.ip("-n", host.namespace, "link", "set", "eth0", "up")
                try Self.ip("-n", host.namespace, "link", "set", "lo", "up")
            }
        } catch {
            shutdown()
            throw error
        }
    }

    deinit { shutdown() }

    /// Removes the namespaces and the bridge. Safe to call more than once.
    public func shutdown() {
        let first = removed.withLockedValue { removed in
            defer { removed = true }
            return !removed
        }
        guard first, let ip = Self.ipPath else { return }
        for host in hosts { _ = Self.run(ip, ["netns", "delete", host.namespace]) }
        _ = Self.run(ip, ["link", "delete", bridge])
        if janitorLine >= 0 { close(janitorLine) }
    }

    /// Starts `sh` reading a pipe until its end of file, which comes when this process closes the pipe or
    /// dies, and then deleting `namespaces` and `bridge`. It leads a process group of its own, so that a
    /// terminal's Ctrl-C that ends this process leaves it to finish. Returns the pipe's write end (-1 when
    /// no janitor could be started: the next network built removes what this one leaves).
    private static func startJanitor(namespaces: [String], bridge: String) -> Int32 {
        guard let ip = ipPath else { return -1 }
        var line: [Int32] = [0, 0]
        guard camrig_cloexec_pipe(&line) == 0 else { return -1 }
        defer { close(line[0]) }
        let script = """
            cat >/dev/null
            for namespace in "$@"; do "$0" netns delete "$namespace" 2>/dev/null; done
            "$0" link delete \(bridge) 2>/dev/null
            exit 0
            """
        do {
            _ = try ChildProcess.spawn(
                "/bin/sh", ["-c", script, ip] + namespaces, stdin: .descriptor(line[0]), stdout: .null, stderr: .null,
                deathSignal: 0, newProcessGroup: true
            )
            return line[1]
        } catch {
            close(line[1])
            return -1
        }
    }

    /// Cuts `host` off the network: its link goes down, as if its cable were pulled. Connections stay
    /// open on both ends and stall; what is sent meanwhile is retransmitted once the host is back.
    public func cut(_ host: Host) throws { try Self.ip("link", "set", host.bridgePort, "down") }

    /// Brings a cut-off host back.
    public func restore(_ host: Host) throws { try Self.ip("link", "set", host.bridgePort, "up") }

    /// Limits `host`'s link to `megabitsPerSecond` each way (a token bucket on both ends of its veth), as a
    /// gigabit Ethernet port would.
    public func limitRate(_ host: Host, megabitsPerSecond: Int) throws {
        let tc = ["/usr/sbin/tc", "/sbin/tc"].first { FileManager.default.isExecutableFile(atPath: $0) }
        guard let tc else { throw HostNetworkError("iproute2's `tc` is not installed") }
        let bucket = ["root", "tbf", "rate", "\(megabitsPerSecond)mbit", "burst", "\(max(64, megabitsPerSecond / 8))kb", "latency", "20ms"]
        for arguments in [["qdisc", "replace", "dev", host.bridgePort] + bucket, ["-n", host.namespace, "qdisc", "replace", "dev", "eth0"] + bucket] {
            let result = Self.run(tc, arguments)
            guard result.status == 0 else {
                throw HostNetworkError("`tc \(arguments.joined(separator: " "))` failed (status \(result.status)): \(result.output.trimmingCharacters(in: .whitespacesAndNewlines))")
            }
        }
    }

    /// The command line that runs `executable` inside `host`'s namespace.
    public func command(on host: Host, _ executable: String, _ arguments: [String]) -> (executable: URL, arguments: [String]) {
        (URL(fileURLWithPath: Self.ipPath ?? "/usr/sbin/ip"), ["netns", "exec", host.namespace, executable] + arguments)
    }

    /// Namespaces and bridges of processes that no longer exist (a killed test run).
    static func removeStale() {
        guard let ip = ipPath else { return }
        let alive = { (pid: Int32) in kill(pid, 0) == 0 || errno == EPERM }
        for line in run(ip, ["netns", "list"]).output.split(separator: "\n") {
            let name = String(line.split(separator: " ").first ?? "")
            let parts = name.split(separator: "-")
            guard parts.count == 3, parts[0] == "camrig", let pid = Int32(parts[1]), !alive(pid) else { continue }
            _ = run(ip, ["netns", "delete", name])
        }
        for line in run(ip, ["-o", "link", "show", "type", "bridge"]).output.split(separator: "\n") {
            let fields = line.split(separator: ":", maxSplits: 2)
            guard fields.count >= 2 else { continue }
            let name = fields[1].trimmingCharacters(in: .whitespaces)
            guard name.hasPrefix("crb"), let pid = Int32(name.dropFirst(3).prefix { $0 != "g" }, radix: 16), !alive(pid) else { continue }
            _ = run(ip, ["link", "delete", name])
        }
    }

    @discardableResult
    static func ip(_ arguments: String...) throws -> String {
        guard let path = ipPath else { throw HostNetworkError("iproute2's `ip` is not installed") }
        let result = run(path, arguments)
        guard result.status == 0 else {
            throw HostNetworkError("`ip \(arguments.joined(separator: " "))` failed (status \(result.status)): \(result.output.trimmingCharacters(in: .whitespacesAndNewlines))")
        }
        return result.output
    }

    /// Runs a command to completion: its status, and its standard output and error together.
    static func run(_ executable: String, _ arguments: [String]) -> (status: Int32, output: String) {
        do {
            let result = try ToolRunner.run(executable, arguments, timeout: 30)
            return (result.status, result.stdout + result.stderr)
        } catch {
            return (-1, "\(error)")
        }
    }
}

/// Why a host network could not be built or changed: the failed `ip` command and what it said.
public struct HostNetworkError: Error, CustomStringConvertible {
    /// What failed, with what `ip` said.
    public var description: String
    /// An error that says `description`.
    public init(_ description: String) { self.description = description }
}
