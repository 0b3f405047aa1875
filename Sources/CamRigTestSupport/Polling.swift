import Foundation

/// Waits until `condition` holds, checking it every `interval`, for at most `timeout`.
///
/// For tests that wait on something another thread or process does (frames arriving, an agent noticing a
/// dropped link): the wait has a deadline, so a condition that never comes true fails the test instead of
/// hanging it. The caller records the failure, naming what it waited for:
///
///     let arrived = try await eventually(timeout: .seconds(10)) { collected.count >= 100 }
///     #expect(arrived, "100 frames within 10 s")
///
/// - Returns: `true` as soon as `condition` returns `true`; `false` once `timeout` has passed without it.
/// - Throws: what `condition` throws, and `CancellationError` when the waiting task is cancelled.
public func eventually(
    timeout: Duration,
    pollingEvery interval: Duration = .milliseconds(20),
    isolation: isolated (any Actor)? = #isolation,
    _ condition: () async throws -> Bool
) async throws -> Bool {
    let clock = ContinuousClock()
    let deadline = clock.now.advanced(by: timeout)
    while true {
        if try await condition() { return true }
        if clock.now >= deadline { return false }
        try await Task.sleep(for: interval)
    }
}

/// How many files below `folder` (at any depth) end in `.EXTENSION`: what a test polls to know how far a
/// recording has got (its frames are spilled to `STEM.raw` files as they arrive).
public func fileCount(under folder: URL, withExtension pathExtension: String) -> Int {
    guard let files = FileManager.default.enumerator(at: folder, includingPropertiesForKeys: nil) else { return 0 }
    return files.reduce(0) { count, file in count + ((file as? URL)?.pathExtension == pathExtension ? 1 : 0) }
}
