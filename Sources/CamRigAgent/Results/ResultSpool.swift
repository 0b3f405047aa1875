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
/// File format (`results/ID.result`, a `SpoolRecord`): a big-endian u32 length, a `PhotoResult` protobuf
/// of that length, then the image bytes. What the spool holds is one `State` under one lock; files are
/// written and deleted outside it.
public final class ResultSpool: Sendable {
    public let directory: URL
    public let capacityBytes: UInt64

    struct Entry: Sendable {
        var result: WirePhotoResult
        var size: UInt64
    }

    struct State {
        var entries: [String: Entry] = [:]
        /// Results acknowledged lately, so that an acknowledgement repeated after a lost reply is not unknown.
        var recentlyAcknowledged = RecentIDs(capacity: 4096)

        var usedBytes: UInt64 { entries.values.reduce(0) { $0 + $1.size } }
    }

    private let state = NIOLockedValueBox(State())

    public init(directory: URL, capacityBytes: UInt64) throws {
        self.directory = directory
        self.capacityBytes = capacityBytes
        let manager = FileManager.default
        try manager.createDirectory(at: directory.appendingPathComponent("results"), withIntermediateDirectories: true)
        try manager.createDirectory(at: directory.appendingPathComponent("tmp"), withIntermediateDirectories: true)
        try manager.createDirectory(at: directory.appendingPathComponent("uploads"), withIntermediateDirectories: true)
        // Half-written results from a crash are not results.
        for leftover in (try? manager.contentsOfDirectory(atPath: directory.appendingPathComponent("tmp").path)) ?? [] {
            try? manager.removeItem(at: directory.appendingPathComponent("tmp").appendingPathComponent(leftover))
        }
        var found: [String: Entry] = [:]
        for file in try manager.contentsOfDirectory(atPath: directory.appendingPathComponent("results").path) where file.hasSuffix(".result") {
            let url = directory.appendingPathComponent("results").appendingPathComponent(file)
            guard let data = try? Data(contentsOf: url, options: .mappedIfSafe), let record = try? SpoolRecord(decoding: data),
                let result = try? WirePhotoResult(serializedBytes: record.header)
            else { continue }
            found[result.resultID] = Entry(result: result, size: UInt64(data.count))
        }
        state.withLockedValue { $0.entries = found }
    }

    /// Bytes in use.
    public var usedBytes: UInt64 { state.withLockedValue { $0.usedBytes } }
    /// Results waiting for acknowledgement.
    public var count: Int { state.withLockedValue { $0.entries.count } }
    /// Whether a result with this id waits in the spool, or was acknowledged lately.
    public func contains(_ id: String) -> Bool {
        state.withLockedValue { $0.entries[id] != nil || $0.recentlyAcknowledged.contains(id) }
    }

    /// Stores a result durably. Throws `SPOOL_FULL` (keeping everything already stored) when it does not fit.
    public func store(_ result: WirePhotoResult, image: ByteBuffer) throws {
        let data = SpoolRecord.encode(header: try result.serializedBytes(), payloads: [image])
        let size = UInt64(data.count)
        let fits = state.withLockedValue { $0.usedBytes + size <= capacityBytes }
        guard fits else {
            throw WireProtocolError(
                .spoolFull,
                "result spool \(directory.path) is full (\(usedBytes) of \(capacityBytes) bytes, \(count) results): fetch and acknowledge results, or raise the spool size"
            )
        }
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
        state.withLockedValue { $0.entries[result.resultID] = Entry(result: result, size: size) }
    }

    /// Results of `session` (all sessions when empty), oldest first.
    public func pending(session: String) -> [WirePhotoResult] {
        state.withLockedValue { state in
            state.entries.values.map(\.result).filter { session.isEmpty || $0.sessionID == session }
                .sorted { ($0.captureTime.nanoseconds, $0.resultID) < ($1.captureTime.nanoseconds, $1.resultID) }
        }
    }

    /// Where an upload of `result`'s image to an object store keeps its state until the store has it
    /// whole (`uploads/ID.json`); deleted with the result.
    public func uploadState(of result: WirePhotoResult) -> URL {
        directory.appendingPathComponent("uploads").appendingPathComponent("\(result.resultID).json")
    }

    /// The image bytes of a stored result.
    public func image(of result: WirePhotoResult) throws -> ByteBuffer {
        let url = directory.appendingPathComponent("results").appendingPathComponent("\(result.resultID).result")
        return ByteBuffer(bytes: try SpoolRecord(decoding: Data(contentsOf: url)).payload)
    }

    /// Deletes acknowledged results; returns how many existed and the ids that are unknown: neither
    /// stored nor acknowledged recently (an acknowledgement repeated after a lost reply is not unknown).
    public func acknowledging(_ ids: [String]) -> (removed: Int, unknown: [String]) {
        let (removed, unknown) = state.withLockedValue { state -> ([String], [String]) in
            var removed: [String] = []
            var unknown: [String] = []
            for id in ids {
                if state.entries.removeValue(forKey: id) != nil {
                    state.recentlyAcknowledged.insert(id)
                    removed.append(id)
                } else if !state.recentlyAcknowledged.contains(id) {
                    unknown.append(id)
                }
            }
            return (removed, unknown)
        }
        for id in removed {
            try? FileManager.default.removeItem(at: directory.appendingPathComponent("results").appendingPathComponent("\(id).result"))
            try? FileManager.default.removeItem(at: directory.appendingPathComponent("uploads").appendingPathComponent("\(id).json"))
        }
        try? DurableFile.flushDirectory(directory.appendingPathComponent("results"))
        return (removed.count, unknown)
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
