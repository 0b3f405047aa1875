import CamRigFiles
import Crypto
import Foundation
import NIOCore
import NIOPosix

/// Puts one file (or buffer) into the store as one object, checked end to end, and resumably.
///
/// - Small objects (up to one part) go in one PUT.
/// - Larger ones go as a multipart upload whose id is kept in `stateFile` before the first part leaves:
///   an upload cut off (the store stopped, the host restarted) resumes with the parts the store already
///   holds, each checked against the MD5 of the same bytes here, and sends only the rest.
/// - The store checks each request's MD5 (Content-MD5) and the signature covers its SHA-256; the entity
///   tags it answers are checked here too, and the object carries the SHA-256 of the whole as metadata.
///
/// - At most `maxBytesPerSecond` leave when set: a part is sent only once the bytes sent before it fit
///   the rate since the upload began, and `run` returns no sooner than the whole file does (so a host's
///   uploads, one after another, never take more than the rate from a running capture).
/// - No multipart upload is left open in the store for the key: an object found already whole, or
///   completed, aborts any other upload of the key (one whose answer was lost, one begun by a run that
///   stopped before it noted its id).
///
/// The object is whole when `run` returns: what it returns is what the store holds.
public struct ObjectUpload: Sendable {
    public enum Source: Sendable {
        case file(String)
        case bytes(ByteBuffer)
    }

    public var key: String
    public var source: Source
    /// Bytes per part (at least 5 MiB, S3's smallest part but the last).
    public var partSize: Int
    /// Where the multipart upload's id is kept until the object is whole (nil: not resumable).
    public var stateFile: URL?
    public var contentType: String?
    /// Parts in flight at once.
    public var concurrency: Int
    /// Told the number of each part once the store has it (not of parts found there from before).
    public var partStored: (@Sendable (Int) -> Void)?
    /// The SHA-256 (hex) the source's bytes must have, when known beforehand (a recorded file's).
    public var sha256: String?
    /// At most this many bytes a second are sent (0: as fast as the store takes them).
    public var maxBytesPerSecond: UInt64 = 0
    /// The clock the rate is kept on, and how the upload waits (a parameter: tests run it on virtual time).
    public var pacing: UploadPacing = .system
    /// Where a file's parts are read (blocking reads never run on the cooperative pool): the process's
    /// disk thread pool.
    public var threadPool: NIOThreadPool = .singleton

    public static let minimumPartSize = 5 << 20
    public static let defaultPartSize = 8 << 20

    public init(
        key: String, source: Source, partSize: Int = ObjectUpload.defaultPartSize, stateFile: URL? = nil, contentType: String? = nil,
        concurrency: Int = 4, sha256: String? = nil
    ) {
        self.sha256 = sha256
        self.key = key
        self.source = source
        self.partSize = max(partSize, Self.minimumPartSize)
        self.stateFile = stateFile
        self.contentType = contentType
        self.concurrency = max(1, concurrency)
    }

    /// What `stateFile` holds.
    struct State: Codable {
        var key: String
        var uploadID: String
        var partSize: Int
        var size: UInt64
        var sha256: String
    }

