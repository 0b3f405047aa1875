import CamRigCapture
import CamRigDeviceModel
import CamRigDevices
import CamRigFiles
import CamRigWire
import CamRigWireModel
import Foundation
import NIOConcurrencyHelpers
import NIOCore

/// Deferred photos waiting for their processing stage: the frames they are made from, on disk.
///
/// A deferred photo is saved here (durably, in the spool directory's `deferred/` folder) before its
/// proxy is stored in the spool, and deleted once its final is: after a crash or restart every photo
/// saved here is made, unless its final is in the spool already. File format (`deferred/ID.photo`, a
/// `SpoolRecord`): a big-endian u32 length, a `DeferredPhoto` protobuf of that length, then the frames'
/// payloads in order. Each frame's header is the `VideoFrame` a stream sends, read back with the one
/// mapping `CapturedFrame(_:bytes:)`.
public final class DeferredPhotoStore: Sendable {
    public let directory: URL
    /// Photo ids waiting, oldest first.
    private let waiting = NIOLockedValueBox<[String]>([])

    /// A photo to be made: what the final result will say, the frames, and the plan.
    struct Job: Sendable {
        var template: WirePhotoResult
        var frames: [CapturedFrame]
        var plan: PhotoPlan
    }

    /// Opens the folder (created with the spool's, which exists by now; saving reports a folder that
    /// cannot be made).
    init(spoolDirectory: URL) {
        directory = spoolDirectory.appendingPathComponent("deferred")
        let manager = FileManager.default
        try? manager.createDirectory(at: directory, withIntermediateDirectories: true)
        let files = ((try? manager.contentsOfDirectory(atPath: directory.path)) ?? []).filter { $0.hasSuffix(".photo") }
        // Oldest first: by modification time, then name.
        let dated = files.map { name -> (String, Date) in
            let date = (try? manager.attributesOfItem(atPath: directory.appendingPathComponent(name).path)[.modificationDate] as? Date) ?? .distantPast
            return (String(name.dropLast(".photo".count)), date)
        }
        waiting.withLockedValue { $0 = dated.sorted { ($0.1, $0.0) < ($1.1, $1.0) }.map(\.0) }
    }

    /// Photo ids waiting for processing, oldest first.
    var ids: [String] { waiting.withLockedValue { $0 } }
    var count: Int { waiting.withLockedValue { $0.count } }
    func contains(_ id: String) -> Bool { waiting.withLockedValue { $0.contains(id) } }

    private func url(_ id: String) -> URL { directory.appendingPathComponent("\(id).photo") }

    /// Saves a photo's frames durably before its proxy is delivered.
    func save(_ job: Job) throws {
        var message = WireDeferredPhoto()
        message.result = job.template
        message.dimensions = WireDimensions(job.plan.dimensions)
        message.qualityPrioritization = WireQualityPrioritization(job.plan.level)
        message.outputType = WirePhotoOutputType(rawValue: job.plan.output.rawValue) ?? .frame
        message.note = job.plan.note
        message.embeddedDataRows = UInt32(job.frames.first?.embeddedDataRows ?? 0)
        message.frames = job.frames.map { WireVideoFrame($0, streamID: "", droppedBefore: 0) }
        message.payloadLengths = job.frames.map { UInt32($0.bytes.readableBytes) }
        let data = SpoolRecord.encode(header: try message.serializedBytes(), payloads: job.frames.map(\.bytes))
        let id = job.template.photoID
        do {
            try DurableFile.write(data, to: url(id), permissions: 0o640, temporaryDirectory: directory.deletingLastPathComponent().appendingPathComponent("tmp"))
        } catch let error as DurableFileError where error.step == .flushDirectory {
            // Whole and in place; only its survival of a power cut is in doubt.
        }
        waiting.withLockedValue { if !$0.contains(id) { $0.append(id) } }
    }

    /// Reads a saved photo back.
    func load(_ id: String) throws -> Job {
        let record: SpoolRecord
        do {
            record = try SpoolRecord(decoding: Data(contentsOf: url(id)))
        } catch let error as SpoolRecord.DecodingError {
            throw WireProtocolError(.internal, "deferred photo \(id) is \(error)")
        }
        let message = try WireDeferredPhoto(serializedBytes: record.header)
        let payload = record.payload
        var offset = payload.startIndex
        var frames: [CapturedFrame] = []
        guard message.frames.count == message.payloadLengths.count else {
            throw WireProtocolError(.internal, "deferred photo \(id) lists \(message.frames.count) frames but \(message.payloadLengths.count) payloads")
        }
        for (header, size) in zip(message.frames, message.payloadLengths) {
            guard offset + Int(size) <= payload.endIndex else { throw WireProtocolError(.internal, "deferred photo \(id) is truncated") }
            let pixelFormat = PixelFormat(rawValue: header.pixelFormat)
            // The frame's rows must fit its bytes, as the camera delivered them.
            guard pixelFormat.isCompressed || (header.bytesPerLine > 0 && Int(header.bytesPerLine) * Int(header.dimensions.height) <= Int(size)) else {
                throw WireProtocolError(.internal, "deferred photo \(id) has a frame whose layout does not fit its \(size) bytes")
            }
            var frame = CapturedFrame(header, bytes: ByteBuffer(bytes: payload[offset..<(offset + Int(size))]))
            frame.embeddedDataRows = Int(message.embeddedDataRows)
            frames.append(frame)
            offset += Int(size)
        }
        guard !frames.isEmpty else { throw WireProtocolError(.internal, "deferred photo \(id) holds no frames") }
        var plan = PhotoPlan(requested: PhotoQualityPrioritization(message.qualityPrioritization), output: PhotoOutputType(message.outputType), format: frames[0].format)
        plan.dimensions = message.dimensions.dimensions
        plan.note = message.note
        return Job(template: message.result, frames: frames, plan: plan)
    }

    /// Sets aside a saved photo that cannot be read (`ID.photo.unreadable`, kept for inspection): its
    /// proxy stays the photo.
    func setAside(_ id: String) {
        waiting.withLockedValue { $0.removeAll { $0 == id } }
        try? FileManager.default.moveItem(at: url(id), to: directory.appendingPathComponent("\(id).photo.unreadable"))
    }

    /// Puts a photo whose final could not be made behind the others, so they are made first.
    func moveToBack(_ id: String) {
        waiting.withLockedValue { waiting in
            guard let index = waiting.firstIndex(of: id) else { return }
            waiting.append(waiting.remove(at: index))
        }
    }

    /// Deletes a photo once its final is in the spool.
    func remove(_ id: String) {
        waiting.withLockedValue { $0.removeAll { $0 == id } }
        try? FileManager.default.removeItem(at: url(id))
        try? DurableFile.flushDirectory(directory)
    }
}
