import CamRigCapture
import CamRigFiles
import CamRigImage
import CamRigObjectStore
import Crypto
import CLinux
import Foundation
import NIOConcurrencyHelpers
import NIOCore

/// Captures in an S3-compatible object store, `s3://BUCKET/PREFIX`, in the captures directory's own
/// layout as object keys: `PREFIX/CAPTURE_ID/manifest.json`, the per-camera files, `contact-sheet.png`,
/// and the journal as one object per stored result (`PREFIX/CAPTURE_ID/journal/RESULT_ID.json`). A
/// capture copied between a folder and the store with any S3 tool is the same capture.
///
/// The agents put their results in the store themselves (`directUpload`), under the capture's prefix;
/// this store checks each against what the store holds (`adopt`) before it is journaled and its agent
/// deletes it. The coordinator writes the manifests and contact sheets. Frames of a recording streamed
/// through the coordinator wait in `scratch` until converted and put.
///
/// Captures are listed in `catalog` (its opener closes it); locks on captures (`claim`) are files in
/// `scratch`, so one coordinator's collectors never work on one capture at once.
public final class ObjectCaptureStore: Sendable {
    public let location: ObjectStoreLocation
    public let catalog: any CaptureCatalog
    public let rig: String
    /// Local room for spilled frames and capture locks.
    public let scratch: URL
    public let client: S3Client
    /// What the agents put their results with, when not the coordinator's own credentials: keys that may
    /// only write (where the store has such policies), so a camera host never holds the coordinator's.
    public let agentCredentials: ObjectStoreCredentials?

    public init(
        location: ObjectStoreLocation, catalog: any CaptureCatalog, rig: String, scratch: URL,
        agentCredentials: ObjectStoreCredentials? = nil
    ) throws {
        self.location = location
        self.agentCredentials = agentCredentials
        self.catalog = catalog
        self.rig = rig
        self.scratch = scratch
        do {
            try FileManager.default.createDirectory(at: scratch.appendingPathComponent("locks"), withIntermediateDirectories: true)
        } catch {
            throw StorageError("cannot create \(scratch.path) for the object store's local work: \(error.localizedDescription)")
        }
        client = try S3Client(location)
    }

    /// Makes the bucket if it is not there, and checks that the credentials may write under the prefix:
    /// what a capture would find out only once its agents had photos to put.
    public func prepare() async throws {
        try await client.createBucket()
        let probe = location.key(".camrig-write-check")
        _ = try await client.put(probe, body: ByteBuffer(string: "camrig"))
        try await client.delete(probe)
    }

    /// Lets go of the HTTP client (the catalog is its opener's).
    public func shutdown() async {
        await client.shutdown()
    }

    /// Where the catalog says this store's captures are.
    public var storeURL: String { location.url }

    /// Whether `entry`'s files are in this store.
    public func holds(_ entry: CaptureCatalogEntry) -> Bool { entry.store == location.url }

    /// The key of `name` (relative to the capture) of capture `id`.
    func key(_ name: String, of id: String) -> String { location.key("\(id)/\(name)") }

    func handle(_ id: String, kind: CaptureKind) -> CaptureHandle {
        CaptureHandle(id: id, kind: kind, location: URL(string: "\(location.url)/\(id)")!)
    }

    /// The capture's manifest, from the store.
    public func manifest(of entry: CaptureCatalogEntry) async throws -> CaptureManifest {
        guard let manifest = try await readManifest(entry.id) else {
            throw StorageError("\(location.url)/\(entry.id)/manifest.json is not in the store at \(location.endpoint)")
        }
        return manifest
    }

    func readManifest(_ id: String) async throws -> CaptureManifest? {
        guard try await client.head(key("manifest.json", of: id)) != nil else { return nil }
        let bytes = try await client.get(key("manifest.json", of: id))
        return try CaptureStore.decodeManifest(Data(buffer: bytes), from: "\(location.url)/\(id)/manifest.json")
    }

    private func putManifest(_ manifest: CaptureManifest, id: String) async throws {
        let json = try CaptureStore.manifestJSON(manifest)
        _ = try await client.put(key("manifest.json", of: id), body: ByteBuffer(data: json), contentType: "application/json")
    }

