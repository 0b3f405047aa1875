import CamRigViews
import Foundation

/// The capture jobs of the service, newest last (the latest `limit` kept): each goes from running to
/// finished or failed once, its progress only grows, and every change is an event to publish.
struct JobTable: Sendable {
    let limit: Int
    private(set) var jobs: [CaptureJob] = []

    init(limit: Int = 100) {
        self.limit = limit
    }

    func job(_ id: String) -> CaptureJob? { jobs.last { $0.id == id } }

    /// The job running now, if any.
    var running: CaptureJob? { jobs.last { $0.state == .running } }

    /// A new running job.
    mutating func start(id: String, kind: JobKind, by name: String, at time: Date) -> (CaptureJob, ServiceEvent) {
        let job = CaptureJob(id: id, kind: kind, started: Self.timestamp(time), requestedBy: name)
        jobs.append(job)
        if jobs.count > limit { jobs.removeFirst(jobs.count - limit) }
        return (job, .captureStarted(job: id, kind: kind, by: name))
    }

    /// Progress of a running job (never backwards); nil when the job is over or unknown.
    mutating func progress(_ id: String, fraction: Double, message: String) -> ServiceEvent? {
        guard let index = runningIndex(id) else { return nil }
        jobs[index].progress = max(jobs[index].progress, min(1, fraction))
        jobs[index].message = message
        return .captureProgress(job: id, progress: jobs[index].progress, message: message)
    }

    /// A running job finished with `summary`.
    mutating func finish(_ id: String, summary: CaptureOutput, contactSheet: String?, at time: Date) -> ServiceEvent? {
        guard let index = runningIndex(id) else { return nil }
        jobs[index].state = .finished
        jobs[index].progress = 1
        jobs[index].finished = Self.timestamp(time)
        jobs[index].captureId = summary.id
        jobs[index].summary = summary
        jobs[index].contactSheet = contactSheet
        jobs[index].message = String(format: "%d set(s), skew max %.1f µs", summary.sets, summary.maxSkewUs)
        return .captureFinished(job: id, kind: jobs[index].kind, capture: summary.id, contactSheet: contactSheet, summary: jobs[index].message)
    }

    /// A running job failed for `reason`.
    mutating func fail(_ id: String, reason: String, at time: Date) -> ServiceEvent? {
        guard let index = runningIndex(id) else { return nil }
        jobs[index].state = .failed
        jobs[index].finished = Self.timestamp(time)
        jobs[index].error = reason
        jobs[index].message = "failed"
        return .captureFailed(job: id, kind: jobs[index].kind, reason: reason)
    }

    private func runningIndex(_ id: String) -> Int? {
        jobs.lastIndex { $0.id == id && $0.state == .running }
    }

    static func timestamp(_ time: Date) -> String { ISO8601DateFormatter().string(from: time) }
}
