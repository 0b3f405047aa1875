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
            guard let client = try? store.client() else { return [] }
            defer { Task { await client.shutdown() } }
            let keys = ((try? await client.list(prefix: SoakObjectStore.prefix + "/")) ?? []).map(\.key)
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
            guard let client = try? store.client() else { return nil }
            defer { Task { await client.shutdown() } }
            guard let buffer = try? await client.get("\(SoakObjectStore.prefix)/\(id)/manifest.json") else { return nil }
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

/// One on-host recording read back: every camera's grid instants delivered (a frame in a file at the
/// destination), reported as a gap or lost (the frame table says so, the track says why), or neither.
struct HostRecordingAudit: Encodable, Sendable {
    var id: String
    var destination: HostRecordingDestination
    var fault: HostRecordingFault?
    var state: String
    var cameras: Int
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
    var filesOnHosts = 0
    /// Listed as offloaded, yet not at the destination with its size: must be 0.
    var filesMissing = 0
    var filesLost = 0
    var reasons: [String: Int] = [:]

    init(_ manifest: CaptureManifest, destination: HostRecordingDestination, fault: HostRecordingFault?, delivered: [String: UInt64]) {
        id = manifest.id
        self.destination = destination
        self.fault = fault
        state = manifest.state?.rawValue ?? "?"
        let recording = manifest.hostRecording
        cameras = recording?.tracks.count ?? 0
        let grid = recording?.gridCount ?? 0
        for track in recording?.tracks ?? [] {
            framesExpected += grid
            files += track.files.count
            var absent = 0
            var lostFiles = 0
            for file in track.files {
                if let lost = file.lost {
                    lostFiles += 1
                    reasons["file lost: " + SoakBenchmark.reasonClass(lost), default: 0] += 1
                } else if !file.offloaded {
                    filesOnHosts += 1
                    absent += 1
                } else if delivered[file.name] != file.size {
                    filesMissing += 1
                    absent += 1
                }
            }
            filesLost += lostFiles
            let lost = track.lost ?? 0
            framesInGaps += track.gaps
            framesLost += lost
            duplicates += track.duplicates
            if lost > 0 || track.state != .complete {
                reasons["\(track.state): " + SoakBenchmark.reasonClass(track.error ?? "no reason given"), default: 0] += max(lost, 1)
            }
            let reported = track.frames + track.gaps + lost
            if absent > 0 {
                // A file neither here nor reported lost: none of the track's frames counts as delivered.
                framesNotDelivered += track.frames
                framesUnaccounted += track.frames + max(0, grid - reported)
            } else if lostFiles > 0 {
                framesInLostFiles += track.frames
                framesUnaccounted += max(0, grid - reported)
            } else {
                framesDelivered += track.frames
                framesUnaccounted += max(0, grid - reported)
            }
        }
    }
}