    private func unfinished(_ manifest: CaptureManifest) async throws -> UnfinishedCapture? {
        guard let kind = CaptureKind(rawValue: manifest.kind), manifest.isUnfinished else { return nil }
        return UnfinishedCapture(handle: handle(manifest.id, kind: kind), manifest: manifest, journal: try await journal(of: manifest.id))
    }

    /// The journal of capture `id`: every entry stored.
    func journal(of id: String) async throws -> [JournalEntry] {
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        var entries: [JournalEntry] = []
        for object in try await client.list(prefix: key("journal/", of: id)).sorted(by: { $0.key < $1.key }) {
            if let entry = try? decoder.decode(JournalEntry.self, from: Data(buffer: try await client.get(object.key))) { entries.append(entry) }
        }
        return entries
    }

    /// The lock file of capture `id`, in `scratch` (the store has no locks of its own).
    private func lockFile(_ id: String) -> URL { scratch.appendingPathComponent("locks/\(id).lock") }
}

extension CaptureManifest {
    /// Whether a collector has work on the capture: a coordinator was at it when it stopped, or agents
    /// still hold results of it (or deferred photos' finals to make, or recorded files stored here that
    /// they were not told to delete).
    public var isUnfinished: Bool {
        state == .inProgress || state == .offloading || !collectable.isEmpty || !(unacknowledged ?? []).isEmpty || !awaitingFinals.isEmpty
            || !(hostRecording?.unacknowledged.isEmpty ?? true)
    }
}

extension ObjectCaptureStore: CaptureSink {
    public func thumbnail(of bytes: UnsafeRawBufferPointer, layout: FrameLayout, width: Int) -> Result<ContactSheet.Thumbnail, ContactSheet.ThumbnailRefusal> {
        ContactSheet.thumbnail(of: bytes, layout: layout, width: width, decodeJPEG: JPEGDecoding.rgb)
    }

    /// The first free id: no object under it in the store, and reserved in the catalog.
    public func begin(_ kind: CaptureKind) async throws -> CaptureHandle {
        let date = Date()
        var last = ""
        for id in CaptureNaming.candidates(kind: kind.rawValue, date: date) {
            last = id
            guard try await client.list(prefix: location.key("\(id)/")).isEmpty else { continue }
            if try await catalog.reserve(id: id, kind: kind.rawValue, created: CaptureNaming.created(date), rig: rig, store: location.url) {
                return handle(id, kind: kind)
            }
        }
        throw StorageError("too many captures named like \(last) in \(location.url) and the catalog \(catalog.location)")
    }

    /// Encodes the frame as its image file and puts it; the coordinator deletes the agent's copy once
    /// this returns.
    public func write(_ bytes: some FrameBytes, layout: FrameLayout, named stem: String, in capture: CaptureHandle) async throws -> String {
        let encoded = try await BlockingWork.run {
            try bytes.withFrameBytes {
                try FrameImageWriter.encode($0, pixelFormat: layout.pixelFormat, dimensions: layout.dimensions, bytesPerLine: layout.bytesPerLine)
            }
        }
        let relative = "\(stem).\(encoded.fileExtension)"
        guard CaptureFileNames.isValid(relative) else { throw StorageError("\(relative.debugDescription) is not a file name inside a capture") }
        _ = try await ObjectUpload(key: key(relative, of: capture.id), source: .bytes(ByteBuffer(bytes: encoded.data)), partSize: location.partSize ?? ObjectUpload.defaultPartSize).run(with: client)
        return relative
    }

    public func writeContactSheet(_ sheet: ContactSheet, in capture: CaptureHandle) async throws -> String? {
        let png = try await BlockingWork.run {
            let (width, height, rgb) = sheet.render()
            return try rgb.withUnsafeBytes {
                try PNGEncoder.encode(width: width, height: height, channels: .rgb8, pixels: $0, bytesPerRow: width * 3, compressionLevel: 6)
            }
        }
        _ = try await client.put(key("contact-sheet.png", of: capture.id), body: ByteBuffer(bytes: png), contentType: "image/png")
        return "contact-sheet.png"
    }

    /// Keeps the frame in `scratch` until `convert`.
    public func spill(_ bytes: some FrameBytes, layout: FrameLayout, named stem: String, in capture: CaptureHandle) async throws -> SpilledFrame {
        try await BlockingWork.run {
            let relative = "\(stem).raw"
            let url = try CaptureStore.file(relative, in: self.scratch.appendingPathComponent("spill").appendingPathComponent(capture.id))
            try CaptureStore.makeParent(of: url)
            try bytes.withFrameBytes { try DurableFile.write($0, to: url, guarantee: .atomic) }
            return SpilledFrame(file: relative, stem: stem, layout: layout)
        }
    }

