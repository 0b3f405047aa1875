import CamRigCapture
import Foundation
import Testing

/// A missing result's cause in `manifest.json`: written and read back, read from older manifests, and
/// read as none when a later version wrote one this version does not know.
@Suite("Missing results' causes", .timeLimit(.minutes(1)))
struct MissingCauseTests {
    func decode(_ json: String) throws -> CaptureManifest.Missing {
        try JSONDecoder().decode(CaptureManifest.Missing.self, from: Data(json.utf8))
    }

    func json(reason: String, cause: String? = nil) -> String {
        let field = cause.map { #", "cause": "\#($0)""# } ?? ""
        return
            #"{"camera": 0, "agent": "a", "device": "d", "sessionId": "s", "triggerId": "t", "reason": "\#(reason)", "collectable": true\#(field)}"#
    }

    @Test("every cause is written and read back")
    func roundTrip() throws {
        for cause in CaptureManifest.Missing.Cause.allCases {
            let missing = CaptureManifest.Missing(
                camera: 1, agent: "agent-1", device: "synthetic:SYN0001", sessionId: "s", triggerId: "t", reason: "why",
                collectable: false, cause: cause)
            let back = try JSONDecoder().decode(CaptureManifest.Missing.self, from: JSONEncoder().encode(missing))
            #expect(back == missing)
        }
    }

    @Test("a manifest of an older version has no cause: a capture under way is read as one, other reasons as none")
    func legacy() throws {
        #expect(try decode(json(reason: "the capture was under way")).cause == .captureUnderWay)
        #expect(try decode(json(reason: "agent a refused the trigger")).cause == nil)
    }

    @Test("a cause this version does not know reads as none, and the rest of the entry still reads")
    func unknownCause() throws {
        let missing = try decode(json(reason: "the capture was under way", cause: "agent_on_fire"))
        #expect(missing.cause == nil)
        #expect(missing.reason == "the capture was under way" && missing.collectable)
    }
}
