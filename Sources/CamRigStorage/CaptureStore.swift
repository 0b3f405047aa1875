import CamRigCapture
import CamRigDevices
import Foundation

/// A captures directory: one subdirectory per capture (frames and `manifest.json`) and
/// `catalog.sqlite` listing them all.
///
/// As a `CaptureSink` it does its file I/O and image encoding on Dispatch's worker threads, so callers
/// in Swift concurrency never block on the disk; the synchronous methods block their caller.
public struct CaptureStore: Sendable {
    public let root: URL
    public let catalog: CaptureCatalog

    public init(root: URL) throws {
        self.root = root
        do {
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        } catch {
            throw StorageError(
                "cannot create the captures directory \(root.path): \(error.localizedDescription); choose another with --out"
            )
        }
        catalog = try CaptureCatalog(path: root.appendingPathComponent("catalog.sqlite").path)
    }

    /// A new, empty capture directory named after the time and `kind` (unique even within a second).
    public func makeCaptureDirectory(kind: String, date: Date = Date()) throws -> (id: String, url: URL) {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyyMMdd-HHmmss"
        let base = "\(formatter.string(from: date))-\(kind)"
        for attempt in 0..<1000 {
            let id = attempt == 0 ? base : "\(base)-\(attempt + 1)"
            let url = root.appendingPathComponent(id)
            if FileManager.default.fileExists(atPath: url.path) { continue }
            do {
                try FileManager.default.createDirectory(at: url, withIntermediateDirectories: false)
                return (id, url)
            } catch {
                if FileManager.default.fileExists(atPath: url.path) { continue }
                throw StorageError("cannot create capture directory \(url.path): \(error.localizedDescription)")
            }
        }
        throw StorageError("too many captures named \(base) in \(root.path)")
    }

    /// Writes `manifest.json` into the capture's directory, durably with every file already in it, and
    /// records the capture in the catalog.
    public func finish(_ manifest: CaptureManifest, in directory: URL) throws {
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        let target = directory.appendingPathComponent("manifest.json")
        let json: Data
        do {
            json = try encoder.encode(manifest)
        } catch {
            throw StorageError("cannot encode the manifest of \(manifest.id): \(error)")
        }
        // Frames converted after a recording were written without flushing their directories; flushed
        // here, once per directory, so that a capture with a manifest has every frame it lists.
        let subdirectories =
            (try? FileManager.default.contentsOfDirectory(
                at: directory, includingPropertiesForKeys: [.isDirectoryKey], options: [.skipsHiddenFiles])) ?? []
        for subdirectory in subdirectories
        where (try? subdirectory.resourceValues(forKeys: [.isDirectoryKey]))?.isDirectory == true {
            try DurableFile.flushDirectory(subdirectory)
        }
        try DurableFile.write(json, to: target)
        try DurableFile.flushDirectory(directory.deletingLastPathComponent())
        try catalog.record(CaptureCatalog.Entry(manifest: manifest, directory: directory.lastPathComponent))
    }

    /// Reads a capture's manifest.
    public func manifest(of entry: CaptureCatalog.Entry) throws -> CaptureManifest {
        let url = root.appendingPathComponent(entry.directory).appendingPathComponent("manifest.json")
        do {
            let decoder = JSONDecoder()
            decoder.keyDecodingStrategy = .convertFromSnakeCase
            return try decoder.decode(CaptureManifest.self, from: Data(contentsOf: url))
        } catch {
            throw StorageError("cannot read \(url.path): \(error.localizedDescription)")
        }
    }

    /// Writes one frame's image durably under the capture directory; returns the relative path.
    ///
    /// Raw pixel formats become PNG, MJPEG/JPEG are written as they came.
    public static func writeFrame(
        _ bytes: UnsafeRawBufferPointer,
        pixelFormat: PixelFormat,
        dimensions: Dimensions,
        bytesPerLine: Int,
        named stem: String,
        in directory: URL
    ) throws -> String {
        try writeFrame(
            bytes, pixelFormat: pixelFormat, dimensions: dimensions, bytesPerLine: bytesPerLine, named: stem,
            in: directory, guarantee: .durable)
    }

