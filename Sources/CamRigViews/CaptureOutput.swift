import CamRigText
import CamRigCapture
import Foundation

/// What a capture command prints: the capture's summary and per-camera figures.
public struct CaptureOutput: Codable, Sendable {
    public struct Camera: Codable, Sendable {
        public var camera: String
        public var framesDelivered: Int
        public var droppedFrames: Int
        public var unmatchedFrames: Int
        public var offsetUs: Double
        public var errorBoundUs: Double
        public var error: String?
        /// `locked`, `locking`, `cannot-lock`, …; absent when the capture was not phase-locked.
        public var phaseLock: String?
        public var phaseErrorUs: Double?
        public var phaseLockReason: String?
    }

    public var id: String
    public var kind: String
    public var directory: String
    public var fps: Double?
    public var sets: Int
    public var completeSets: Int
    public var incompleteSets: Int
    public var framesDelivered: Int
    public var droppedFrames: Int
    public var unmatchedFrames: Int
    public var skewP50Us: Double
    public var skewP99Us: Double
    public var maxSkewUs: Double
    public var cameras: [Camera]
    /// `complete`, `incomplete` or `in_progress`.
    public var state: String
    /// Results missing that their agents may still hold, and those known lost.
    public var waitingResults: Int
    public var lostResults: Int
    /// Photos delivered as deferred proxies whose finals are still to come.
    public var awaitingFinals: Int
    /// Skew in real time, where the truth is known (`camrig demo`).
    public var trueSkew: TrueSkew?
    /// On-host recordings: each camera's video files and how its track ended.
    public var recording: [Track]?
    /// On-host recordings: files still on their hosts.
    public var filesOnHosts: Int?

    public struct Track: Codable, Sendable {
        public var camera: String
        public var codec: String
        /// `complete`, `cut_short`, `failed`, `recording` or `unknown`.
        public var state: String
        public var frames: Int
        public var gaps: Int
        public var firstGridIndex: Int?
        public var lastGridIndex: Int?
        /// Video files, relative to the capture's folder.
        public var videos: [String]
        public var bytes: UInt64
        public var error: String?
    }

    public struct TrueSkew: Codable, Sendable {
        public var p50Us: Double
        public var maxUs: Double

        public init(p50Us: Double, maxUs: Double) {
            self.p50Us = p50Us
            self.maxUs = maxUs
        }
    }

    public init(_ manifest: CaptureManifest, directory: String) {
        id = manifest.id
        kind = manifest.kind
        self.directory = directory
        fps = manifest.framesPerSecond
        sets = manifest.summary.sets
        completeSets = manifest.summary.completeSets
        incompleteSets = manifest.summary.incompleteSets
        framesDelivered = manifest.summary.framesDelivered
        droppedFrames = manifest.summary.droppedFrames
        unmatchedFrames = manifest.summary.unmatchedFrames
        skewP50Us = Double(manifest.summary.skewP50Ns) / 1000
        skewP99Us = Double(manifest.summary.skewP99Ns) / 1000
        maxSkewUs = Double(manifest.summary.skewMaxNs) / 1000
        state = (manifest.state ?? .complete).rawValue
        waitingResults = manifest.collectable.count
        lostResults = (manifest.missing ?? []).count - manifest.collectable.count
        awaitingFinals = manifest.awaitingFinals.count
        if let host = manifest.hostRecording {
            recording = host.tracks.map { track in
                Track(
                    camera: manifest.cameras.indices.contains(track.camera) ? manifest.cameras[track.camera].name : "\(track.agent)/\(track.device)",
                    codec: track.codec, state: track.state.rawValue, frames: track.frames, gaps: track.gaps, firstGridIndex: track.firstGridIndex,
                    lastGridIndex: track.lastGridIndex, videos: track.videos.map(\.name), bytes: track.files.reduce(0) { $0 + $1.size }, error: track.error)
            }
            filesOnHosts = host.onHosts.count
        }
        cameras = manifest.cameras.map {
            Camera(
                camera: $0.name, framesDelivered: $0.framesDelivered, droppedFrames: $0.framesDropped, unmatchedFrames: $0.framesUnmatched,
                offsetUs: $0.clock.offsetNs / 1000, errorBoundUs: $0.clock.errorBoundNs / 1000, error: $0.error,
                phaseLock: $0.phaseLock?.state, phaseErrorUs: $0.phaseLock.map { Double($0.phaseErrorNs) / 1000 },
                phaseLockReason: $0.phaseLock?.reason)
        }
    }

    public var text: String {
        var lines = ["\(kind) \(id) in \(directory) (\(state))"]
        lines.append("  sets \(sets) (complete \(completeSets), incomplete \(incompleteSets)); frames \(framesDelivered) delivered, \(droppedFrames) dropped, \(unmatchedFrames) unmatched")
        lines.append("  skew p50 \(String(format: "%.1f", skewP50Us)) µs, p99 \(String(format: "%.1f", skewP99Us)) µs, max \(String(format: "%.1f", maxSkewUs)) µs (coordinator clock; each frame's uncertainty adds the clock error)")
        if let trueSkew {
            lines.append("  true skew p50 \(String(format: "%.1f", trueSkew.p50Us)) µs, max \(String(format: "%.1f", trueSkew.maxUs)) µs (real time, from the injected clock errors)")
        }
        let phaseLocked = cameras.contains { $0.phaseLock != nil }
        lines.append(table(
            ["  CAMERA", "FRAMES", "DROPPED", "UNMATCHED", "OFFSET µs", "±µs"] + (phaseLocked ? ["PHASE", "PHASE ERR µs"] : []),
            cameras.map { camera in
                ["  " + camera.camera, "\(camera.framesDelivered)", "\(camera.droppedFrames)", "\(camera.unmatchedFrames)", String(format: "%.1f", camera.offsetUs), String(format: "%.1f", camera.errorBoundUs)]
                    + (phaseLocked ? [camera.phaseLock ?? "-", camera.phaseErrorUs.map { String(format: "%.1f", $0) } ?? "-"] : [])
            }
        ))
        if let recording {
            lines.append(table(
                ["  CAMERA", "CODEC", "STATE", "FRAMES", "GAPS", "MB", "FILES"],
                recording.map { track in
                    ["  " + track.camera, track.codec, track.state, "\(track.frames)", "\(track.gaps)", String(format: "%.1f", Double(track.bytes) / 1e6), track.videos.joined(separator: " ")]
                }
            ))
        }
        if let filesOnHosts, filesOnHosts > 0 {
            lines.append("  \(filesOnHosts) file(s) still on their hosts: `camrig captures offload \(id)` fetches them (they stay on the hosts until then)")
        }
        for camera in cameras { if let error = camera.error { lines.append("  \(camera.camera): \(error)") } }
        if waitingResults > 0 {
            lines.append("  \(waitingResults) result(s) still held by their agents: they are collected into this capture by the next capture to this directory once the agents are back, or by `camrig captures recover`")
        }
        if awaitingFinals > 0 {
            lines.append("  \(awaitingFinals) photo(s) delivered as deferred proxies: their agents make the finals when idle; `camrig captures finalize \(id)` fetches them now")
        }
        for camera in cameras where camera.phaseLock != nil && camera.phaseLock != "locked" {
            lines.append("  \(camera.camera): not phase-locked (\(camera.phaseLock ?? "")): \(camera.phaseLockReason ?? "no reason given"); its frames may be up to a frame period off the others'")
        }
        return lines.joined(separator: "\n")
    }
}
