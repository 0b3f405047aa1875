import Foundation

extension Process {
    /// Waits up to `grace` for the process to exit, polling without holding a thread; then SIGKILL.
    func reap(grace: Duration) async {
        let deadline = ContinuousClock.now + grace
        while isRunning && ContinuousClock.now < deadline && !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(10))
        }
        if isRunning { kill(processIdentifier, SIGKILL) }
        while isRunning { try? await Task.sleep(for: .milliseconds(2)) }
        waitUntilExit()  // returns at once: the process is gone; this collects its status
    }

    /// Waits up to `grace` for the process to exit, blocking the calling thread; then SIGKILL.
    func reapBlocking(grace: Duration) {
        let deadline = ContinuousClock.now + grace
        while isRunning && ContinuousClock.now < deadline { usleep(10_000) }
        if isRunning { kill(processIdentifier, SIGKILL) }
        waitUntilExit()
    }
}