    /// Encodes a spilled frame, puts it, and removes it from `scratch`.
    public func convert(_ frame: SpilledFrame, in capture: CaptureHandle) async throws -> String {
        let url = try CaptureStore.file(frame.file, in: scratch.appendingPathComponent("spill").appendingPathComponent(capture.id))
        let data: Data
        do {
            data = try Data(contentsOf: url, options: .alwaysMapped)
        } catch {
            throw StorageError("cannot read the spilled frame \(url.path): \(error.localizedDescription)")
        }
        let name = try await write(data, layout: frame.layout, named: frame.stem, in: capture)
        unlink(url.path)
        return name
    }

    public func finish(_ manifest: CaptureManifest, in capture: CaptureHandle) async throws {
        try await putManifest(manifest, id: capture.id)
        try await catalog.record(CaptureCatalogEntry(manifest: manifest, directory: capture.id, rig: rig, store: location.url))
        try? FileManager.default.removeItem(at: scratch.appendingPathComponent("spill").appendingPathComponent(capture.id))
        CaptureStore.letGo(file: lockFile(capture.id))
    }

    public func started(_ manifest: CaptureManifest, in capture: CaptureHandle) async throws {
        try CaptureStore.hold(file: lockFile(capture.id))
        try await putManifest(manifest, id: capture.id)
        try await catalog.record(CaptureCatalogEntry(manifest: manifest, directory: capture.id, rig: rig, store: location.url))
    }

    /// One object per entry: the store has no append, and an entry is durable once its PUT returns.
    public func journal(_ entry: JournalEntry, in capture: CaptureHandle) async throws {
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let name = "journal/\(SignatureV4.encode(entry.resultId)).json"
        _ = try await client.put(key(name, of: capture.id), body: ByteBuffer(data: try encoder.encode(entry)), contentType: "application/json")
    }

    /// This rig's captures in this store that are not complete, from the catalog, each with its manifest
    /// and journal as the store holds them.
    public func unfinished() async throws -> [UnfinishedCapture] {
        var unfinished: [UnfinishedCapture] = []
        for entry in try await catalog.unfinished(rig: rig) where holds(entry) {
            guard let manifest = try? await readManifest(entry.id), let capture = try await self.unfinished(manifest) else { continue }
            unfinished.append(capture)
        }
        return unfinished
    }

    public func reread(_ capture: CaptureHandle) async throws -> UnfinishedCapture? {
        guard let manifest = try await readManifest(capture.id) else { return nil }
        return try await unfinished(manifest)
    }

    public func claim(_ capture: CaptureHandle) async -> CaptureClaim? {
        guard let fd = CaptureStore.tryLock(file: lockFile(capture.id)) else { return nil }
        return CaptureClaim { close(fd) }
    }

    public func abandon(_ capture: CaptureHandle) async {
        CaptureStore.letGo(file: lockFile(capture.id))
    }

    public func readFile(_ name: String, in capture: CaptureHandle) async throws -> [UInt8] {
        guard CaptureFileNames.isValid(name) else { throw StorageError("\(name.debugDescription) is not a file name inside a capture") }
        return Array(try await client.get(key(name, of: capture.id)).readableBytesView)
    }

    /// The size of file `name` of the capture; `ObjectStoreError` `.notFound` when the store has no such object.
    public func fileSize(_ name: String, in capture: CaptureHandle) async throws -> UInt64 {
        guard CaptureFileNames.isValid(name) else { throw StorageError("\(name.debugDescription) is not a file name inside a capture") }
        guard let object = try await client.head(key(name, of: capture.id)) else {
            throw ObjectStoreError(.notFound, "the store has no \(key(name, of: capture.id))")
        }
        return object.size
    }

    /// What a ranged read of a file asks for at most: what a reader holds of a file at once, however
    /// large the file (a recording's video).
    public static let readPiece: UInt64 = 8 << 20

    /// Bytes `range` of file `name` of the capture: files too large to hold (a recording's videos) are
    /// read piece by piece.
    public func readFile(_ name: String, in capture: CaptureHandle, range: Range<UInt64>) async throws -> ByteBuffer {
        guard CaptureFileNames.isValid(name) else { throw StorageError("\(name.debugDescription) is not a file name inside a capture") }
        return try await client.get(key(name, of: capture.id), range: range)
    }

