import Foundation

/// Runs blocking work (child processes, `ip`, waits on pipes) on a thread of its own and waits for it
/// without holding a thread of the caller's executor.
public func onDedicatedThread<T: Sendable>(_ name: String, _ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread { continuation.resume(with: Result { try body() }) }
        thread.name = name
        thread.start()
    }
}
