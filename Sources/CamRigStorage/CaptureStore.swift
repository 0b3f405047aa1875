import CamRigDeviceModel
import Crypto
import CamRigCapture
import CamRigFiles
import CamRigImage
import CLinux
import Foundation
import Logging
import NIOConcurrencyHelpers

/// A captures directory: one subdirectory per capture (frames and `manifest.json`), listed in a
/// catalog: `catalog.sqlite` in the directory, or a PostgreSQL catalog that several rigs share.
///
/// As a `CaptureSink` it does its file I/O and image encoding on Dispatch's worker threads, so callers
/// in Swift concurrency never block on the disk; the synchronous methods block their caller.
public struct CaptureStore: Sendable {
    public let root: URL
    public let catalog: any CaptureCatalog
    /// The rig whose captures this store makes: recorded with each in the catalog.
    public let rig: String
    /// Where this store's captures are, as the catalog records them: the directory's absolute path.
    public let location: String

    /// A store in `root` (created if need be) listing its captures, as rig `rig`'s, in `catalog`. The
    /// catalog stays its opener's to close.
    public init(root: URL, catalog: any CaptureCatalog, rig: String) throws {
        self.root = root
        self.catalog = catalog
        self.rig = rig
        location = root.absoluteURL.standardizedFileURL.path
        do {
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        } catch {
            throw StorageError(
                "cannot create the captures directory \(root.path): \(error.localizedDescription); choose another with --out"
            )
        }
    }

    /// A store in `root` with its own SQLite catalog, `catalog.sqlite` in it (closed when the last copy
    /// of the store goes; `disconnect()` closes it at once).
    public init(root: URL, rig: String = CaptureNaming.hostRig) throws {
        do {
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        } catch {
            throw StorageError(
                "cannot create the captures directory \(root.path): \(error.localizedDescription); choose another with --out"
            )
        }
        try self.init(root: root, catalog: try SQLiteCaptureCatalog(directory: root), rig: rig)
    }

    /// The store in `root` with the catalog `catalogURL` names (`postgres://…`), or with none the SQLite
    /// catalog in `root`, connected. `disconnect()` closes the catalog.
    public static func connect(
        root: URL, catalogURL: String?, rig: String, logger: Logger = Logger(label: "camrig.catalog")
    ) async throws -> CaptureStore {
        guard let catalogURL, !catalogURL.isEmpty else { return try CaptureStore(root: root, rig: rig) }
        guard PostgresCatalogAddress.isPostgres(catalogURL) else {
            throw StorageError(
                "--catalog \(PostgresCatalogAddress.redacted(catalogURL)) is not a PostgreSQL URL: give postgres://USER:PASSWORD@HOST:PORT/DB, or leave --catalog (and CAMRIG_CATALOG) out for the SQLite catalog in the captures directory"
            )
        }
        let catalog = try await PostgresCaptureCatalog(url: catalogURL, logger: logger)
        do {
            return try CaptureStore(root: root, catalog: catalog, rig: rig)
        } catch {
            await catalog.close()
            throw error
        }
    }

    /// Closes the catalog.
    public func disconnect() async {
        await catalog.close()
    }

    /// Whether `entry`'s files are in this store (captures listed before catalogs said where are taken to
    /// be).
    public func holds(_ entry: CaptureCatalogEntry) -> Bool {
        entry.store.isEmpty || entry.store == location
    }

    /// A new, empty capture directory named after the time and `kind`, its id reserved in the catalog:
    /// the first of `CaptureNaming.candidates` that is free both here and in the catalog (another rig
    /// sharing the catalog may have taken it).
    public func makeCaptureDirectory(kind: String, date: Date = Date()) async throws -> (id: String, url: URL) {
        let created = CaptureNaming.created(date)
        var last = ""
        for id in CaptureNaming.candidates(kind: kind, date: date) {
            last = id
            let url = root.appendingPathComponent(id)
            guard try await BlockingWork.run({ try Self.makeDirectory(url) }) else { continue }
            let reserved: Bool
            do {
                reserved = try await catalog.reserve(id: id, kind: kind, created: created, rig: rig, store: location)
            } catch {
                try? FileManager.default.removeItem(at: url)
                throw error
            }
            if reserved { return (id, url) }
            // Taken by a capture of another rig (or one whose folder was removed): the folder is given back.
            try? FileManager.default.removeItem(at: url)
        }
        throw StorageError("too many captures named like \(last) in \(root.path) and the catalog \(catalog.location)")
    }

