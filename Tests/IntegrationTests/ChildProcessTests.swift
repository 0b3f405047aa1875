import CamRigLocalRig
import CamRigTestSupport
import Foundation
import Testing

/// Child processes started by the harness: how they end, and that none outlives its parent.
@Suite("Child processes", .serialized, .timeLimit(.minutes(5)))
struct ChildProcessTests {
    @Test("a child's exit status, its ending signal, and a program that cannot run")
    func outcomes() async throws {
        let exited = try ChildProcess.spawn("/bin/sh", ["-c", "exit 3"])
        #expect(await exited.exit() == .exited(3))
        #expect(!exited.isRunning && exited.terminationStatus == 3)

        let sleeper = try ChildProcess.spawn("/bin/sleep", ["30"])
        #expect(sleeper.isRunning)
        #expect(await sleeper.reap(grace: .zero) == .signalled(SIGKILL))

        // A child that ignores SIGTERM is killed once the grace period is over.
        let said = Pipe()
        let stubborn = try ChildProcess.spawn(
            "/bin/sh", ["-c", "trap '' TERM; echo ready; sleep 30"], stdout: .descriptor(said.fileHandleForWriting.fileDescriptor))
        try said.fileHandleForWriting.close()
        // Once it says so, it ignores SIGTERM (before, SIGTERM would end the shell).
        let ready = try await Task.detached { try said.fileHandleForReading.read(upToCount: 6) }.value
        #expect(ready == Data("ready\n".utf8))
        stubborn.terminate()
        #expect(await stubborn.reap(grace: .milliseconds(200)) == .signalled(SIGKILL))

        #expect(throws: ChildProcess.SpawnError.self) { try ChildProcess.spawn("/nonexistent/camrig-tool", []) }
    }

    @Test("a child gets only the descriptors it is given: a pipe another child reads reaches end of file")
    func descriptorsDoNotLeak() async throws {
        let pipe = Pipe()
        let reader = try ChildProcess.spawn("/bin/cat", [], stdin: .descriptor(pipe.fileHandleForReading.fileDescriptor), stdout: .null)
        try pipe.fileHandleForReading.close()
        // Started while this process holds the pipe's write end: it must not inherit it.
        let bystander = try ChildProcess.spawn("/bin/sleep", ["30"])
        defer { bystander.reapBlocking(grace: .zero) }
        try pipe.fileHandleForWriting.close()
        let ended = try await eventually(timeout: .seconds(10)) { !reader.isRunning }
        #expect(ended, "cat never saw the end of its input: another child holds the pipe open")
        #expect(reader.termination == .exited(0))
    }

    @Test(
        "camrig-bench sync runs to the end in this build, and killed with SIGKILL it leaves no process or namespace behind",
        .enabled(if: HostNetwork.unavailableReason == nil, "\(HostNetwork.unavailableReason ?? "")"),
        .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/sbin/chronyd"), "chronyd is installed by ./scripts/test"))
    func benchLeavesNothingBehind() async throws {
        let bench = Executables.url("camrig-bench").path
        let arguments = ["sync", "--agents", "2", "--triggers", "5", "--warm-up", "1", "--asymmetry-ms", "0", "--json"]

        let completed = try await ToolRunner.run(bench, arguments, timeout: 180)
        #expect(completed.status == 0, "camrig-bench sync failed:\n\(completed.stderr.suffix(3000))")
        let result = try JSONSerialization.jsonObject(with: Data(completed.stdout.utf8)) as? [String: Any]
        #expect((result?["runs"] as? [Any])?.count == 1, "\(completed.stdout.suffix(2000))")

        let log = FileManager.default.temporaryDirectory.appendingPathComponent("camrig-bench-\(UUID().uuidString).log")
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: log) }
        let handle = try FileHandle(forWritingTo: log)
        let killed = try ChildProcess.spawn(bench, arguments, stdout: .null, stderr: .descriptor(handle.fileDescriptor))
        try handle.close()
        let pid = killed.processIdentifier
        // Mid-run: its hosts' namespaces are built and its agents and chronyd instances run.
        var started: Set<pid_t> = []
        let running = try await eventually(timeout: .seconds(120), pollingEvery: .milliseconds(100)) {
            started = Self.descendants(of: pid)
            return await Self.namespaces(of: pid).count == 2 && started.count >= 5
        }
        killed.send(SIGKILL)
        await killed.exit()
        let said = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
        try #require(running, "camrig-bench never got its namespaces and children up; it said:\n\(said.suffix(2000))")

        let clean = try await eventually(timeout: .seconds(10), pollingEvery: .milliseconds(50)) {
            let (namespaces, bridges) = (await Self.namespaces(of: pid), await Self.bridges(of: pid))
            return namespaces.isEmpty && bridges.isEmpty && started.allSatisfy { !Self.alive($0) }
        }
        let (namespaces, bridges) = (await Self.namespaces(of: pid), await Self.bridges(of: pid))
        #expect(clean, """
            left behind: namespaces \(namespaces), bridges \(bridges), \
            processes \(started.filter(Self.alive).map { "\($0) \(Self.command($0))" })
            """)
    }

    // MARK: What /proc and iproute2 show

    /// Every process below `pid` (children, their children, …) right now.
    static func descendants(of pid: pid_t) -> Set<pid_t> {
        var parents: [pid_t: [pid_t]] = [:]
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let child = pid_t(entry), let parent = parent(of: child) else { continue }
            parents[parent, default: []].append(child)
        }
        var found: Set<pid_t> = []
        var queue = [pid]
        while let next = queue.popLast() {
            for child in parents[next] ?? [] where found.insert(child).inserted { queue.append(child) }
        }
        return found
    }

    /// The parent of `pid` (`/proc/PID/stat` field 4), or nil when it is gone.
    static func parent(of pid: pid_t) -> pid_t? {
        guard let fields = stat(pid), fields.count > 1 else { return nil }
        return pid_t(fields[1])
    }

    /// Whether `pid` runs (a zombie does not).
    static func alive(_ pid: pid_t) -> Bool {
        guard let fields = stat(pid), let state = fields.first else { return false }
        return state != "Z" && state != "X"
    }

    /// The fields of `/proc/PID/stat` after the command name.
    static func stat(_ pid: pid_t) -> [Substring]? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let end = text.lastIndex(of: ")") else { return nil }
        return text[text.index(after: end)...].split(separator: " ")
    }

    static func command(_ pid: pid_t) -> String {
        ((try? String(contentsOfFile: "/proc/\(pid)/cmdline", encoding: .utf8)) ?? "").replacingOccurrences(of: "\0", with: " ")
    }

    /// The harness's namespaces for the process `pid` (`camrig-PID-…`).
    static func namespaces(of pid: pid_t) async -> [String] {
        let listed = ((try? await ToolRunner.run("/usr/sbin/ip", ["netns", "list"]))?.stdout) ?? ""
        return listed.split(separator: "\n").compactMap { $0.split(separator: " ").first.map(String.init) }
            .filter { $0.hasPrefix("camrig-\(pid)-") }
    }

    /// The harness's bridges for the process `pid` (`crb<pid in hex>g…`).
    static func bridges(of pid: pid_t) async -> [String] {
        let listed = ((try? await ToolRunner.run("/usr/sbin/ip", ["-o", "link", "show", "type", "bridge"]))?.stdout) ?? ""
        return listed.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: ":", maxSplits: 2)
            return fields.count >= 2 ? fields[1].trimmingCharacters(in: .whitespaces) : nil
        }.filter { $0.hasPrefix("crb\(String(pid, radix: 16))g") }
    }
}
