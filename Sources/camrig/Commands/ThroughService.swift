import CamRigCLI
import CamRigServiceClient
import CamRigViews
import Foundation

/// What the capture commands share when they go through a running `camrig serve`.
enum ThroughService {
    /// Waits for a capture job the service runs, showing its progress on standard error (unless
    /// `quiet`), and returns its summary; a failed job is an error naming why.
    static func finish(_ job: CaptureJob, on client: ServiceClient, quiet: Bool) async throws -> CaptureOutput {
        var job = job
        var shown = ""
        while job.state == .running {
            try await Task.sleep(for: .milliseconds(250))
            job = try await client.get("/api/v1/jobs/\(job.id)")
            let line = String(format: "%@ %3.0f%%: %@", job.kind.rawValue, job.progress * 100, job.message)
            if !quiet, line != shown {
                FileHandle.standardError.write(Data(((isatty(STDERR_FILENO) == 1 ? "\r" : "") + line + (isatty(STDERR_FILENO) == 1 ? "" : "\n")).utf8))
                shown = line
            }
        }
        if !quiet && isatty(STDERR_FILENO) == 1 && !shown.isEmpty { FileHandle.standardError.write(Data("\n".utf8)) }
        guard job.state == .finished, let summary = job.summary else {
            throw CommandFailure("the service's \(job.kind.rawValue) failed: \(job.error ?? "no reason given")")
        }
        return summary
    }
}