    /// Uploads, or finds the object already whole from an earlier run (same key, size and SHA-256).
    /// `progress` is told the bytes sent so far.
    ///
    /// Each part is read once: its MD5 (for the store to check), its SHA-256 (signed with the request)
    /// and the running SHA-256 of the whole come from that one read. With `sha256` known beforehand (a
    /// recorded file's), nothing is read twice, and the upload is completed only if the bytes sent hash
    /// to it; otherwise the whole is hashed first, for the metadata the upload starts with.
    public func run(with client: S3Client, progress: (@Sendable (UInt64) -> Void)? = nil) async throws -> StoredObject {
        let reader = try await SourceReader.open(source, what: key, on: threadPool)
        defer { reader.close() }
        let size = reader.size
        let started = pacing.now()
        var pace = UploadPace(bytesPerSecond: maxBytesPerSecond)
        /// Waits until `offset` after the upload's start.
        func wait(until offset: Duration) async throws {
            let delay = offset - (pacing.now() - started)
            if delay > .zero { try await pacing.sleep(delay) }
        }
        if size <= UInt64(partSize) {
            let body = try await reader.read(at: 0, count: Int(size))
            try await wait(until: pace.send(size))
            let stored = try await client.put(key, body: body, contentType: contentType)
            if let sha256, stored.sha256 != sha256 {
                throw ObjectStoreError(.mismatch, "\(key) was read as SHA-256 \(stored.sha256.prefix(16))…, not the \(sha256.prefix(16))… it should have: its source changed")
            }
            progress?(size)
            try await wait(until: pace.allSent)
            // A multipart upload of the key from before (the file was larger, or its parts were) is not left open.
            await abortLeftovers(client, keeping: nil)
            return stored
        }
        let expected: String
        if let sha256 { expected = sha256 } else { expected = try await reader.sha256() }
        let noted = loadState()
        var state = noted.flatMap { $0.key == key && $0.size == size && $0.sha256 == expected && $0.partSize == partSize ? $0 : nil }
        var held: [Int: (etag: String, size: UInt64)] = [:]
        if let known = state {
            do {
                held = try await client.listParts(key, uploadID: known.uploadID)
            } catch let error as ObjectStoreError where error.kind == .notFound {
                // Completed before (its answer lost) or aborted: the object says which.
                if let whole = try await existing(client, size: size, sha256: expected) { return whole }
                state = nil
            }
        } else if let whole = try await existing(client, size: size, sha256: expected) {
            return whole
        }
        let upload: State
        if let state {
            upload = state
        } else {
            if let noted, noted.key == key {
                // An upload of other bytes or parts than these: its parts are of no use.
                try? await client.abortMultipartUpload(key, uploadID: noted.uploadID)
            }
            upload = State(
                key: key, uploadID: try await client.createMultipartUpload(key, sha256: expected, contentType: contentType), partSize: partSize, size: size,
                sha256: expected)
            try saveState(upload)
        }
        let count = Int((size + UInt64(partSize) - 1) / UInt64(partSize))
        let sent = Counter()
        var md5s = [[UInt8]](repeating: [], count: count)
        var whole = SHA256()
        try await withThrowingTaskGroup(of: Void.self) { group in
            var inFlight = 0
            // Parts are read in order (the whole's hash needs them so), and sent `concurrency` at a time.
            for number in 1...count {
                let length = Int(partSize(number, of: size))
                let body = try await reader.read(at: UInt64(number - 1) * UInt64(partSize), count: length)
                let (md5, partSHA) = body.withUnsafeReadableBytes { bytes in
                    whole.update(bufferPointer: bytes)
                    return (Array(Insecure.MD5.hash(data: bytes)), SHA256.hash(data: bytes))
                }
                md5s[number - 1] = md5
                if let part = held[number], part.etag == SignatureV4.hex(md5), part.size == UInt64(length) {
                    progress?(sent.add(part.size))
                    continue
                }
                try await wait(until: pace.send(UInt64(length)))
                if inFlight == concurrency {
                    try await group.next()
                    inFlight -= 1
                }
                group.addTask {
                    try await client.uploadPart(key, uploadID: upload.uploadID, number: number, body: body, md5: md5, sha256: SignatureV4.hex(partSHA))
                    progress?(sent.add(UInt64(length)))
                    partStored?(number)
                }
                inFlight += 1
            }
            try await group.waitForAll()
        }
        let read = SignatureV4.hex(whole.finalize())
        guard read == expected else {
            // The source is not what it should be: no object is made of it.
            try? await client.abortMultipartUpload(key, uploadID: upload.uploadID)
            if let stateFile { try? FileManager.default.removeItem(at: stateFile) }
            throw ObjectStoreError(.mismatch, "\(key) was read as SHA-256 \(read.prefix(16))…, not the \(expected.prefix(16))… it should have: its source changed")
        }
        try await wait(until: pace.allSent)
        let etags = md5s.enumerated().map { ($0.offset + 1, SignatureV4.hex($0.element)) }
        let etag = try await client.completeMultipartUpload(key, uploadID: upload.uploadID, parts: etags)
        let joined = Self.multipartETag(md5s)
        guard etag == joined else {
            throw ObjectStoreError(.mismatch, "the store joined \(key) into an object with entity tag \(etag), not \(joined) of the parts sent")
        }
        await abortLeftovers(client, keeping: upload.uploadID)
        return StoredObject(key: key, size: size, sha256: expected, etag: etag)
    }

