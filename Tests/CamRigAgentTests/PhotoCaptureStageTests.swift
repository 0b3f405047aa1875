import CamRigDeviceModel
import CamRigDevices
import CamRigWire
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOPosix
import Testing

@testable import CamRigAgent

/// A photo's capture stage on a synthetic camera, without a connection: what its result says about how
/// long the stage took.
@Suite("Photo capture stage", .timeLimit(.minutes(1)))
struct PhotoCaptureStageTests {
    @Test(
        "a speed photo of a prepared camera is the frame whose exposure began nearest the request, and its capture duration is not negative"
    )
    func preparedSpeedPhotoDuration() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "camrig-stage-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let logger = Logger(label: "test")
        let devices = AgentDevices(
            discovery: DeviceDiscovery(providers: [SyntheticDeviceProvider(count: 1)]), agentID: "host-1",
            logger: logger)
        let streams = AgentStreams(devices: devices, logger: logger)
        let spool = try ResultSpool(directory: directory, capacityBytes: 64 << 20)
        let capture = AgentCapture(
            streams: streams, phaseLocks: AgentPhaseLocks(streams: streams, logger: logger), spool: spool,
            spoolThread: NIOThreadPool.singleton, agentID: "host-1", logger: logger)
        defer { capture.shutdown() }

        var speed = WirePhotoSettings()
        speed.qualityPrioritization = .speed
        var prepare = WirePreparePhotoSettings()
        prepare.deviceID = "synthetic:SYN0001"
        prepare.settings = [speed]
        guard case .ok = capture.prepare(prepare) else {
            Issue.record("the camera could not be prepared")
            return
        }
        defer {
            prepare.settings = []
            _ = capture.prepare(prepare)
        }
        // The prepared camera streams: its newest frame is at hand.
        try await Task.sleep(for: .milliseconds(300))

        let answers = NIOLockedValueBox<[WireEnvelope.OneOf_Body]>([])
        var photo = WireCapturePhoto()
        photo.deviceID = "synthetic:SYN0001"
        photo.sessionID = "stage"
        photo.settings = speed
        capture.capturePhoto(photo, requestID: 1) { answer in answers.withLockedValue { $0.append(answer) } }
        await capture.drain(timeout: .seconds(30))
        let answered = answers.withLockedValue { $0 }
        guard answered.count == 1, case .triggerFired(let fired) = answered[0] else {
            Issue.record("the photo was answered with \(answered)")
            return
        }
        let result = try #require(spool.pending(session: "stage").first)
        #expect(result.resolved.prepared)
        // Zero shutter lag: the frame whose exposure began nearest the request, before or after it (within half
        // a frame period, and a millisecond for the stamps)...
        let asked = fired.firedAt.nanoseconds
        let period = try #require(devices.discovery.device(uniqueID: "synthetic:SYN0001")).activeMinFrameDuration.nanoseconds
        let off = result.exposureStart.nanoseconds - asked
        #expect(abs(off) <= period / 2 + 1_000_000, "exposed \(off) ns from the request, of a \(period) ns frame period")
        // ...and the capture stage, which began at the request, took a time that is zero or more, even for a
        // frame exposed before it.
        #expect(result.resolved.captureDurationNs >= 0, "capture_duration_ns \(result.resolved.captureDurationNs)")
    }
}
