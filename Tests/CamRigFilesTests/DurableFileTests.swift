import CamRigFiles
import Foundation
import Testing

/// The one durable writer: whole files, no leftovers, errors that name the path and the reason.
@Suite("Durable file", .timeLimit(.minutes(1)))
struct DurableFileTests {
    static func scratch() throws -> URL {
        let url = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent(
            "camrig-durable-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    static func leftovers(in directory: URL) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasSuffix(".partial") }
    }

    @Test("a write replaces the file whole, with the permissions asked for, and leaves no temporary file")
    func writesAndReplaces() throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let target = directory.appendingPathComponent("result.bin")
        try DurableFile.write([UInt8](repeating: 1, count: 100_000), to: target, permissions: 0o640)
        try DurableFile.write(Data("second".utf8), to: target, permissions: 0o640)
        #expect(try Data(contentsOf: target) == Data("second".utf8))
        let attributes = try FileManager.default.attributesOfItem(atPath: target.path)
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o640)
        #expect(try Self.leftovers(in: directory).isEmpty)
    }

    @Test("bytes are written straight from a buffer, also without flushing, and through another temporary directory")
    func fromBufferAndTemporaryDirectory() throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let temporary = directory.appendingPathComponent("tmp")
        let results = directory.appendingPathComponent("results")
        try FileManager.default.createDirectory(at: temporary, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: results, withIntermediateDirectories: true)
        let bytes: [UInt8] = Array(0..<255)
        try bytes.withUnsafeBytes {
            try DurableFile.write($0, to: results.appendingPathComponent("a.result"), temporaryDirectory: temporary)
        }
        try bytes.withUnsafeBytes {
            try DurableFile.write($0, to: results.appendingPathComponent("b.raw"), guarantee: .atomic)
        }
        #expect(try Data(contentsOf: results.appendingPathComponent("a.result")) == Data(bytes))
        #expect(try Data(contentsOf: results.appendingPathComponent("b.raw")) == Data(bytes))
        #expect(try FileManager.default.contentsOfDirectory(atPath: temporary.path).isEmpty)
        #expect(try Self.leftovers(in: results).isEmpty)
    }

    @Test("a failed write throws an error naming the step, the path and the system's reason")
    func failureNamesPathAndReason() throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let target = directory.appendingPathComponent("missing").appendingPathComponent("file.bin")
        let error = try #require(throws: DurableFileError.self) {
            try DurableFile.write([UInt8]([1, 2, 3]), to: target)
        }
        #expect(error.step == .create)
        #expect(error.code == ENOENT)
        #expect(error.path.hasPrefix(directory.appendingPathComponent("missing").path))
        #expect(error.reason == String(cString: strerror(ENOENT)))
        #expect(error.description.contains(error.reason) && error.description.contains(error.path))
    }
}