    /// The object under `key`, when it is already this one (same size and SHA-256); any upload of the key
    /// still open is aborted then.
    private func existing(_ client: S3Client, size: UInt64, sha256: String) async throws -> StoredObject? {
        guard let head = try await client.head(key), head.size == size, head.sha256 == sha256 else { return nil }
        await abortLeftovers(client, keeping: nil)
        return StoredObject(key: key, size: size, sha256: sha256, etag: head.etag)
    }

    /// The object is whole: every other multipart upload of its key is aborted (the one `stateFile` notes,
    /// and any the store lists, begun by a run that stopped before noting it), then `stateFile` removed.
    /// Best effort: a store that fails to answer here leaves an upload that the next run aborts. Uploads
    /// without a `stateFile` are not resumed, so they leave none to look for.
    private func abortLeftovers(_ client: S3Client, keeping kept: String?) async {
        // Only resumable uploads (a recorded file's) can have left one; a photo's costs no request here.
        guard stateFile != nil else { return }
        var leftovers = Set<String>()
        if let noted = loadState(), noted.key == key { leftovers.insert(noted.uploadID) }
        if let listed = try? await client.listMultipartUploads(prefix: key) {
            for upload in listed where upload.key == key { leftovers.insert(upload.uploadID) }
        }
        if let kept { leftovers.remove(kept) }
        var aborted = true
        for uploadID in leftovers.sorted() {
            do {
                try await client.abortMultipartUpload(key, uploadID: uploadID)
            } catch let error as ObjectStoreError where error.kind == .notFound {
                // Gone already.
            } catch {
                aborted = false
            }
        }
        // The noted id is kept while its upload may still be open, so that the next run aborts it.
        if aborted, let stateFile { try? FileManager.default.removeItem(at: stateFile) }
    }

    private func partSize(_ number: Int, of size: UInt64) -> UInt64 {
        let start = UInt64(number - 1) * UInt64(partSize)
        return min(UInt64(partSize), size - start)
    }

    /// S3's entity tag of a multipart object: the MD5 of the parts' MD5s, then `-` and their count.
    public static func multipartETag(_ partMD5s: [[UInt8]]) -> String {
        SignatureV4.hex(Insecure.MD5.hash(data: Data(partMD5s.joined()))) + "-\(partMD5s.count)"
    }

    private func loadState() -> State? {
        guard let stateFile, let data = FileManager.default.contents(atPath: stateFile.path) else { return nil }
        return try? JSONDecoder().decode(State.self, from: data)
    }

    private func saveState(_ state: State) throws {
        guard let stateFile else { return }
        let data = try JSONEncoder().encode(state)
        try DurableFile.write(Array(data), to: stateFile)
    }

    /// Bytes sent so far, across parts in flight.
    private final class Counter: @unchecked Sendable {
        private let lock = NSLock()
        private var total: UInt64 = 0
        func add(_ bytes: UInt64) -> UInt64 {
            lock.lock()
            defer { lock.unlock() }
            total += bytes
            return total
        }
    }
}

/// An upload's bytes: a buffer, or a file read in pieces with `pread` on a thread pool (never on the
/// cooperative pool or an event loop), so that parts read at once never disturb each other.
private final class SourceReader: Sendable {
    private let buffer: ByteBuffer?
    private let file: NIOFileHandle?
    private let threadPool: NIOThreadPool
    let size: UInt64
    let what: String

    private init(buffer: ByteBuffer?, file: NIOFileHandle?, size: UInt64, what: String, threadPool: NIOThreadPool) {
        self.buffer = buffer
        self.file = file
        self.size = size
        self.what = what
        self.threadPool = threadPool
    }

