import CLinux
import Foundation
import NIOConcurrencyHelpers

/// A program started by this process, which cannot outlive it.
///
/// Every child is started and then waited for (`waitpid`) by a thread of its own, never by a thread of
/// Swift's cooperative pool, so nothing here touches Foundation's run loops (waiting on Foundation's
/// `Process` from a cooperative thread crashes debug builds). The child gets `deathSignal` (SIGKILL by default) when that
/// thread ends, which it does only once the child has exited, or when this process dies, even by SIGKILL.
/// Descriptors other than the three given are closed in the child, so a pipe another child reads never
/// stays open through this one.
///
/// Waiting is `exit()` (async, no thread held), `waitBlocking()` (for synchronous callers), or `reap(grace:)`.
public final class ChildProcess: Sendable {
    /// How a child ended.
    public enum Termination: Sendable, Equatable, CustomStringConvertible {
        /// It exited with this status.
        case exited(Int32)
        /// A signal ended it.
        case signalled(Int32)

        /// The exit status, or the signal's number (as Foundation's `Process.terminationStatus`).
        public var status: Int32 {
            switch self {
            case .exited(let status), .signalled(let status): status
            }
        }

        /// "exit status N" or "signal N".
        public var description: String {
            switch self {
            case .exited(let status): "exit status \(status)"
            case .signalled(let signal): "signal \(signal)"
            }
        }
    }

    /// Where one of the child's standard streams goes.
    public enum Stream: Sendable {
        /// /dev/null.
        case null
        /// This process's own stream of the same number.
        case inherit
        /// A descriptor of this process (left open here; the caller closes it after `spawn`).
        case descriptor(Int32)
    }

    /// Why a child could not be started.
    public struct SpawnError: Error, CustomStringConvertible {
        /// The program.
        public var executable: String
        /// The errno of `fork` or `execve`.
        public var code: Int32
        /// "cannot run PATH: REASON".
        public var description: String { "cannot run \(executable): \(String(decoding: strerrorBytes(code), as: UTF8.self))" }
    }

    private struct State {
        var termination: Termination?
        var waiters: [CheckedContinuation<Termination, Never>] = []
    }

    /// The child's process id.
    public let processIdentifier: pid_t
    /// The program that runs.
    public let executable: String
    private let state = NIOLockedValueBox(State())
    /// Left once the child has exited: what blocking waiters wait on (the termination itself is in `state`).
    private let running = DispatchGroup()

    private init(pid: pid_t, executable: String) {
        self.processIdentifier = pid
        self.executable = executable
        running.enter()
    }

    /// Starts `executable` with `arguments`; `environment` nil keeps this process's.
    ///
    /// With `deathSignal` zero the child outlives this process (for a janitor that must clean up after it).
    public static func spawn(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil,
        stdin: Stream = .null, stdout: Stream = .inherit, stderr: Stream = .inherit,
        deathSignal: Int32 = SIGKILL, newProcessGroup: Bool = false
    ) throws -> ChildProcess {
        let started = DispatchSemaphore(value: 0)
        let outcome = NIOLockedValueBox<Result<ChildProcess, SpawnError>?>(nil)
        let descriptors = [(stdin, 0), (stdout, 1), (stderr, 2)].map { stream, own -> Int32 in
            switch stream {
            case .null: -1
            case .inherit: Int32(own)
            case .descriptor(let fd): fd
            }
        }
        let environmentLines = environment.map { $0.map { "\($0.key)=\($0.value)" }.sorted() }
        // The thread that forks is the one whose end sends the death signal: it waits for the child and
        // ends only after it.
        let thread = Thread {
            let pid = withCStrings([executable] + arguments) { argv in
                if let environmentLines {
                    return withCStrings(environmentLines) { envp in
                        camrig_spawn(executable, argv, envp, descriptors[0], descriptors[1], descriptors[2], deathSignal, newProcessGroup ? 1 : 0)
                    }
                }
                return camrig_spawn(executable, argv, nil, descriptors[0], descriptors[1], descriptors[2], deathSignal, newProcessGroup ? 1 : 0)
            }
            guard pid > 0 else {
                outcome.withLockedValue { $0 = .failure(SpawnError(executable: executable, code: -pid)) }
                started.signal()
                return
            }
            let child = ChildProcess(pid: pid, executable: executable)
            outcome.withLockedValue { $0 = .success(child) }
            started.signal()
            child.waitForExit()
        }
        thread.name = "child \(URL(fileURLWithPath: executable).lastPathComponent)"
        thread.start()
        started.wait()
        return try outcome.withLockedValue { $0! }.get()
    }

