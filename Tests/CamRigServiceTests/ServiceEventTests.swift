import CamRigViews
import Foundation
import Testing
import Yams

@testable import CamRigService

/// `ServiceEvent` against the OpenAPI document's `Event` schema, and its JSON round trip.
@Suite("Service events", .timeLimit(.minutes(1)))
struct ServiceEventTests {
    static let console = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Sources/CamRigService/Console")

    static let samples: [ServiceEvent] = [
        .serviceStarted(agents: 2), .serviceStopped, .agentUp(agent: "a", endpoint: "127.0.0.1:7450"),
        .agentDown(agent: "a", status: "down", reason: "connection refused"),
        .agentEnrolled(agent: "pi-7", endpoint: "10.0.0.7:7450"), .agentRenewed(agent: "pi-7", endpoint: "10.0.0.8:7450"), .agentRevoked(agent: "pi-7"),
        .enrollmentRefused(what: "enrolment", address: "10.0.0.9", reason: "the token was used up: its uses: 1"),
        .deviceAdded(agent: "a", device: "a/cam0", localizedName: "Synthetic camera"), .deviceRemoved(device: "a/cam0"),
        .deviceConnected(agent: "a", device: "a/cam0"), .deviceDisconnected(agent: "a", device: "a/cam0"),
        .deviceLease(agent: "a", device: "a/cam0", holder: "coordinator"), .deviceSettings(agent: "a", device: "a/cam0", settings: "iso=200", by: "operator"),
        .phaseState(agent: "a", device: "a/cam0", state: "locked"), .phaseRelocked, .phaseFailed(reason: "camera a/cam0 did not settle"),
        .sessionCommitted(session: "s1", cameras: 2, leftOut: ["a/cam1: leased by x"]), .sessionFailed(reason: "no camera can join the session"),
        .captureStarted(job: "job-1", kind: .photo, by: "operator"), .captureProgress(job: "job-1", progress: 0.25, message: "recording 1.0 of 4.0 s, 30 sets"),
        .captureFinished(job: "job-1", kind: .recording, capture: "cap-1", contactSheet: "contact-sheet.png", summary: "1 set(s), skew max 2.5 µs"),
        .captureFailed(job: "job-1", kind: .photo, reason: "camera a/cam0 stopped"),
    ]

    static func eventSchema() throws -> [String: Any] {
        let document = try #require(try Yams.load(yaml: String(contentsOf: console.appendingPathComponent("openapi.yaml"), encoding: .utf8)) as? [String: Any])
        let components = try #require(document["components"] as? [String: Any])
        let schemas = try #require(components["schemas"] as? [String: Any])
        return try #require(schemas["Event"] as? [String: Any])
    }

    @Test("the OpenAPI Event schema lists exactly the kinds ServiceEvent has, and each kind's data keys")
    func schemaMatchesEnum() throws {
        let schema = try Self.eventSchema()
        let properties = try #require(schema["properties"] as? [String: Any])
        let kind = try #require(properties["kind"] as? [String: Any])
        let documented = try #require(kind["enum"] as? [String])
        #expect(Set(documented) == Set(ServiceEvent.Kind.allCases.map(\.rawValue)))
        #expect(Set(try #require(schema["required"] as? [String])) == ["sequence", "time", "kind", "message", "data"])
        // Each kind's data keys, as the document's x-data-keys lists them.
        let keys = try #require(schema["x-data-keys"] as? [String: [String]])
        for kind in ServiceEvent.Kind.allCases {
            #expect(Set(keys[kind.rawValue] ?? []) == ServiceEvent.dataKeys(of: kind), "data keys of \(kind.rawValue)")
        }
        #expect(Set(Self.samples.map(\.kind)) == Set(ServiceEvent.Kind.allCases), "a sample of every kind")
        for event in Self.samples { #expect(Set(event.data.keys) == ServiceEvent.dataKeys(of: event.kind), "\(event.kind)") }
    }

    @Test("an event is written flat, as the API has always written it, and read back the same")
    func roundTrip() throws {
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.outputFormatting = .sortedKeys
        let record = ServiceEventRecord(sequence: 7, time: "2026-11-25T12:00:00Z", event: .captureProgress(job: "job-1", progress: 0.25, message: "half"))
        #expect(
            String(decoding: try encoder.encode(record), as: UTF8.self)
                == #"{"data":{"job":"job-1","progress":"0.250"},"kind":"capture.progress","message":"half","sequence":7,"time":"2026-11-25T12:00:00Z"}"#)
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        for (index, event) in Self.samples.enumerated() {
            let record = ServiceEventRecord(sequence: UInt64(index), time: "t", event: event)
            #expect(try decoder.decode(ServiceEventRecord.self, from: try encoder.encode(record)) == record)
        }
    }
}
