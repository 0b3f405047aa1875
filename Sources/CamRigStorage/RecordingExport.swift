import CamRigCapture
import CamRigDeviceModel
import CamRigFiles
import CamRigImage
import CamRigMedia
import Foundation
import NIOCore

/// What users take out of an on-host recording: per-set image folders (for photogrammetry tools) or
/// per-camera videos (for motion-capture tools), both trimmed to the sets every camera has a frame in.
public enum RecordingExport {
    /// Which part of the recording.
    public enum Selection: Sendable, Equatable {
        case all
        /// Grid indexes (the manifest's set indexes), inclusive.
        case sets(ClosedRange<Int>)
        /// Seconds from the recording's first grid instant, inclusive.
        case seconds(ClosedRange<Double>)
    }

    /// How exported images are stored.
    public enum ImageFormat: String, Sendable, CaseIterable {
        /// JPEG for JPEG-coded videos (the bytes as recorded), DNG for raw Bayer videos, PNG otherwise.
        case auto
        case png, jpeg, dng
    }

    public struct ExportError: Error, CustomStringConvertible {
        public var description: String
        init(_ description: String) { self.description = description }
    }

    /// The first and last set, within `selection`, that every camera has a frame in.
    public static func span(of manifest: CaptureManifest, selection: Selection) throws -> ClosedRange<Int> {
        guard let recording = manifest.hostRecording else { throw ExportError("\(manifest.id) is not a recording made on the hosts") }
        guard recording.isOffloaded, !manifest.sets.isEmpty else {
            throw ExportError("\(manifest.id) still has files on its hosts: `camrig captures offload \(manifest.id)` fetches them first")
        }
        let wanted: ClosedRange<Int>
        switch selection {
        case .all: wanted = 0...(manifest.sets.count - 1)
        case .sets(let range): wanted = range
        case .seconds(let range):
            let first = Int((range.lowerBound * 1e9 / recording.gridPeriodNs).rounded(.up))
            let last = Int((range.upperBound * 1e9 / recording.gridPeriodNs).rounded(.down))
            guard first <= last else { throw ExportError("no grid instant lies within \(range.lowerBound)…\(range.upperBound) s") }
            wanted = first...last
        }
        let complete = manifest.sets.filter { $0.complete && wanted.contains($0.index) }.map(\.index)
        guard let first = complete.first, let last = complete.last else {
            throw ExportError("no set within \(wanted.lowerBound)…\(wanted.upperBound) has a frame of every camera (\(manifest.summary.completeSets) of \(manifest.sets.count) sets are complete)")
        }
        return first...last
    }

    public struct Report: Sendable, Encodable {
        public var directory: String
        public var firstSet: Int
        public var lastSet: Int
        /// Image folders written (per-set export), or frames per camera's video (video export).
        public var sets: Int
        public var files: [String]
        /// Sets in the span left out because a camera lacks a frame there (per-set export only).
        public var skippedIncompleteSets: [Int]
    }

    /// Writes `DIR/set-NNNNNN/STEM.EXT` for every set complete on every camera within the span.
    public static func frames(
        of manifest: CaptureManifest, in capture: URL, into directory: URL, format: ImageFormat = .auto, selection: Selection = .all,
        progress: (@Sendable (Int, Int) -> Void)? = nil
    ) throws -> Report {
        let span = try span(of: manifest, selection: selection)
        let recording = manifest.hostRecording!
        let sets = manifest.sets.filter { span.contains($0.index) }
        let complete = sets.filter(\.complete)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        var written: [String] = []
        for track in recording.tracks {
            // The frames this camera contributes, by video file and place in it.
            var wanted: [String: [Int: Int]] = [:]  // file → videoFrame → set index
            for set in complete {
                guard let frame = set.frames.first(where: { $0.camera == track.camera }), let number = frame.videoFrame else { continue }
                wanted[frame.file, default: [:]][number] = set.index
            }
            for (file, frames) in wanted.sorted(by: { $0.key < $1.key }) {
                let reader = try MediaReader(path: capture.appendingPathComponent(file).path)
                let last = frames.keys.max() ?? -1
                var number = 0
                while number <= last {
                    guard let (bytes, _) = try reader.next() else {
                        throw ExportError("\(file) ends at frame \(number), before frame \(last) its frame table lists")
                    }
                    defer { number += 1 }
                    guard let setIndex = frames[number] else { continue }
                    let folder = directory.appendingPathComponent(String(format: "set-%06d", setIndex))
                    try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
                    let (ext, data) = try image(bytes, reader: reader, format: format, model: manifest.cameras[track.camera].model)
                    let url = folder.appendingPathComponent("\(track.stem).\(ext)")
                    try DurableFile.write(data, to: url, guarantee: .atomic)
                    written.append(url.path)
                    progress?(written.count, complete.count * recording.tracks.count)
                }
            }
        }
        return Report(
            directory: directory.path, firstSet: span.lowerBound, lastSet: span.upperBound, sets: complete.count, files: written,
            skippedIncompleteSets: sets.filter { !$0.complete }.map(\.index))
    }