    /// Makes the folder `url`; false when it exists already (made by another capture, maybe of this
    /// process, at the same moment).
    private static func makeDirectory(_ url: URL) throws -> Bool {
        if mkdir(url.path, 0o777) == 0 { return true }
        if errno == EEXIST { return false }
        throw StorageError("cannot create capture directory \(url.path): \(String(cString: strerror(errno)))")
    }

    /// The catalog's row for `manifest`, whose folder is `directory`.
    func entry(_ manifest: CaptureManifest, directory: String) -> CaptureCatalogEntry {
        CaptureCatalogEntry(manifest: manifest, directory: directory, rig: rig, store: location)
    }

    /// Writes `manifest.json` into the capture's directory, durably with every file already in it, and
    /// records the capture in the catalog.
    public func finish(_ manifest: CaptureManifest, in directory: URL) async throws {
        try await BlockingWork.run { try Self.writeFinal(manifest, in: directory) }
        try await catalog.record(entry(manifest, directory: directory.lastPathComponent))
        Self.letGo(directory)
    }

    /// `finish`'s files: the manifest, durably with every frame.
    private static func writeFinal(_ manifest: CaptureManifest, in directory: URL) throws {
        let target = directory.appendingPathComponent("manifest.json")
        let json = try encode(manifest)
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
    }

    /// The journal of stored results in a capture's directory (one JSON `JournalEntry` per line).
    public static let journalFile = "journal.jsonl"

    /// The lock a capture's writer holds from `started` to `finish` (`flock`, so a writer killed with -9
    /// lets go of it), and a collector while it works on the capture.
    public static let lockFile = ".capture.lock"

    /// Locks this process holds for captures it is writing, by lock file path.
    private static let held = NIOLockedValueBox<[String: Int32]>([:])

    /// Takes the capture's lock if nobody holds it; the file descriptor holding it, or `nil`.
    static func tryLock(_ directory: URL) -> Int32? { tryLock(file: directory.appendingPathComponent(lockFile)) }

