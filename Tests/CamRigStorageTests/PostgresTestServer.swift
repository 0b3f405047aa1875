import CamRigStorage
import Foundation
import Testing

/// A PostgreSQL server of the tests' own: `scripts/postgres start DIR` in a new directory, stopped and
/// removed by `stop()`. Starting fails (and so do the tests that need it) when the script does.
final class PostgresTestServer: Sendable {
    let directory: URL
    /// `postgres://camrig:PASSWORD@127.0.0.1:PORT/camrig`, as the script printed it.
    let url: String

    /// The server the suite marked `.postgresServer` started for its tests.
    @TaskLocal static var current: PostgresTestServer?

    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("scripts/postgres")

    private init(directory: URL, url: String) {
        self.directory = directory
        self.url = url
    }

    /// Starts a new server (initdb, start, role and database; a few seconds).
    static func start() async throws -> PostgresTestServer {
        // Under the temporary directory: the server's user must be able to reach it.
        let directory = URL(fileURLWithPath: "/tmp").appendingPathComponent("camrig-test-pg-\(UUID().uuidString.prefix(8))")
        let (status, output) = try await run(["start", directory.path])
        let line = output.split(separator: "\n").last { $0.hasPrefix("CAMRIG_TEST_POSTGRES_URL=") }
        guard status == 0, let line else {
            _ = try? await run(["stop", directory.path])
            try? FileManager.default.removeItem(at: directory)
            throw StorageError("scripts/postgres start \(directory.path) failed (exit status \(status)):\n\(output)")
        }
        return PostgresTestServer(directory: directory, url: String(line.dropFirst("CAMRIG_TEST_POSTGRES_URL=".count)))
    }

    /// Stops the server, keeping its directory (`resume` starts it again, on the same port).
    func pause() async throws {
        let (status, output) = try await Self.run(["stop", directory.path])
        guard status == 0 else { throw StorageError("scripts/postgres stop \(directory.path) failed (exit status \(status)):\n\(output)") }
    }

    /// Starts the server `pause` stopped.
    func resume() async throws {
        let (status, output) = try await Self.run(["start", directory.path])
        guard status == 0 else { throw StorageError("scripts/postgres start \(directory.path) failed (exit status \(status)):\n\(output)") }
    }

    /// Stops the server and removes its directory.
    func stop() async {
        _ = try? await Self.run(["stop", directory.path])
        try? FileManager.default.removeItem(at: directory)
    }

    /// Runs the script with `arguments`; its exit status and what it printed (both streams). The output
    /// goes through a file, not a pipe, which the server it starts would hold open; the script is waited
    /// for with `waitpid` on a thread of Dispatch's (Foundation's `Process` is waited for through run
    /// loops, which a test's threads do not run).
    private static func run(_ arguments: [String]) async throws -> (Int32, String) {
        try await BlockingWork.run {
            let log = NSTemporaryDirectory() + "camrig-pg-script-\(UUID().uuidString).log"
            defer { unlink(log) }
            var actions = posix_spawn_file_actions_t()
            posix_spawn_file_actions_init(&actions)
            defer { posix_spawn_file_actions_destroy(&actions) }
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
            posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
            posix_spawn_file_actions_adddup2(&actions, 1, 2)
            let argv = ([script.path] + arguments).map { strdup($0) } + [nil]
            defer { for argument in argv { free(argument) } }
            var pid: pid_t = 0
            let spawned = posix_spawn(&pid, script.path, &actions, nil, argv, environ)
            guard spawned == 0 else { throw StorageError("cannot run \(script.path): \(String(cString: strerror(spawned)))") }
            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0 {
                guard errno == EINTR else { throw StorageError("cannot wait for \(script.path): \(String(cString: strerror(errno)))") }
            }
            // The exit status, or 128 and the signal that ended it, as a shell says.
            let exit = status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
            return (exit, (try? String(contentsOfFile: log, encoding: .utf8)) ?? "")
        }
    }
}

/// Starts one `PostgresTestServer` for the suite it marks, and stops it after the suite's tests.
struct PostgresServerScope: SuiteTrait, TestScoping {
    var isRecursive: Bool { false }

    func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        let server = try await PostgresTestServer.start()
        do {
            try await PostgresTestServer.$current.withValue(server) { try await function() }
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }
}

extension Trait where Self == PostgresServerScope {
    /// A PostgreSQL server for the suite's tests (`PostgresTestServer.current`).
    static var postgresServer: Self { PostgresServerScope() }
}
