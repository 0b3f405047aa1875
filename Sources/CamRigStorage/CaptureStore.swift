import CamRigDevices
import Foundation

/// A captures directory: one subdirectory per capture (frames and `manifest.json`) and
/// `catalog.sqlite` listing them all.
public struct CaptureStore: Sendable {
    public let root: URL
    public let catalog: CaptureCatalog

    public init(root: URL) throws {
        self.root = root
        do {
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        } catch {
            throw StorageError("cannot create the captures directory \(root.path): \(error.localizedDescription); choose another with --out")
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

    /// Writes `manifest.json` into the capture's directory and records the capture in the catalog.
    public func finish(_ manifest: CaptureManifest, in directory: URL) throws {
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        let target = directory.appendingPathComponent("manifest.json")
        do {
            try Self.writeDurably(encoder.encode(manifest), to: target)
        } catch {
            throw StorageError("cannot write \(target.path): \(error.localizedDescription)")
        }
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
        let encoded = try FrameImageWriter.encode(bytes, pixelFormat: pixelFormat, dimensions: dimensions, bytesPerLine: bytesPerLine)
        let relative = "\(stem).\(encoded.fileExtension)"
        let url = directory.appendingPathComponent(relative)
        do {
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try Self.writeDurably(Data(encoded.data), to: url)
        } catch {
            throw StorageError("cannot write \(url.path): \(error.localizedDescription)")
        }
        return relative
    }

    /// Writes to a temporary name, flushes to the disk, then renames into place: after a crash the
    /// file is either whole or absent, and once this returns it survives a power cut.
    public static func writeDurably(_ data: Data, to url: URL) throws {
        let temporary = url.deletingLastPathComponent().appendingPathComponent(".\(url.lastPathComponent).partial")
        guard FileManager.default.createFile(atPath: temporary.path, contents: nil) else {
            throw StorageError("cannot create \(temporary.path)")
        }
        let handle = try FileHandle(forWritingTo: temporary)
        do {
            try handle.write(contentsOf: data)
            try handle.synchronize()
            try handle.close()
        } catch {
            try? handle.close()
            try? FileManager.default.removeItem(at: temporary)
            throw error
        }
        if rename(temporary.path, url.path) != 0 {
            let reason = String(cString: strerror(errno))
            try? FileManager.default.removeItem(at: temporary)
            throw StorageError("cannot move \(temporary.path) to \(url.path): \(reason)")
        }
    }
}