    static func writeFrame(
        _ bytes: UnsafeRawBufferPointer,
        pixelFormat: PixelFormat,
        dimensions: Dimensions,
        bytesPerLine: Int,
        named stem: String,
        in directory: URL,
        guarantee: DurableFile.Guarantee
    ) throws -> String {
        let encoded = try FrameImageWriter.encode(
            bytes, pixelFormat: pixelFormat, dimensions: dimensions, bytesPerLine: bytesPerLine)
        let relative = "\(stem).\(encoded.fileExtension)"
        let url = try file(relative, in: directory)
        try makeParent(of: url)
        try DurableFile.write(encoded.data, to: url, guarantee: guarantee)
        return relative
    }

    /// `relative` under `directory`, refusing names that would leave it or hide in it (a leading dot is
    /// also how `DurableFile` names its temporary files).
    static func file(_ relative: String, in directory: URL) throws -> URL {
        let components = relative.split(separator: "/", omittingEmptySubsequences: false)
        guard !components.contains(where: { $0.isEmpty || $0.hasPrefix(".") }) else {
            throw StorageError("\(relative.debugDescription) is not a file name inside the capture \(directory.path)")
        }
        return directory.appendingPathComponent(relative)
    }

    static func makeParent(of url: URL) throws {
        let parent = url.deletingLastPathComponent()
        do {
            try FileManager.default.createDirectory(at: parent, withIntermediateDirectories: true)
        } catch {
            throw StorageError("cannot create \(parent.path): \(error.localizedDescription)")
        }
    }
}

extension CaptureStore: CaptureSink {
    /// A new capture directory (see `makeCaptureDirectory(kind:date:)`).
    public func begin(_ kind: CaptureKind) async throws -> CaptureHandle {
        try await BlockingWork.run {
            let (id, url) = try makeCaptureDirectory(kind: kind.rawValue)
            return CaptureHandle(id: id, kind: kind, location: url)
        }
    }

    /// Encodes and writes the frame durably (see `writeFrame`): the coordinator deletes the agent's
    /// copy once this returns.
    public func write(_ bytes: some FrameBytes, layout: FrameLayout, named stem: String, in capture: CaptureHandle)
        async throws
        -> String
    {
        try await BlockingWork.run {
            try bytes.withFrameBytes { raw in
                try Self.writeFrame(
                    raw,
                    pixelFormat: layout.pixelFormat,
                    dimensions: layout.dimensions,
                    bytesPerLine: layout.bytesPerLine,
                    named: stem,
                    in: capture.location
                )
            }
        }
    }

    /// Writes the bytes as they came to `STEM.raw`, atomically but without flushing: `convert` writes
    /// the durable image and removes this file.
    public func spill(_ bytes: some FrameBytes, layout: FrameLayout, named stem: String, in capture: CaptureHandle)
        async throws
        -> SpilledFrame
    {
        try await BlockingWork.run {
            let relative = "\(stem).raw"
            let url = try Self.file(relative, in: capture.location)
            try Self.makeParent(of: url)
            try bytes.withFrameBytes { try DurableFile.write($0, to: url, guarantee: .atomic) }
            return SpilledFrame(file: relative, stem: stem, layout: layout)
        }
    }

    /// Reads the spilled bytes back, writes the image, and removes the spilled file. The image is
    /// flushed to the disk now and its directory by `finish`, once for all of a recording's frames.
    public func convert(_ frame: SpilledFrame, in capture: CaptureHandle) async throws -> String {
        try await BlockingWork.run {
            let raw = try Self.file(frame.file, in: capture.location)
            let data: Data
            do {
                // Mapped, not read: the encoder reads each row once.
                data = try Data(contentsOf: raw, options: .alwaysMapped)
            } catch {
                throw StorageError("cannot read the spilled frame \(raw.path): \(error.localizedDescription)")
            }
            let written = try data.withUnsafeBytes { bytes in
                try Self.writeFrame(
                    bytes,
                    pixelFormat: frame.layout.pixelFormat,
                    dimensions: frame.layout.dimensions,
                    bytesPerLine: frame.layout.bytesPerLine,
                    named: frame.stem,
                    in: capture.location,
                    guarantee: .durableOnceDirectoryFlushed
                )
            }
            // A format kept as it came may have been written over the spilled file itself.
            if written != frame.file { unlink(raw.path) }
            return written
        }
    }

    /// Writes `manifest.json` durably and records the capture in the catalog.
    public func finish(_ manifest: CaptureManifest, in capture: CaptureHandle) async throws {
        try await BlockingWork.run { try finish(manifest, in: capture.location) }
    }
}
