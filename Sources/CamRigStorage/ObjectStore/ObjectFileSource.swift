import CamRigCapture
import CamRigMedia
import CamRigObjectStore
import NIOCore
import NIOPosix

/// A file of a capture in an object store, read as `MediaReader` reads a file on disk: in ranged reads
/// of `ObjectCaptureStore.readPiece`, the last two pieces kept (a Matroska reader looks at the file's
/// end for its index before it reads on from the start). Nothing beyond the frames read is fetched, so
/// a frame near a long recording's start costs a piece or two, not the whole video.
///
/// Its reads wait for the store on the calling thread: use it on `BlockingWork`'s threads, never on a
/// Swift concurrency thread or an event loop. One reader, one thread at a time.
public final class ObjectFileSource: MediaSource {
    public let name: String
    public let size: Int64
    private let store: ObjectCaptureStore
    private let capture: CaptureHandle
    private var pieces: [(offset: Int64, bytes: ByteBuffer)] = []

    /// Asks the store for the file's size: `ObjectStoreError` `.notFound` when it has no such file.
    public init(_ name: String, of capture: CaptureHandle, in store: ObjectCaptureStore) throws {
        self.name = name
        self.capture = capture
        self.store = store
        size = Int64(try Self.waitFor { try await store.fileSize(name, in: capture) })
    }

    public func read(at offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        guard offset >= 0, offset < size, !buffer.isEmpty else { return 0 }
        let piece = try piece(at: offset)
        let start = Int(offset - piece.offset)
        let count = min(buffer.count, piece.bytes.readableBytes - start)
        piece.bytes.withUnsafeReadableBytes { bytes in
            buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[start..<start + count]))
        }
        return count
    }

    private func piece(at offset: Int64) throws -> (offset: Int64, bytes: ByteBuffer) {
        if let kept = pieces.first(where: { offset >= $0.offset && offset < $0.offset + Int64($0.bytes.readableBytes) }) { return kept }
        let (store, name, capture) = (self.store, self.name, self.capture)
        let range = UInt64(offset)..<UInt64(min(offset + Int64(ObjectCaptureStore.readPiece), size))
        let bytes = try Self.waitFor { try await store.readFile(name, in: capture, range: range) }
        guard bytes.readableBytes > 0 else {
            throw StorageError("the store gave no bytes of \(name) at \(offset) of its \(size): the file changed in the store")
        }
        pieces = pieces.suffix(1) + [(offset, bytes)]
        return (offset, bytes)
    }

    /// Runs `work` on Swift concurrency's threads and waits on this one for its result, through a promise
    /// (whose `wait` refuses to run on an event loop, where it would stall the loop).
    private static func waitFor<Value: Sendable>(_ work: @escaping @Sendable () async throws -> Value) throws -> Value {
        let promise = MultiThreadedEventLoopGroup.singleton.any().makePromise(of: Value.self)
        promise.completeWithTask(work)
        return try promise.futureResult.wait()
    }
}

extension RecordingExport {
    /// `setImage(of:in:set:camera:)` for a recording in an object store: read from its video in the
    /// store, in ranged reads up to the frame. Waits for the store: run it on `BlockingWork`'s threads.
    public static func setImage(of manifest: CaptureManifest, in capture: CaptureHandle, of store: ObjectCaptureStore, set: Int, camera: Int) throws -> [UInt8]? {
        try setImage(of: manifest, set: set, camera: camera) { name in
            try MediaReader(source: try ObjectFileSource(name, of: capture, in: store), name: "\(store.storeURL)/\(capture.id)/\(name)")
        }
    }
}