    /// File `name` of the capture, `size` bytes long, read from its start in ranged reads of `readPiece`,
    /// each handed to `body` in order.
    public func readPieces(_ name: String, in capture: CaptureHandle, size: UInt64, _ body: (ByteBuffer) async throws -> Void) async throws {
        var offset: UInt64 = 0
        while offset < size {
            let piece = try await readFile(name, in: capture, range: offset..<min(offset + Self.readPiece, size))
            offset += UInt64(piece.readableBytes)
            try await body(piece)
        }
    }

    /// Copies a recording's files out of the store into `folder` (each streamed to disk in ranged reads of
    /// 8 MiB, its SHA-256 checked against what its host recorded), for the tools that need the files at
    /// hand (`camrig captures export`). `progress` is told the bytes copied so far and in all.
    public func download(
        _ files: [CaptureManifest.HostRecording.File], of capture: CaptureHandle, into folder: URL, progress: (UInt64, UInt64) -> Void = { _, _ in }
    ) async throws {
        let total = files.reduce(0) { $0 + $1.size }
        var copied: UInt64 = 0
        for file in files {
            // `fileSize` refuses a name that is not a file inside a capture before anything is written.
            let size = try await fileSize(file.name, in: capture)
            let target = folder.appendingPathComponent(file.name)
            try FileManager.default.createDirectory(at: target.deletingLastPathComponent(), withIntermediateDirectories: true)
            guard FileManager.default.createFile(atPath: target.path, contents: nil), let handle = FileHandle(forWritingAtPath: target.path) else {
                throw StorageError("cannot write \(target.path): check the folder is writable")
            }
            defer { try? handle.close() }
            guard size == file.size else {
                throw StorageError("\(key(file.name, of: capture.id)) holds \(size) bytes where its host recorded \(file.size): offload the capture again")
            }
            var hash = SHA256()
            try await readPieces(file.name, in: capture, size: size) { piece in
                piece.withUnsafeReadableBytes { hash.update(bufferPointer: $0) }
                try handle.write(contentsOf: piece.readableBytesView)
                copied += UInt64(piece.readableBytes)
                progress(copied, total)
            }
            let sha256 = SignatureV4.hex(hash.finalize())
            guard sha256 == file.sha256 else {
                throw StorageError("\(key(file.name, of: capture.id)) does not hash to the SHA-256 its host recorded (\(file.sha256)): it changed in the store")
            }
        }
    }

    /// The capture's own prefix: the agents write there and nowhere else.
    public func directUpload(for capture: CaptureHandle) -> ObjectStoreLocation? {
        var target = location.below(capture.id)
        if let agentCredentials { target.credentials = agentCredentials }
        return target
    }

    /// Checks `object` against what the store holds (size, SHA-256, entity tag) and names it relative to
    /// the capture; an object outside the capture's prefix is refused.
    public func adopt(_ object: StoredObject, in capture: CaptureHandle) async throws -> String {
        let prefix = location.key("\(capture.id)/")
        guard object.key.hasPrefix(prefix), CaptureFileNames.isValid(String(object.key.dropFirst(prefix.count))) else {
            throw StorageError("an agent stored \(object.key), which is not a file of capture \(capture.id) (\(prefix)…)")
        }
        try await client.check(object)
        return String(object.key.dropFirst(prefix.count))
    }
}

extension ObjectCaptureStore: RecordedFileLookup {
    /// Asks the store for the object (HEAD): its size and the SHA-256 its uploader put in its metadata.
    public func lookUp(_ name: String, size: UInt64, sha256: String, in capture: CaptureHandle) async throws -> RecordedFileFound {
        guard CaptureFileNames.isValid(name) else { throw StorageError("\(name.debugDescription) is not a file name inside a capture") }
        let key = key(name, of: capture.id)
        guard let head = try await client.head(key) else { return .absent }
        guard head.size == size, head.sha256 == sha256 else {
            return .differs(
                "\(location.bucket)/\(key) in the store is \(head.size) bytes with SHA-256 \(head.sha256?.prefix(16) ?? "none")…, not the \(size) bytes with \(sha256.prefix(16))… its host recorded")
        }
        return .matches
    }
}