    private static func image(_ bytes: [UInt8], reader: MediaReader, format: ImageFormat, model: String) throws -> (String, [UInt8]) {
        let info = reader.info
        let bayer = info.codec == .raw && info.pixelFormat == PixelFormat.bayerRGGB8.rawValue
        var chosen = format
        if chosen == .auto { chosen = info.codec == .mjpeg ? .jpeg : (bayer ? .dng : .png) }
        switch chosen {
        case .jpeg where info.codec == .mjpeg:
            return ("jpg", bytes)
        case .dng:
            guard bayer else { throw ExportError("DNG is made from raw Bayer recordings; this one is \(info.codec.rawValue)") }
            let layout = DeviceFormat(
                pixelFormat: .bayerRGGB8, dimensions: Dimensions(width: UInt32(info.width), height: UInt32(info.height)), frameRateRanges: [],
                bytesPerLine: UInt32(info.width))
            var buffer = ByteBufferAllocator().buffer(capacity: bytes.count)
            buffer.writeBytes(bytes)
            let frame = CapturedFrame(
                deviceID: model, sequence: 0, timestamp: 0, timestampMarks: .startOfExposure, format: layout, bytes: buffer,
                metadata: CaptureMetadata(settings: CameraSettings()))
            return ("dng", Array(buffer: PhotoEncoder.dng(frame, model: model)))
        case .jpeg:
            let rgb = try reader.decodeRGB()
            return ("jpg", Array(buffer: try PhotoEncoder.jpeg(rgb: rgb, width: info.width, height: info.height, quality: 92)))
        case .png, .auto:
            let rgb = try reader.decodeRGB()
            let png = try rgb.withUnsafeBytes {
                try PNGEncoder.encode(width: info.width, height: info.height, channels: .rgb8, pixels: $0, bytesPerRow: info.width * 3, compressionLevel: 1)
            }
            return ("png", png)
        }
    }

    /// Camera `camera`'s frame of set `set` as an image: JPEG (as recorded for MJPEG videos, made for the
    /// others) for viewing; nil when the set has no frame of that camera.
    public static func setImage(of manifest: CaptureManifest, in capture: URL, set index: Int, camera: Int) throws -> [UInt8]? {
        try setImage(of: manifest, set: index, camera: camera) { try MediaReader(path: capture.appendingPathComponent($0).path) }
    }

    /// Camera `camera`'s frame of set `index` (the manifest's sets in order), if the set has one.
    public static func frame(of manifest: CaptureManifest, set index: Int, camera: Int) -> CaptureManifest.Frame? {
        manifest.sets.indices.contains(index) ? manifest.sets[index].frames.first { $0.camera == camera } : nil
    }

    /// `setImage(of:in:set:camera:)` for a capture whose files are elsewhere than a folder (an object
    /// store's): `open` opens the named video file of the capture.
    public static func setImage(of manifest: CaptureManifest, set index: Int, camera: Int, open: (String) throws -> MediaReader) throws -> [UInt8]? {
        guard manifest.hostRecording != nil, let frame = frame(of: manifest, set: index, camera: camera), let number = frame.videoFrame, !frame.file.isEmpty
        else { return nil }
        let reader = try open(frame.file)
        for _ in 0..<number {
            guard try reader.skip() else { throw ExportError("\(frame.file) ends before frame \(number)") }
        }
        guard let (bytes, _) = try reader.next() else { throw ExportError("\(frame.file) ends before frame \(number)") }
        if reader.info.codec == .mjpeg { return bytes }
        let rgb = try reader.decodeRGB()
        return Array(buffer: try PhotoEncoder.jpeg(rgb: rgb, width: reader.info.width, height: reader.info.height, quality: 85))
    }

    /// Writes `DIR/STEM.mkv` per camera: its frames from the span's first set to its last (a camera's
    /// frames beyond one video segment give `STEM.partN.mkv` files).
    public static func videos(of manifest: CaptureManifest, in capture: URL, into directory: URL, selection: Selection = .all) throws -> Report {
        let span = try span(of: manifest, selection: selection)
        let recording = manifest.hostRecording!
        guard let firstSet = manifest.sets.first(where: { $0.index == span.lowerBound }),
            let lastSet = manifest.sets.first(where: { $0.index == span.upperBound })
        else { throw ExportError("the manifest lacks sets \(span.lowerBound) and \(span.upperBound)") }
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        var written: [String] = []
        var counts: [Int] = []
        for track in recording.tracks {
            guard let first = firstSet.frames.first(where: { $0.camera == track.camera }),
                let last = lastSet.frames.first(where: { $0.camera == track.camera }),
                let firstNumber = first.videoFrame, let lastNumber = last.videoFrame
            else { continue }
            let videos = track.videos.map(\.name)
            guard let firstSegment = videos.firstIndex(of: first.file), let lastSegment = videos.firstIndex(of: last.file) else { continue }
            var frames = 0
            for segment in firstSegment...lastSegment {
                let from = segment == firstSegment ? firstNumber : 0
                let to = segment == lastSegment ? lastNumber : Int.max / 2
                let name = firstSegment == lastSegment ? "\(track.stem).mkv" : "\(track.stem).part\(segment - firstSegment + 1).mkv"
                let output = directory.appendingPathComponent(name)
                try? FileManager.default.removeItem(at: output)
                let upper = to == Int.max / 2 ? (track.frames - 1) : to
                frames += try MediaFile.copy(capture.appendingPathComponent(videos[segment]).path, frames: from...max(from, upper), into: output.path)
                written.append(output.path)
            }
            counts.append(frames)
        }
        return Report(directory: directory.path, firstSet: span.lowerBound, lastSet: span.upperBound, sets: counts.max() ?? 0, files: written, skippedIncompleteSets: [])
    }
}
