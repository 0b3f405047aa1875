import Dispatch

/// Runs blocking file and image work on Dispatch's worker threads and awaits it there.
///
/// `CaptureStore` is called from Swift concurrency, whose few cooperative threads (one per core) also
/// run lease renewal and stream consumers; an fsync or a large PNG held on one of them stalls the
/// others. Dispatch adds threads while its workers block, and the image encoder already spreads one
/// image over the cores from there.
public enum BlockingWork {
    public static func run<Value: Sendable>(_ work: @escaping @Sendable () throws -> Value) async throws -> Value {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global(qos: .userInitiated).async {
                continuation.resume(with: Result { try work() })
            }
        }
    }
}