    /// Takes the lock `file` (`flock`, made if missing) if nobody holds it; the descriptor, or `nil`.
    static func tryLock(file: URL) -> Int32? {
        let fd = open(file.path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return nil }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            close(fd)
            return nil
        }
        return fd
    }

    private static func hold(_ directory: URL) throws { try hold(file: directory.appendingPathComponent(lockFile)) }

    /// Takes the lock `file` for this process until `letGo(file:)` (a capture's writer, `started` to `finish`).
    static func hold(file: URL) throws {
        guard let fd = tryLock(file: file) else {
            throw StorageError("cannot lock \(file.path): \(String(cString: strerror(errno)))")
        }
        if let previous = held.withLockedValue({ held in
            defer { held[file.path] = fd }
            return held[file.path]
        }) {
            close(previous)
        }
    }

    private static func letGo(_ directory: URL) { letGo(file: directory.appendingPathComponent(lockFile)) }

    static func letGo(file: URL) {
        if let fd = held.withLockedValue({ $0.removeValue(forKey: file.path) }) { close(fd) }
    }

    /// Writes the manifest of a capture just begun and lists it in the catalog.
    public func started(_ manifest: CaptureManifest, in directory: URL) async throws {
        try await BlockingWork.run {
            try Self.hold(directory)
            try DurableFile.write(try Self.encode(manifest), to: directory.appendingPathComponent("manifest.json"))
            try DurableFile.flushDirectory(directory.deletingLastPathComponent())
        }
        try await catalog.record(entry(manifest, directory: directory.lastPathComponent))
    }

    /// Appends `entry` to the capture's journal, durably.
    public func journal(_ entry: JournalEntry, in directory: URL) throws {
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        var line = Array(try encoder.encode(entry))
        line.append(UInt8(ascii: "\n"))
        try DurableFile.append(line, to: directory.appendingPathComponent(Self.journalFile))
    }

    /// The journal of the capture in `directory`: every whole record (a torn last line is skipped).
    public func journal(in directory: URL) -> [JournalEntry] {
        guard let data = FileManager.default.contents(atPath: directory.appendingPathComponent(Self.journalFile).path) else { return [] }
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        return data.split(separator: UInt8(ascii: "\n")).compactMap { try? decoder.decode(JournalEntry.self, from: Data($0)) }
    }

    /// This rig's captures in this store that a coordinator left in progress or whose agents still hold
    /// results of them, each with its manifest and journal. A capture whose manifest cannot be read is
    /// left out (and stays listed).
    ///
    /// A capture folder with a manifest but no catalog entry (the coordinator died between writing the
    /// one and the other) is listed in the catalog now, and returned when it is not complete.
    public func unfinishedCaptures() async throws -> [UnfinishedCapture] {
        let entries = try await catalog.unfinished(rig: rig).filter(holds)
        // This rig's rows, and those of captures listed before catalogs had rigs.
        let listed = Set(try await catalog.list(CaptureCatalogQuery(rig: rig)).map(\.directory) + catalog.list(CaptureCatalogQuery(rig: "")).map(\.directory))
        let (found, orphans) = try await BlockingWork.run { () -> ([UnfinishedCapture], [(String, CaptureManifest)]) in
            let found = entries.compactMap { entry -> UnfinishedCapture? in
                guard let manifest = try? manifest(of: entry) else { return nil }
                return self.unfinished(manifest, directory: entry.directory)
            }
            let folders = (try? FileManager.default.contentsOfDirectory(atPath: root.path)) ?? []
            let orphans = folders.sorted().filter { !listed.contains($0) }.compactMap { folder -> (String, CaptureManifest)? in
                guard let manifest = try? Self.readManifest(in: root.appendingPathComponent(folder)) else { return nil }
                return (folder, manifest)
            }
            return (found, orphans)
        }
        var unfinished = found
        for (folder, manifest) in orphans {
            // A capture of another rig with this id keeps its row.
            guard try await catalog.reserve(id: manifest.id, kind: manifest.kind, created: manifest.created, rig: rig, store: location) else { continue }
            try await catalog.record(entry(manifest, directory: folder))
            if let capture = self.unfinished(manifest, directory: folder) { unfinished.append(capture) }
        }
        return unfinished
    }

    private func unfinished(_ manifest: CaptureManifest, directory: String) -> UnfinishedCapture? {
        guard let kind = CaptureKind(rawValue: manifest.kind) else { return nil }
        guard manifest.isUnfinished else { return nil }
        let url = root.appendingPathComponent(directory)
        return UnfinishedCapture(handle: CaptureHandle(id: manifest.id, kind: kind, location: url), manifest: manifest, journal: journal(in: url))
    }

    /// The bytes `manifest.json` holds for `manifest`.
    public static func manifestJSON(_ manifest: CaptureManifest) throws -> Data { try encode(manifest) }

    static func encode(_ manifest: CaptureManifest) throws -> Data {
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        do {
            return try encoder.encode(manifest)
        } catch {
            throw StorageError("cannot encode the manifest of \(manifest.id): \(error)")
        }
    }

    /// Reads a capture's manifest; a capture whose files are in another store is refused, saying where.
    public func manifest(of entry: CaptureCatalogEntry) throws -> CaptureManifest {
        guard holds(entry) else {
            throw StorageError(
                "capture \(entry.id) is rig \(entry.rig.isEmpty ? "?" : entry.rig)'s, stored in \(entry.store), not in \(location): run the command where that store is (--out), or on that rig's coordinator")
        }
        let directory = root.appendingPathComponent(entry.directory)
        guard let manifest = try Self.readManifest(in: directory) else {
            throw StorageError("cannot read \(directory.appendingPathComponent("manifest.json").path): there is no such file")
        }
        return manifest
    }

    /// The manifest in a capture's directory; `nil` when it has none.
    static func readManifest(in directory: URL) throws -> CaptureManifest? {
        let url = directory.appendingPathComponent("manifest.json")
        guard let data = FileManager.default.contents(atPath: url.path) else { return nil }
        return try decodeManifest(data, from: url.path)
    }

    /// A manifest from the bytes `manifest.json` holds (`from` names where, for the error).
    static func decodeManifest(_ data: Data, from place: String) throws -> CaptureManifest {
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        do {
            return try decoder.decode(CaptureManifest.self, from: data)
        } catch {
            throw StorageError("cannot read \(place): \(error)")
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
    public static func file(_ relative: String, in directory: URL) throws -> URL {
        guard CaptureFileNames.isValid(relative) else {
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
    /// Thumbnails of JPEG photos too, decoded with libjpeg-turbo.
    public func thumbnail(of bytes: UnsafeRawBufferPointer, layout: FrameLayout, width: Int) -> Result<ContactSheet.Thumbnail, ContactSheet.ThumbnailRefusal> {
        ContactSheet.thumbnail(of: bytes, layout: layout, width: width, decodeJPEG: JPEGDecoding.rgb)
    }

    /// A new capture directory, its id reserved in the catalog (see `makeCaptureDirectory(kind:date:)`).
    public func begin(_ kind: CaptureKind) async throws -> CaptureHandle {
        let (id, url) = try await makeCaptureDirectory(kind: kind.rawValue)
        return CaptureHandle(id: id, kind: kind, location: url)
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

    /// Writes the sheet as `contact-sheet.png`, durable once `finish` flushes the capture's directory.
    public func writeContactSheet(_ sheet: ContactSheet, in capture: CaptureHandle) async throws -> String? {
        try await BlockingWork.run {
            let (width, height, rgb) = sheet.render()
            let png = try rgb.withUnsafeBytes {
                try PNGEncoder.encode(width: width, height: height, channels: .rgb8, pixels: $0, bytesPerRow: width * 3, compressionLevel: 6)
            }
            let relative = "contact-sheet.png"
            let url = try Self.file(relative, in: capture.location)
            try png.withUnsafeBytes { try DurableFile.write($0, to: url, guarantee: .durableOnceDirectoryFlushed) }
            return relative
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
        try await finish(manifest, in: capture.location)
    }

    public func started(_ manifest: CaptureManifest, in capture: CaptureHandle) async throws {
        try await started(manifest, in: capture.location)
    }

    public func journal(_ entry: JournalEntry, in capture: CaptureHandle) async throws {
        try await BlockingWork.run { try journal(entry, in: capture.location) }
    }

    public func unfinished() async throws -> [UnfinishedCapture] {
        try await unfinishedCaptures()
    }

    public func reread(_ capture: CaptureHandle) async throws -> UnfinishedCapture? {
        try await BlockingWork.run {
            guard let manifest = try Self.readManifest(in: capture.location) else { return nil }
            return unfinished(manifest, directory: capture.location.lastPathComponent)
        }
    }

    public func claim(_ capture: CaptureHandle) async -> CaptureClaim? {
        guard let fd = Self.tryLock(capture.location) else { return nil }
        return CaptureClaim { close(fd) }
    }

    public func abandon(_ capture: CaptureHandle) async {
        Self.letGo(capture.location)
    }

    // MARK: Recorded files, offloaded from their hosts

    /// Files being received in order, by path: the SHA-256 of their bytes so far, so that a file received
    /// from start to end is checked without reading it again.
    private static let hashing = NIOLockedValueBox<[String: (length: UInt64, hasher: SHA256)]>([:])

    /// Where a file being received waits until it is whole: hidden, beside its final name.
    private static func partial(_ name: String, in directory: URL) throws -> (partial: URL, final: URL) {
        let final = try file(name, in: directory)
        return (final.deletingLastPathComponent().appendingPathComponent(".\(final.lastPathComponent).partial"), final)
    }

    public func receivedBytes(of name: String, in capture: CaptureHandle) async throws -> UInt64 {
        try await BlockingWork.run {
            let (partial, final) = try Self.partial(name, in: capture.location)
            for url in [final, partial] {
                if let size = try? FileManager.default.attributesOfItem(atPath: url.path)[.size] as? NSNumber { return size.uint64Value }
            }
            return 0
        }
    }

    public func receive(_ bytes: some FrameBytes, into name: String, at offset: UInt64, in capture: CaptureHandle) async throws {
        try await BlockingWork.run {
            let (partial, _) = try Self.partial(name, in: capture.location)
            try Self.makeParent(of: partial)
            let fd = open(partial.path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
            guard fd >= 0 else { throw StorageError("cannot write \(partial.path): \(String(cString: strerror(errno)))") }
            defer { close(fd) }
            // Whatever lies past `offset` (a chunk cut short before) is written again.
            guard ftruncate(fd, off_t(offset)) == 0 else { throw StorageError("cannot write \(partial.path): \(String(cString: strerror(errno)))") }
            try bytes.withFrameBytes { raw in
                Self.hashing.withLockedValue { files in
                    if offset == 0 { files[partial.path] = (0, SHA256()) }
                    guard var entry = files[partial.path], entry.length == offset else {
                        files[partial.path] = nil
                        return
                    }
                    entry.hasher.update(bufferPointer: raw)
                    entry.length += UInt64(raw.count)
                    files[partial.path] = entry
                }
                defer {
                    // Its way to the disk begins now, so the flush at the end has little left to wait for.
                    _ = camrig_start_writeback(fd, Int64(offset), Int64(raw.count))
                }
                var done = 0
                while done < raw.count {
                    let written = pwrite(fd, raw.baseAddress! + done, raw.count - done, off_t(offset) + off_t(done))
                    if written < 0 {
                        if errno == EINTR { continue }
                        throw StorageError("cannot write \(partial.path): \(String(cString: strerror(errno)))")
                    }
                    done += written
                }
            }
        }
    }

    public func completeFile(_ name: String, size: UInt64, sha256: String, in capture: CaptureHandle) async throws {
        try await BlockingWork.run {
            let (partial, final) = try Self.partial(name, in: capture.location)
            if FileManager.default.fileExists(atPath: final.path), !FileManager.default.fileExists(atPath: partial.path) { return }
            let handle = try FileHandle(forUpdating: partial)
            defer { try? handle.close() }
            var total: UInt64 = 0
            let digest: String
            let onDisk = try handle.seekToEnd()
            if let hashed = Self.hashing.withLockedValue({ $0.removeValue(forKey: partial.path) }), hashed.length == onDisk {
                // Received in order by this process: hashed on the way in.
                total = hashed.length
                digest = hashed.hasher.finalize().map { String(format: "%02x", $0) }.joined()
            } else {
                try handle.seek(toOffset: 0)
                var hasher = SHA256()
                while let chunk = try handle.read(upToCount: 4 << 20), !chunk.isEmpty {
                    hasher.update(data: chunk)
                    total += UInt64(chunk.count)
                }
                digest = hasher.finalize().map { String(format: "%02x", $0) }.joined()
            }
            guard total == size, digest == sha256 else {
                try? FileManager.default.removeItem(at: partial)
                throw StorageError(
                    "\(name) arrived as \(total) bytes with SHA-256 \(digest.prefix(16))…, not the \(size) bytes with \(sha256.prefix(16))… its host recorded; it was deleted and is fetched again by the next offload")
            }
            try handle.synchronize()
            guard rename(partial.path, final.path) == 0 else { throw StorageError("cannot rename \(partial.path): \(String(cString: strerror(errno)))") }
            try DurableFile.flushDirectory(final.deletingLastPathComponent())
        }
    }

    public func readFile(_ name: String, in capture: CaptureHandle) async throws -> [UInt8] {
        try await BlockingWork.run {
            let url = try Self.file(name, in: capture.location)
            do {
                return Array(try Data(contentsOf: url))
            } catch {
                throw StorageError("cannot read \(url.path): \(error.localizedDescription)")
            }
        }
    }
}

extension CaptureStore: RecordedFileLookup {
    /// Looks for the file under its final name (a `.partial` file is not whole) and hashes it.
    public func lookUp(_ name: String, size: UInt64, sha256: String, in capture: CaptureHandle) async throws -> RecordedFileFound {
        try await BlockingWork.run {
            let url = try Self.file(name, in: capture.location)
            guard let handle = FileHandle(forReadingAtPath: url.path) else { return .absent }
            defer { try? handle.close() }
            var hasher = SHA256()
            var total: UInt64 = 0
            while let chunk = try handle.read(upToCount: 4 << 20), !chunk.isEmpty {
                hasher.update(data: chunk)
                total += UInt64(chunk.count)
            }
            let digest = hasher.finalize().map { String(format: "%02x", $0) }.joined()
            guard total == size, digest == sha256 else {
                return .differs("\(url.path) is \(total) bytes with SHA-256 \(digest.prefix(16))…, not the \(size) bytes with \(sha256.prefix(16))… its host recorded")
            }
            return .matches
        }
    }
}
