import CamRigCapture
import CamRigStorage
import Crypto
import Foundation
import Testing

/// A captures folder asked whether it already holds a recorded file its host no longer has.
@Suite("Recorded files looked up in a captures folder", .timeLimit(.minutes(1)))
struct RecordedFileLookupTests {
    @Test("a whole file with the recorded size and SHA-256 matches; other bytes differ, saying what they are; a partial copy or none is absent")
    func lookUp() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("camrig-lookup-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let store = try CaptureStore(root: root)
        let folder = root.appendingPathComponent("capture")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let capture = CaptureHandle(id: "capture", kind: .recording, location: folder)
        let bytes = (0..<70_000).map { UInt8(truncatingIfNeeded: $0 &* 13) }
        let sha256 = SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()

        #expect(try await store.lookUp("cam0.mkv", size: 70_000, sha256: sha256, in: capture) == .absent)
        try await store.receive(Array(bytes[..<30_000]), into: "cam0.mkv", at: 0, in: capture)
        #expect(try await store.lookUp("cam0.mkv", size: 70_000, sha256: sha256, in: capture) == .absent, "a partial copy is not the file")
        try await store.receive(Array(bytes[30_000...]), into: "cam0.mkv", at: 30_000, in: capture)
        try await store.completeFile("cam0.mkv", size: 70_000, sha256: sha256, in: capture)
        #expect(try await store.lookUp("cam0.mkv", size: 70_000, sha256: sha256, in: capture) == .matches)

        try Data(repeating: 1, count: 70_000).write(to: folder.appendingPathComponent("cam1.mkv"))
        guard case .differs(let what) = try await store.lookUp("cam1.mkv", size: 70_000, sha256: sha256, in: capture) else {
            Issue.record("other bytes under the name must differ")
            return
        }
        #expect(what.contains("cam1.mkv") && what.contains("70000 bytes"), "\(what)")
        await #expect(throws: (any Error).self) { _ = try await store.lookUp("../escape", size: 1, sha256: sha256, in: capture) }
    }
}
