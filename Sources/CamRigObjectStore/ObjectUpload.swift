import CamRigCapture
import CamRigFiles
import Crypto
import Foundation
import NIOCore

/// Puts one file (or buffer) into the store as one object, checked end to end, and resumably.
///
/// - Small objects (up to one part) go in one PUT.
/// - Larger ones go as a multipart upload whose id is kept in `stateFile` before the first part leaves:
///   an upload cut off (the store stopped, the host restarted) resumes with the parts the store already
///   holds, each checked against the MD5 of the same bytes here, and sends only the rest.
/// - The store checks each request's MD5 (Content-MD5) and the signature covers its SHA-256; the entity
///   tags it answers are checked here too, and the object carries the SHA-256 of the whole as metadata.
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

    public static let minimumPartSize = 5 << 20
    public static let defaultPartSize = 8 << 20

    public init(
        key: String, source: Source, partSize: Int = ObjectUpload.defaultPartSize, stateFile: URL? = nil, contentType: String? = nil,
        concurrency: Int = 4
    ) {
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
    public func run(with client: S3Client, progress: (@Sendable (UInt64) -> Void)? = nil) async throws -> StoredObject {
        let reader = try SourceReader(source, what: key)
        defer { reader.close() }
        let size = reader.size
        if size <= UInt64(partSize) {
            let body = try reader.read(at: 0, count: Int(size))
            let stored = try await client.put(key, body: body, contentType: contentType)
            progress?(size)
            if let stateFile { try? FileManager.default.removeItem(at: stateFile) }
            return stored
        }
        let (sha256, partMD5s) = try reader.sums(partSize: partSize)
        var state = loadState().flatMap { $0.key == key && $0.size == size && $0.sha256 == sha256 && $0.partSize == partSize ? $0 : nil }
        var held: [Int: (etag: String, size: UInt64)] = [:]
        if let known = state {
            do {
                held = try await client.listParts(key, uploadID: known.uploadID)
            } catch let error as ObjectStoreError where error.kind == .notFound {
                // Completed before (its answer lost) or aborted: the object says which.
                if let whole = try await existing(client, size: size, sha256: sha256) { return whole }
                state = nil
            }
        } else if let whole = try await existing(client, size: size, sha256: sha256) {
            return whole
        }
        let upload: State
        if let state {
            upload = state
        } else {
            upload = State(key: key, uploadID: try await client.createMultipartUpload(key, sha256: sha256, contentType: contentType), partSize: partSize, size: size, sha256: sha256)
            try saveState(upload)
        }
        let count = partMD5s.count
        let sent = Counter()
        var etags = [String](repeating: "", count: count)
        for number in 1...count {
            let md5 = SignatureV4.hex(partMD5s[number - 1])
            if let part = held[number], part.etag == md5, part.size == partSize(number, of: size) {
                etags[number - 1] = md5
                progress?(sent.add(part.size))
            }
        }
        let missing = (1...count).filter { etags[$0 - 1].isEmpty }
        try await withThrowingTaskGroup(of: (Int, String).self) { group in
            var next = missing.makeIterator()
            func addNext() throws {
                guard let number = next.next() else { return }
                let offset = UInt64(number - 1) * UInt64(partSize)
                let length = Int(partSize(number, of: size))
                let body = try reader.read(at: offset, count: length)
                group.addTask {
                    let etag = try await client.uploadPart(key, uploadID: upload.uploadID, number: number, body: body)
                    progress?(sent.add(UInt64(length)))
                    partStored?(number)
                    return (number, etag)
                }
            }
            for _ in 0..<concurrency { try addNext() }
            while let (number, etag) = try await group.next() {
                etags[number - 1] = etag
                try addNext()
            }
        }
        let etag = try await client.completeMultipartUpload(key, uploadID: upload.uploadID, parts: etags.enumerated().map { ($0.offset + 1, $0.element) })
        let expected = Self.multipartETag(partMD5s)
        guard etag == expected else {
            throw ObjectStoreError(.mismatch, "the store joined \(key) into an object with entity tag \(etag), not \(expected) of the parts sent")
        }
        if let stateFile { try? FileManager.default.removeItem(at: stateFile) }
        return StoredObject(key: key, size: size, sha256: sha256, etag: etag)
    }

    /// The object under `key`, when it is already this one (same size and SHA-256).
    private func existing(_ client: S3Client, size: UInt64, sha256: String) async throws -> StoredObject? {
        guard let head = try await client.head(key), head.size == size, head.sha256 == sha256 else { return nil }
        if let stateFile { try? FileManager.default.removeItem(at: stateFile) }
        return StoredObject(key: key, size: size, sha256: sha256, etag: head.etag)
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

/// The bytes of an upload's source, read by range.
private final class SourceReader: @unchecked Sendable {
    private let buffer: ByteBuffer?
    private let handle: FileHandle?
    private let lock = NSLock()
    let size: UInt64
    let what: String

    init(_ source: ObjectUpload.Source, what: String) throws {
        self.what = what
        switch source {
        case .bytes(let bytes):
            buffer = bytes
            handle = nil
            size = UInt64(bytes.readableBytes)
        case .file(let path):
            guard let handle = FileHandle(forReadingAtPath: path) else {
                throw ObjectStoreError(.notFound, "cannot read \(path) to upload it as \(what)")
            }
            self.handle = handle
            buffer = nil
            size = try handle.seekToEnd()
        }
    }

    func close() { try? handle?.close() }

    func read(at offset: UInt64, count: Int) throws -> ByteBuffer {
        if let buffer { return buffer.getSlice(at: buffer.readerIndex + Int(offset), length: count) ?? ByteBuffer() }
        lock.lock()
        defer { lock.unlock() }
        try handle!.seek(toOffset: offset)
        let data = try handle!.read(upToCount: count) ?? Data()
        guard data.count == count else {
            throw ObjectStoreError(.mismatch, "the file uploaded as \(what) changed while it was read (\(data.count) of \(count) bytes at \(offset))")
        }
        return ByteBuffer(data: data)
    }

    /// The SHA-256 of the whole (hex) and the MD5 of each part, in one read.
    func sums(partSize: Int) throws -> (String, [[UInt8]]) {
        var sha = SHA256()
        var md5s: [[UInt8]] = []
        var offset: UInt64 = 0
        while offset < size {
            let part = try read(at: offset, count: Int(min(UInt64(partSize), size - offset)))
            part.withUnsafeReadableBytes {
                sha.update(bufferPointer: $0)
                md5s.append(Array(Insecure.MD5.hash(data: $0)))
            }
            offset += UInt64(part.readableBytes)
        }
        return (SignatureV4.hex(sha.finalize()), md5s)
    }
}
