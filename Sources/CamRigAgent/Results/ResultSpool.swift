import CamRigCapture
import CamRigFiles
import CamRigWire
import Foundation
import NIOConcurrencyHelpers
import NIOCore

/// Captured results on disk until a coordinator has them.
///
/// A result is written to `tmp/`, flushed to disk and renamed into `results/` (`DurableFile`) before
/// anyone is told about it, so a crash leaves either a whole result or none. It is deleted only when acknowledged; after a
/// restart everything in `results/` is offered again. When a new result would exceed the size cap the
/// capture is refused (`SPOOL_FULL`): old results are never dropped to make room.
///
/// File format (`results/ID.result`): a big-endian u32 length, a `PhotoResult` protobuf of that length,
/// then the image bytes.
public final class ResultSpool: Sendable {
    public let directory: URL
    public let capacityBytes: UInt64

    struct Entry: Sendable {
        var result: WirePhotoResult
        var size: UInt64
    }

    private let entries = NIOLockedValueBox<[String: Entry]>([:])
    /// Results acknowledged lately, so that an acknowledgement repeated after a lost reply is not unknown.
    private let recentlyAcknowledged = NIOLockedValueBox(RecentIDs(capacity: 4096))

    public init(directory: URL, capacityBytes: UInt64) throws {
        self.directory = directory
        self.capacityBytes = capacityBytes
        let manager = FileManager.default
        try manager.createDirectory(at: directory.appendingPathComponent("results"), withIntermediateDirectories: true)
        try manager.createDirectory(at: directory.appendingPathComponent("tmp"), withIntermediateDirectories: true)
        // Half-written results from a crash are not results.
        for leftover in (try? manager.contentsOfDirectory(atPath: directory.appendingPathComponent("tmp").path)) ?? [] {
            try? manager.removeItem(at: directory.appendingPathComponent("tmp").appendingPathComponent(leftover))
        }
        var found: [String: Entry] = [:]
        for file in try manager.contentsOfDirectory(atPath: directory.appendingPathComponent("results").path) where file.hasSuffix(".result") {
            let url = directory.appendingPathComponent("results").appendingPathComponent(file)
            guard let data = try? Data(contentsOf: url, options: .mappedIfSafe), data.count >= 4 else { continue }
            let length = Int(data.prefix(4).reduce(0) { $0 << 8 | UInt32($1) })
            guard data.count >= 4 + length, let result = try? WirePhotoResult(serializedBytes: Array(data[4..<(4 + length)])) else { continue }
            found[result.resultID] = Entry(result: result, size: UInt64(data.count))
        }
        entries.withLockedValue { $0 = found }
    }

    /// Bytes in use.
    public var usedBytes: UInt64 { entries.withLockedValue { $0.values.reduce(0) { $0 + $1.size } } }
    /// Results waiting for acknowledgement.
    public var count: Int { entries.withLockedValue { $0.count } }
    /// Whether a result with this id waits in the spool, or was acknowledged lately.
    public func contains(_ id: String) -> Bool {
        entries.withLockedValue { $0[id] != nil } || recentlyAcknowledged.withLockedValue { $0.contains(id) }
    }

    /// Stores a result durably. Throws `SPOOL_FULL` (keeping everything already stored) when it does not fit.
    public func store(_ result: WirePhotoResult, image: ByteBuffer) throws {
        let header: [UInt8] = try result.serializedBytes()
        let size = UInt64(4 + header.count + image.readableBytes)
        let fits = entries.withLockedValue { entries in
            entries.values.reduce(0) { $0 + $1.size } + size <= capacityBytes
        }
        guard fits else {
            throw WireProtocolError(
                .spoolFull,
                "result spool \(directory.path) is full (\(usedBytes) of \(capacityBytes) bytes, \(count) results): fetch and acknowledge results, or raise the spool size"
            )
        }
        var data = Data(capacity: Int(size))
        withUnsafeBytes(of: UInt32(header.count).bigEndian) { data.append(contentsOf: $0) }
        data.append(contentsOf: header)
        image.withUnsafeReadableBytes { data.append(contentsOf: $0) }
        let final = directory.appendingPathComponent("results").appendingPathComponent("\(result.resultID).result")
        do {
            // Made in tmp/ (emptied at start-up) and renamed into results/: a crash leaves a whole result or none.
            try DurableFile.write(data, to: final, permissions: 0o640, temporaryDirectory: directory.appendingPathComponent("tmp"))
        } catch let error as DurableFileError where error.step == .flushDirectory {
            // The result is whole and in place; only its survival of a power cut is in doubt. It is
            // counted and offered like any other rather than left behind as an orphan.
        } catch {
            throw WireProtocolError(.internal, "cannot store result \(result.resultID) in the spool: \(error)")
        }
        entries.withLockedValue { $0[result.resultID] = Entry(result: result, size: size) }
    }

    /// Results of `session` (all sessions when empty), oldest first.
    public func pending(session: String) -> [WirePhotoResult] {
        entries.withLockedValue { entries in
            entries.values.map(\.result).filter { session.isEmpty || $0.sessionID == session }
                .sorted { ($0.captureTime.nanoseconds, $0.resultID) < ($1.captureTime.nanoseconds, $1.resultID) }
        }
    }

    /// The image bytes of a stored result.
    public func image(of result: WirePhotoResult) throws -> ByteBuffer {
        let url = directory.appendingPathComponent("results").appendingPathComponent("\(result.resultID).result")
        let data = try Data(contentsOf: url)
        let length = Int(data.prefix(4).reduce(0) { $0 << 8 | UInt32($1) })
        return ByteBuffer(bytes: data[(4 + length)...])
    }

    /// Deletes acknowledged results; returns how many existed and the ids that are unknown: neither
    /// stored nor acknowledged recently (an acknowledgement repeated after a lost reply is not unknown).
    public func acknowledging(_ ids: [String]) -> (removed: Int, unknown: [String]) {
        var removed = 0
        var unknown: [String] = []
        for id in ids {
            guard entries.withLockedValue({ $0.removeValue(forKey: id) }) != nil else {
                if !recentlyAcknowledged.withLockedValue({ $0.contains(id) }) { unknown.append(id) }
                continue
            }
            try? FileManager.default.removeItem(at: directory.appendingPathComponent("results").appendingPathComponent("\(id).result"))
            recentlyAcknowledged.withLockedValue { $0.insert(id) }
            removed += 1
        }
        try? DurableFile.flushDirectory(directory.appendingPathComponent("results"))
        return (removed, unknown)
    }
}

/// The last `capacity` ids inserted, as a set.
struct RecentIDs: Sendable {
    let capacity: Int
    private var order: [String] = []
    private var next = 0
    private var members: Set<String> = []

    init(capacity: Int) {
        self.capacity = capacity
    }

    func contains(_ id: String) -> Bool { members.contains(id) }

    mutating func insert(_ id: String) {
        guard !members.contains(id) else { return }
        if order.count < capacity {
            order.append(id)
        } else {
            members.remove(order[next])
            order[next] = id
            next = (next + 1) % capacity
        }
        members.insert(id)
    }
}
