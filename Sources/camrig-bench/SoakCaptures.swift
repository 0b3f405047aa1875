import CamRigCapture
import CamRigObjectStore
import Foundation
import NIOCore

/// The on-host recordings' captures as they stand in the folder (`ROOT/ID/manifest.json`) and in the
/// store (`recordings/ID/manifest.json`), read back independently of the command that wrote them.
enum SoakCaptures {
    /// The ids of the captures at `destination`.
    static func ids(_ destination: HostRecordingDestination, folder: URL, store: SoakObjectStore) async -> Set<String> {
        switch destination {
        case .folder:
            let names = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
            return Set(names.filter { FileManager.default.fileExists(atPath: folder.appendingPathComponent("\($0)/manifest.json").path) })
        case .store:
            let listed = try? await store.withClient { client in try await client.list(prefix: SoakObjectStore.prefix + "/") }
            let keys = (listed ?? []).map(\.key)
            return Set(keys.filter { $0.hasSuffix("/manifest.json") }.compactMap { $0.split(separator: "/").dropFirst().first.map(String.init) })
        }
    }

    /// Capture `id`'s manifest at `destination`, nil when it cannot be read.
    static func manifest(_ id: String, destination: HostRecordingDestination, folder: URL, store: SoakObjectStore) async -> CaptureManifest? {
        let bytes: Data
        switch destination {
        case .folder:
            guard let data = try? Data(contentsOf: folder.appendingPathComponent("\(id)/manifest.json")) else { return nil }
            bytes = data
        case .store:
            let read = try? await store.withClient { client in try await client.get("\(SoakObjectStore.prefix)/\(id)/manifest.json") }
            guard let buffer = read else { return nil }
            bytes = Data(buffer.readableBytesView)
        }
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        return try? decoder.decode(CaptureManifest.self, from: bytes)
    }

    /// Whether the capture is done with its hosts: no longer in progress or offloading, and every file
    /// offloaded and acknowledged, or reported lost.
    static func isSettled(_ manifest: CaptureManifest) -> Bool {
        guard manifest.state != .inProgress, manifest.state != .offloading, let recording = manifest.hostRecording else { return false }
        return recording.tracks.allSatisfy { track in track.state.hasEnded && track.files.allSatisfy { $0.isSettled || $0.lost != nil } }
    }

    /// The sizes of what is at `destination` under capture `id`, by file name.
    static func delivered(_ id: String, destination: HostRecordingDestination, folder: URL, client: S3Client) async -> [String: UInt64] {
        switch destination {
        case .folder:
            let directory = folder.appendingPathComponent(id)
            var sizes: [String: UInt64] = [:]
            for name in (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? [] {
                let size = (try? FileManager.default.attributesOfItem(atPath: directory.appendingPathComponent(name).path)[.size] as? NSNumber)?.uint64Value
                sizes[name] = size ?? 0
            }
            return sizes
        case .store:
            let prefix = "\(SoakObjectStore.prefix)/\(id)/"
            let listed = (try? await client.list(prefix: prefix)) ?? []
            return Dictionary(listed.map { (String($0.key.dropFirst(prefix.count)), $0.size) }, uniquingKeysWith: { first, _ in first })
        }
    }
}

/// Frames and files of on-host recordings, delivered or reported: one recording's, or the soak's sum.
struct AuditCounts: Encodable, Sendable {
    /// Grid instants × cameras.
    var framesExpected = 0
    /// Frames in files that are at the destination, whole (size as their host recorded).
    var framesDelivered = 0
    /// Grid instants a camera delivered no frame for, listed as gaps in its frame table.
    var framesInGaps = 0
    /// Grid instants flagged lost (the agent stopped before reaching them, or a frame never reached its disk).
    var framesLost = 0
    /// Frames of tracks with a file reported lost (the capture says why).
    var framesInLostFiles = 0
    /// Frames of tracks with a file neither at the destination nor reported lost (still on a host, or
    /// missing): counted as unaccounted too.
    var framesNotDelivered = 0
    /// Instants neither delivered nor reported: must be 0.
    var framesUnaccounted = 0
    var duplicates = 0
    var files = 0
    /// Files the capture still lists as on their hosts: must be 0 once settled.
    var filesOnHosts = 0
    /// Listed as offloaded, yet not at the destination with its size: must be 0.
    var filesMissing = 0
    var filesLost = 0
    var reasons: [String: Int] = [:]

    mutating func add(_ other: AuditCounts) {
        framesExpected += other.framesExpected
        framesDelivered += other.framesDelivered
        framesInGaps += other.framesInGaps
        framesLost += other.framesLost
        framesInLostFiles += other.framesInLostFiles
        framesNotDelivered += other.framesNotDelivered
        framesUnaccounted += other.framesUnaccounted
        duplicates += other.duplicates
        files += other.files
        filesOnHosts += other.filesOnHosts
        filesMissing += other.filesMissing
        filesLost += other.filesLost
        reasons.merge(other.reasons, uniquingKeysWith: +)
    }
}

/// One on-host recording read back: every camera's grid instants delivered (a frame in a file at the
/// destination), reported as a gap or lost (the frame table says so, the track says why), or neither.
struct HostRecordingAudit: Encodable, Sendable {
    var id: String
    var destination: HostRecordingDestination
    var fault: HostRecordingFault?
    var state: String
    var cameras: Int
    var tally = AuditCounts()

    init(_ manifest: CaptureManifest, destination: HostRecordingDestination, fault: HostRecordingFault?, delivered: [String: UInt64]) {
        id = manifest.id
        self.destination = destination
        self.fault = fault
        state = manifest.state?.rawValue ?? "?"
        let recording = manifest.hostRecording
        cameras = recording?.tracks.count ?? 0
        let grid = recording?.gridCount ?? 0
        for track in recording?.tracks ?? [] {
            tally.framesExpected += grid
            tally.files += track.files.count
            var absent = 0
            var lostFiles = 0
            for file in track.files {
                if let lost = file.lost {
                    lostFiles += 1
                    tally.reasons["file lost: " + SoakBenchmark.reasonClass(lost), default: 0] += 1
                } else if !file.offloaded {
                    tally.filesOnHosts += 1
                    absent += 1
                } else if delivered[file.name] != file.size {
                    tally.filesMissing += 1
                    absent += 1
                }
            }
            tally.filesLost += lostFiles
            let lost = track.lost ?? 0
            tally.framesInGaps += track.gaps
            tally.framesLost += lost
            tally.duplicates += track.duplicates
            if lost > 0 || track.state != .complete {
                tally.reasons["\(track.state): " + SoakBenchmark.reasonClass(track.error ?? "no reason given"), default: 0] += max(lost, 1)
            }
            let reported = track.frames + track.gaps + lost
            if absent > 0 {
                // A file neither here nor reported lost: none of the track's frames counts as delivered.
                tally.framesNotDelivered += track.frames
                tally.framesUnaccounted += track.frames + max(0, grid - reported)
            } else if lostFiles > 0 {
                tally.framesInLostFiles += track.frames
                tally.framesUnaccounted += max(0, grid - reported)
            } else {
                tally.framesDelivered += track.frames
                tally.framesUnaccounted += max(0, grid - reported)
            }
        }
    }
}
