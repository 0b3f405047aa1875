import CamRigObjectStore
import CamRigText
import Foundation

/// The soak's on-host recordings, summed: how many went where through which fault, every camera's
/// grid instants delivered or reported, and what was left behind (files on the hosts, multipart uploads
/// in the store).
struct HostRecordingAccounting: Encodable, Sendable {
    var recordingsToFolder = 0
    var recordingsToStore = 0
    /// `camrig record` runs that began no capture (an agent down or cut off as it connected, say).
    var notStarted = 0
    var notStartedReasons: [String: Int] = [:]
    var storeOutages = 0
    var storeOutageSeconds = 0.0
    var coordinatorKillsWhileRecording = 0
    var coordinatorKillsWhileOffloading = 0
    /// `camrig captures recover` runs, during the soak and at its end.
    var recoverRuns = 0
    /// Recordings `recover` had not settled within two minutes of their command (finished at the end).
    var settledOnlyAtTheEnd = 0
    /// `camrig record` runs that had not ended three minutes after their recording should have.
    var hung = 0
    /// Every recording's frames and files, summed.
    var total = AuditCounts()
    /// Files and folders in the agents' recordings folders at the end: must be 0.
    var leftOnHosts = 0
    /// Multipart uploads begun and neither completed nor aborted in the store at the end: must be 0.
    var multipartUploadsLeft = 0
    var lastRecoverErrors: [String] = []
    /// Each recording: frames delivered against those expected.
    var recordings: [HostRecordingAudit] = []

    init(runs: [HostRecordingRun], audits: [HostRecordingAudit], leftOnHosts: Int, multipartUploadsLeft: Int, finalRecoverRuns: Int) {
        for run in runs {
            if let reason = run.notStarted {
                notStarted += 1
                notStartedReasons[SoakBenchmark.reasonClass(reason), default: 0] += 1
            }
            if let seconds = run.outageSeconds {
                storeOutages += 1
                storeOutageSeconds += seconds
            }
            if run.coordinatorKilled {
                if run.fault == .coordinatorKilledRecording { coordinatorKillsWhileRecording += 1 } else { coordinatorKillsWhileOffloading += 1 }
            }
            recoverRuns += run.recoverRuns
            if run.captureID != nil, !run.settled { settledOnlyAtTheEnd += 1 }
            if run.hung { hung += 1 }
            if let error = run.recoverError { lastRecoverErrors.append(error) }
        }
        recoverRuns += finalRecoverRuns
        for audit in audits {
            if audit.destination == .folder { recordingsToFolder += 1 } else { recordingsToStore += 1 }
            total.add(audit.tally)
        }
        self.leftOnHosts = leftOnHosts
        self.multipartUploadsLeft = multipartUploadsLeft
        recordings = audits
    }

    var text: [String] {
        var lines = [
            "on-host recordings: \(recordingsToFolder) offloaded to a folder, \(recordingsToStore) to the S3 store; \(notStarted) not started; "
                + "\(storeOutages) store outages (\(String(format: "%.0f", storeOutageSeconds)) s), coordinator killed \(coordinatorKillsWhileRecording)× while recording and \(coordinatorKillsWhileOffloading)× while offloading; "
                + "\(recoverRuns) `captures recover` runs, \(settledOnlyAtTheEnd) recordings settled only at the end, \(hung) hung",
            table(
                ["FRAMES EXPECTED", "DELIVERED", "IN GAPS", "LOST (REPORTED)", "IN LOST FILES", "UNACCOUNTED", "DUPLICATES"],
                [["\(total.framesExpected)", "\(total.framesDelivered)", "\(total.framesInGaps)", "\(total.framesLost)", "\(total.framesInLostFiles)", "\(total.framesUnaccounted)", "\(total.duplicates)"]]),
            table(
                ["FILES", "MISSING", "LOST (REPORTED)", "LISTED ON HOSTS", "LEFT ON HOSTS", "MULTIPART UPLOADS LEFT"],
                [["\(total.files)", "\(total.filesMissing)", "\(total.filesLost)", "\(total.filesOnHosts)", "\(leftOnHosts)", "\(multipartUploadsLeft)"]]),
        ]
        let short = recordings.filter { $0.tally.framesDelivered != $0.tally.framesExpected }
        lines.append("recordings with every frame delivered: \(recordings.count - short.count) of \(recordings.count); the others (delivered/expected):")
        for audit in short {
            lines.append(
                "  \(audit.id) (\(audit.destination.rawValue), \(audit.fault?.rawValue ?? "?")): \(audit.tally.framesDelivered)/\(audit.tally.framesExpected), "
                    + "\(audit.tally.framesInGaps) in gaps, \(audit.tally.framesLost) lost, \(audit.tally.framesUnaccounted) unaccounted; \(audit.state)")
        }
        for (reason, count) in total.reasons.sorted(by: { $0.value > $1.value }) { lines.append("  \(count)× \(reason)") }
        for (reason, count) in notStartedReasons.sorted(by: { $0.value > $1.value }) { lines.append("  not started \(count)×: \(reason)") }
        for error in Set(lastRecoverErrors).sorted() { lines.append("  recover failed once: \(error)") }
        return lines
    }
}
