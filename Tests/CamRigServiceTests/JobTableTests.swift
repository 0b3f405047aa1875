import CamRigViews
import Foundation
import Testing

@testable import CamRigService

@Suite("Job table", .timeLimit(.minutes(1)))
struct JobTableTests {
    static func summary(_ id: String) throws -> CaptureOutput {
        let json = """
            {"id": "\(id)", "kind": "photo", "directory": "/tmp/\(id)", "sets": 1, "complete_sets": 1, "incomplete_sets": 0,
             "frames_delivered": 2, "dropped_frames": 0, "unmatched_frames": 0, "skew_p50_us": 1, "skew_p99_us": 2, "max_skew_us": 2.5,
             "cameras": [], "state": "complete", "waiting_results": 0, "lost_results": 0, "awaiting_finals": 0}
            """
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        return try decoder.decode(CaptureOutput.self, from: Data(json.utf8))
    }

    @Test("a job runs, its progress only grows, and it finishes once")
    func lifecycle() throws {
        var table = JobTable()
        let (job, started) = table.start(id: "job-1", kind: .photo, by: "operator", at: Date())
        #expect(job.state == .running && job.progress == 0)
        #expect(started == .captureStarted(job: "job-1", kind: .photo, by: "operator"))
        #expect(table.running?.id == "job-1")
        #expect(table.progress("job-1", fraction: 0.5, message: "half") == .captureProgress(job: "job-1", progress: 0.5, message: "half"))
        #expect(table.progress("job-1", fraction: 0.2, message: "late report") == .captureProgress(job: "job-1", progress: 0.5, message: "late report"))
        #expect(table.job("job-1")?.progress == 0.5)
        let finished = table.finish("job-1", summary: try Self.summary("cap-1"), contactSheet: "contact-sheet.png", at: Date())
        #expect(finished == .captureFinished(job: "job-1", kind: .photo, capture: "cap-1", contactSheet: "contact-sheet.png", summary: "1 set(s), skew max 2.5 µs"))
        #expect(table.job("job-1")?.state == .finished && table.job("job-1")?.progress == 1 && table.job("job-1")?.captureId == "cap-1")
        #expect(table.running == nil)
        // Over is over: no progress, no second ending.
        #expect(table.progress("job-1", fraction: 0.9, message: "x") == nil)
        #expect(table.fail("job-1", reason: "late", at: Date()) == nil)
        #expect(table.job("job-1")?.state == .finished)
    }

    @Test("a failed job keeps its reason; unknown jobs change nothing; the table keeps the latest")
    func failureAndLimit() {
        var table = JobTable(limit: 3)
        _ = table.start(id: "job-1", kind: .recording, by: "a", at: Date())
        #expect(table.fail("job-1", reason: "camera a/cam0 stopped", at: Date()) == .captureFailed(job: "job-1", kind: .recording, reason: "camera a/cam0 stopped"))
        #expect(table.job("job-1")?.error == "camera a/cam0 stopped" && table.job("job-1")?.state == .failed)
        #expect(table.progress("job-9", fraction: 1, message: "") == nil)
        for index in 2...5 { _ = table.start(id: "job-\(index)", kind: .photo, by: "a", at: Date()) }
        #expect(table.jobs.map(\.id) == ["job-3", "job-4", "job-5"])
    }
}
