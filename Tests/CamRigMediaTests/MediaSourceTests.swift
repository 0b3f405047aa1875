import CamRigMedia
import Foundation
import Testing

/// `MediaReader(source:name:)`: a recorded file read through a caller's reads by offset (as the service
/// reads a video in an object store), frame for frame as the same file read by path.
@Suite("Recorded files read from a source", .timeLimit(.minutes(1)))
struct MediaSourceTests {
    /// A file in memory that gives at most `chunk` bytes a read, and fails from byte `failAt` on.
    final class MemorySource: MediaSource {
        struct Failure: Error, Equatable { let offset: Int64 }
        let bytes: [UInt8]
        let chunk: Int
        let failAt: Int64?
        var reads = 0
        init(_ bytes: [UInt8], chunk: Int, failAt: Int64? = nil) {
            self.bytes = bytes
            self.chunk = chunk
            self.failAt = failAt
        }
        var size: Int64 { Int64(bytes.count) }
        func read(at offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
            reads += 1
            let count = max(0, min(buffer.count, chunk, bytes.count - Int(offset)))
            if let failAt, offset + Int64(count) > failAt { throw Failure(offset: offset) }
            bytes.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[Int(offset)..<Int(offset) + count])) }
            return count
        }
    }

    static let grey: UInt32 = 0x5945_5247  // 'GREY'

    /// A raw greyscale recording of `frames` 64x32 frames, frame i filled with i, 30 fps; its path.
    static func recording(frames: Int) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("camrig-source-\(UUID().uuidString).mkv").path
        let writer = try MediaWriter(
            path: path, options: .init(codec: .raw, pixelFormat: grey, width: 64, height: 32, bytesPerLine: 64, rate: (30, 1)))
        for index in 0..<frames {
            let frame = [UInt8](repeating: UInt8(index), count: 64 * 32)
            try frame.withUnsafeBytes { try writer.write($0, at: Int64(index) * 33_333_333) }
        }
        try writer.close()
        return path
    }

    static func frames(_ reader: MediaReader) throws -> [(bytes: [UInt8], nanoseconds: Int64)] {
        var frames: [(bytes: [UInt8], nanoseconds: Int64)] = []
        while let frame = try reader.next() { frames.append(frame) }
        return frames
    }

    @Test("every frame and its time read through short reads by offset are the file's as read by path")
    func sameFrames() throws {
        let path = try Self.recording(frames: 90)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let expected = try Self.frames(try MediaReader(path: path))
        #expect(expected.count == 90)
        let source = MemorySource(Array(try Data(contentsOf: URL(fileURLWithPath: path))), chunk: 1000)
        let reader = try MediaReader(source: source, name: "memory.mkv")
        #expect(reader.info.width == 64 && reader.info.height == 32 && reader.info.codec == .raw)
        let read = try Self.frames(reader)
        #expect(read.count == expected.count)
        #expect(zip(read, expected).allSatisfy { $0.bytes == $1.bytes && $0.nanoseconds == $1.nanoseconds })
        #expect(read.last?.bytes.allSatisfy { $0 == 89 } == true)
        #expect(source.reads >= source.bytes.count / 1000, "the file came through the source's reads")
    }

    @Test("a source that fails mid-file: its own error comes out of the reader, as it threw it")
    func failureIsTheSources() throws {
        let path = try Self.recording(frames: 90)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: path)))
        let half = Int64(bytes.count / 2)
        var thrown: (any Error)?
        var frames = 0
        do {
            let reader = try MediaReader(source: MemorySource(bytes, chunk: 4096, failAt: half), name: "memory.mkv")
            while try reader.next() != nil { frames += 1 }
        } catch {
            thrown = error
        }
        let failure = try #require(thrown as? MemorySource.Failure, "\(String(describing: thrown))")
        #expect(failure.offset < half && failure.offset + 4096 > half)
        #expect(frames > 0 && frames < 90, "frames before the failure are read: \(frames)")
        // A source that fails at once fails the open with its own error.
        #expect(throws: MemorySource.Failure.self) { try MediaReader(source: MemorySource(bytes, chunk: 4096, failAt: 0), name: "memory.mkv") }
    }
}