    /// Blocks the child's own thread in `waitpid` until it exits, then wakes everyone waiting.
    private func waitForExit() {
        var status: Int32 = 0
        while waitpid(processIdentifier, &status, 0) < 0 {
            guard errno == EINTR else {
                status = 0x7F00  // not ours to wait for any more: count it as exit status 127
                break
            }
        }
        // WIFSIGNALED / WTERMSIG / WEXITSTATUS, which Swift does not import.
        let signal = status & 0x7F
        let termination: Termination = signal != 0 && signal != 0x7F ? .signalled(signal) : .exited((status >> 8) & 0xFF)
        let waiters = state.withLockedValue { state in
            state.termination = termination
            defer { state.waiters = [] }
            return state.waiters
        }
        running.leave()
        for waiter in waiters { waiter.resume(returning: termination) }
    }

    /// How the child ended, or nil while it runs.
    public var termination: Termination? { state.withLockedValue { $0.termination } }

    /// Whether the child still runs (it has not been reaped yet).
    public var isRunning: Bool { termination == nil }

    /// The exit status or the ending signal's number; 0 while the child runs.
    public var terminationStatus: Int32 { termination?.status ?? 0 }

    /// Sends `signal` to the child while it runs (never to a reused pid: the child is reaped only here).
    public func send(_ signal: Int32) {
        state.withLockedValue { state in
            if state.termination == nil { _ = kill(processIdentifier, signal) }
        }
    }

    /// SIGTERM.
    public func terminate() { send(SIGTERM) }

    /// Waits without holding a thread until the child has exited.
    @discardableResult
    public func exit() async -> Termination {
        await withCheckedContinuation { continuation in
            let known = state.withLockedValue { state -> Termination? in
                if state.termination == nil { state.waiters.append(continuation) }
                return state.termination
            }
            if let known { continuation.resume(returning: known) }
        }
    }

    /// Blocks the calling thread until the child has exited (for synchronous callers, off the cooperative pool).
    @discardableResult
    public func waitBlocking() -> Termination {
        running.wait()
        return termination!
    }

    /// Blocks up to `timeout` for the child to exit: whether it did.
    public func waitBlocking(timeout: Duration) -> Bool {
        running.wait(timeout: .now() + max(0, timeout.seconds)) == .success
    }

    /// Waits up to `grace` for the child to exit by itself (no thread held), then kills it and waits for that.
    @discardableResult
    public func reap(grace: Duration) async -> Termination {
        if grace > .zero, termination == nil {
            await withTaskGroup(of: Bool.self) { group in
                group.addTask { await self.exit(); return true }
                group.addTask {
                    try? await Task.sleep(for: grace)
                    return false
                }
                if await group.next() == false { send(SIGKILL) }
                group.cancelAll()
            }
        } else {
            send(SIGKILL)
        }
        return await exit()
    }

    /// `reap` for synchronous callers: blocks up to `grace`, then kills the child and waits for it.
    @discardableResult
    public func reapBlocking(grace: Duration) -> Termination {
        if !waitBlocking(timeout: grace) { send(SIGKILL) }
        return waitBlocking()
    }
}

/// Calls `body` with a NULL-terminated C array of `strings`, valid only during the call.
private func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R) -> R {
    var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) }
    pointers.append(nil)
    defer { for pointer in pointers { free(pointer) } }
    return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
}

/// The text of `strerror(code)`, copied.
private func strerrorBytes(_ code: Int32) -> [UInt8] {
    guard let text = strerror(code) else { return Array("errno \(code)".utf8) }
    return Array(UnsafeBufferPointer(start: UnsafeRawPointer(text).assumingMemoryBound(to: UInt8.self), count: strlen(text)))
}