    static func open(_ source: ObjectUpload.Source, what: String, on threadPool: NIOThreadPool) async throws -> SourceReader {
        switch source {
        case .bytes(let bytes):
            return SourceReader(buffer: bytes, file: nil, size: UInt64(bytes.readableBytes), what: what, threadPool: threadPool)
        case .file(let path):
            let (file, size) = try await threadPool.runIfActive { () throws -> (NIOFileHandle, UInt64) in
                let file: NIOFileHandle
                do {
                    file = try NIOFileHandle(_deprecatedPath: path)
                } catch {
                    throw ObjectStoreError(.notFound, "cannot read \(path) to upload it as \(what): \(error)")
                }
                let size = try file.withUnsafeFileDescriptor { fd in
                    var stats = stat()
                    guard fstat(fd, &stats) == 0 else { throw ObjectStoreError(.notFound, "cannot size \(path): \(String(cString: strerror(errno)))") }
                    return UInt64(stats.st_size)
                }
                return (file, size)
            }
            return SourceReader(buffer: nil, file: file, size: size, what: what, threadPool: threadPool)
        }
    }

    func close() { try? file?.close() }

    func read(at offset: UInt64, count: Int) async throws -> ByteBuffer {
        if let buffer { return buffer.getSlice(at: buffer.readerIndex + Int(offset), length: count) ?? ByteBuffer() }
        let (file, what) = (file!, what)
        return try await threadPool.runIfActive {
            try file.withUnsafeFileDescriptor { fd in
                var bytes = ByteBufferAllocator().buffer(capacity: count)
                let read = bytes.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { target in
                    PositionalRead.read(fd, into: UnsafeMutableRawBufferPointer(rebasing: target.prefix(count)), at: offset)
                }
                guard read == count else {
                    throw ObjectStoreError(.mismatch, "the file uploaded as \(what) changed while it was read (\(read) of \(count) bytes at \(offset))")
                }
                return bytes
            }
        }
    }

    /// The SHA-256 of the whole (hex), read in pieces.
    func sha256() async throws -> String {
        var sha = SHA256()
        var offset: UInt64 = 0
        while offset < size {
            let piece = try await read(at: offset, count: Int(min(UInt64(8 << 20), size - offset)))
            piece.withUnsafeReadableBytes { sha.update(bufferPointer: $0) }
            offset += UInt64(piece.readableBytes)
        }
        return SignatureV4.hex(sha.finalize())
    }
}

/// The clock an upload keeps its rate on, and how it waits.
public struct UploadPacing: Sendable {
    /// Now, from any fixed origin.
    public var now: @Sendable () -> Duration
    /// Returns after `duration` (or throws when the task is cancelled).
    public var sleep: @Sendable (Duration) async throws -> Void

    public init(now: @escaping @Sendable () -> Duration, sleep: @escaping @Sendable (Duration) async throws -> Void) {
        self.now = now
        self.sleep = sleep
    }

    /// The continuous clock, and `Task.sleep`.
    public static let system: UploadPacing = {
        let clock = ContinuousClock()
        let origin = clock.now
        return UploadPacing(now: { clock.now - origin }, sleep: { try await Task.sleep(for: $0) })
    }()
}

/// When an upload's bytes may leave, at `bytesPerSecond`: each piece once the bytes before it fit the
/// rate since the start (the first at once), and the upload's end once all of them do. Pure: the caller
/// keeps the clock.
public struct UploadPace: Sendable, Equatable {
    /// 0: no limit.
    public let bytesPerSecond: UInt64
    /// Bytes handed to `send` so far.
    public private(set) var sent: UInt64 = 0

    public init(bytesPerSecond: UInt64) {
        self.bytesPerSecond = bytesPerSecond
    }

    /// `bytes` are about to leave: how long after the upload's start they may.
    public mutating func send(_ bytes: UInt64) -> Duration {
        defer { sent += bytes }
        return time(for: sent)
    }

    /// How long after the start the upload may end: when every byte sent fits the rate.
    public var allSent: Duration { time(for: sent) }

    private func time(for bytes: UInt64) -> Duration {
        guard bytesPerSecond > 0, bytes > 0 else { return .zero }
        let (seconds, rest) = bytes.quotientAndRemainder(dividingBy: bytesPerSecond)
        // rest < bytesPerSecond, so the nanoseconds fit; exact, so a rate is kept to the nanosecond.
        let (nanoseconds, _) = bytesPerSecond.dividingFullWidth(rest.multipliedFullWidth(by: 1_000_000_000))
        return .seconds(Int64(clamping: seconds)) + .nanoseconds(Int64(nanoseconds))
    }
}
