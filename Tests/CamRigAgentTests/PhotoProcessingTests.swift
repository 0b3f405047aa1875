import CamRigDeviceModel
import CamRigDevices
import CamRigWire
import CamRigWireModel
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Testing

@testable import CamRigAgent

/// The photo side's parts without sockets or cameras: the spool record codec, the frame mapping, the
/// pure processor, and the deferred worker's decisions and wake-ups.
@Suite("Photo processing and deferred finals", .timeLimit(.minutes(1)))
struct PhotoProcessingTests {
    /// A small YUYV frame whose bytes are its sequence number.
    static func frame(sequence: UInt64, exposureStart: Int64) -> CapturedFrame {
        let format = DeviceFormat(
            pixelFormat: .yuyv, dimensions: Dimensions(width: 16, height: 8), frameRateRanges: [], bytesPerLine: 32)
        var settings = CameraSettings()
        settings.iso = 400
        settings.exposureDuration = FrameDuration(numerator: 1, denominator: 250)!
        var frame = CapturedFrame(
            deviceID: "synthetic:SYN0001", sequence: sequence, timestamp: exposureStart + 5_000_000,
            timestampMarks: .endOfFrame, format: format,
            bytes: ByteBuffer(bytes: [UInt8](repeating: UInt8(truncatingIfNeeded: sequence), count: 16 * 8 * 2)),
            metadata: CaptureMetadata(settings: settings, zoomFactor: 2), exposureStart: exposureStart,
            exposureStartUncertainty: 1_500)
        frame.measuredFramePeriod = 33_333_333
        return frame
    }

    static func input(deferred: Bool = false, bracket: [Float] = [], frames count: Int = 1) -> PhotoProcessor.Input {
        let frames = (0..<count).map {
            frame(sequence: UInt64($0 + 1), exposureStart: 1_000_000_000 + Int64($0) * 33_000_000)
        }
        let plan = PhotoPlan(requested: .balanced, format: frames[0].format)
        let template = PhotoProcessor.template(
            reference: frames[0], photoID: "host-1-photo", session: "s", triggerID: "t", settingsID: 7,
            prepared: true, waited: 0, captureDuration: 40_000_000)
        return PhotoProcessor.Input(template: template, frames: frames, plan: plan, bracket: bracket, deferred: deferred)
    }

    @Test("a spool record is its u32 length, the header and the payloads; a short file is truncated, never misread")
    func spoolRecord() throws {
        let data = SpoolRecord.encode(
            header: [1, 2, 3], payloads: [ByteBuffer(bytes: [9, 8]), ByteBuffer(bytes: [7])])
        #expect(Array(data) == [0, 0, 0, 3, 1, 2, 3, 9, 8, 7])
        let record = try SpoolRecord(decoding: data)
        #expect(Array(record.header) == [1, 2, 3])
        #expect(Array(record.payload) == [9, 8, 7])
        // The same from a slice that does not start at index 0.
        let sliced = try SpoolRecord(decoding: (Data([0xFF]) + data).dropFirst())
        #expect(Array(sliced.payload) == [9, 8, 7])
        #expect(throws: SpoolRecord.DecodingError.truncated) { try SpoolRecord(decoding: data.prefix(5)) }
        #expect(throws: SpoolRecord.DecodingError.truncated) { try SpoolRecord(decoding: Data([0, 0])) }
        #expect(throws: SpoolRecord.DecodingError.headerTooLong(Int(UInt32.max))) {
            try SpoolRecord(decoding: Data([0xFF, 0xFF, 0xFF, 0xFF]))
        }
    }

    @Test(
        "a frame read back from its wire header keeps its timestamps, what they mark, its frame period and its metadata"
    )
    func frameRoundTrip() {
        let original = Self.frame(sequence: 3, exposureStart: 2_000_000_000)
        let back = CapturedFrame(WireVideoFrame(original, streamID: "", droppedBefore: 0), bytes: original.bytes)
        #expect(back.deviceID == original.deviceID && back.sequence == original.sequence)
        #expect(back.timestamp == original.timestamp && back.timestampMarks == .endOfFrame)
        #expect(back.exposureStart == original.exposureStart && back.exposureStartUncertainty == 1_500)
        #expect(back.measuredFramePeriod == original.measuredFramePeriod)
        #expect(back.metadata == original.metadata)
        #expect(
            back.format.pixelFormat == .yuyv && back.format.dimensions == original.format.dimensions
                && back.format.bytesPerLine == 32)
        #expect(back.bytes == original.bytes)
    }

    @Test(
        "a single photo is stored under its photo id; a bracket as one result per bias; a deferred photo as a proxy and its frames"
    )
    func processorOutputs() throws {
        guard case .single(let single) = try PhotoProcessor.process(Self.input()) else {
            Issue.record("a single photo")
            return
        }
        #expect(
            single.result.resultID == "host-1-photo" && !single.result.resolved.deferredProxy
                && single.result.resolved.prepared)

        guard case .bracket(let images) = try PhotoProcessor.process(Self.input(bracket: [-1, 1], frames: 2)) else {
            Issue.record("a bracket")
            return
        }
        #expect(images.map(\.result.resultID) == ["host-1-photo-1", "host-1-photo-2"])
        #expect(images.map(\.result.resolved.bracketIndex) == [1, 2])
        #expect(images.map(\.result.resolved.exposureBias) == [-1, 1])
        #expect(
            ([single] + images).map(\.result.resolved.captureDurationNs) == [40_000_000, 40_000_000, 40_000_000],
            "every image says how long its capture stage took")

        let output = try PhotoProcessor.process(Self.input(deferred: true))
        guard case .deferred(let proxy, let job) = output else {
            Issue.record("a deferred photo")
            return
        }
        #expect(proxy.result.resultID == "host-1-photo.proxy" && proxy.result.resolved.deferredProxy)
        #expect(proxy.result.dimensions.width == 8, "the proxy is binned to half size")
        #expect(job.template.photoID == "host-1-photo" && job.frames.count == 1)
        #expect(output.processingDuration == 0)
    }

    @Test(
        "the deferred worker waits for a wake-up while busy or without work, sleeps out the idle time, then makes the oldest"
    )
    func workerSteps() {
        typealias Worker = DeferredPhotoWorker
        let idle = Worker.Activity(busy: false, lastActivity: 5_000_000_000)
        #expect(Worker.step(waiting: [], activity: idle, now: 9_000_000_000) == .waitForWakeUp)
        #expect(
            Worker.step(waiting: ["a"], activity: Worker.Activity(busy: true, lastActivity: 0), now: 9_000_000_000)
                == .waitForWakeUp)
        #expect(
            Worker.step(waiting: ["a", "b"], activity: idle, now: 5_200_000_000)
                == .sleep(until: 5_000_000_000 + Worker.idleBeforeFinal))
        #expect(
            Worker.step(waiting: ["a", "b"], activity: idle, now: 5_000_000_000 + Worker.idleBeforeFinal) == .make("a"))
    }

    @Test("deferred frames saved to disk come back whole, with their metadata")
    func deferredStoreRoundTrip() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "camrig-deferred-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let spool = try ResultSpool(directory: directory, capacityBytes: 1 << 20)
        let store = DeferredPhotoStore(spoolDirectory: spool.directory)
        guard case .deferred(_, let job) = try PhotoProcessor.process(Self.input(deferred: true, frames: 2)) else {
            Issue.record("a deferred photo")
            return
        }
        try store.save(job)
        #expect(store.ids == ["host-1-photo"])
        let loaded = try DeferredPhotoStore(spoolDirectory: spool.directory).load("host-1-photo")
        #expect(loaded.frames.map(\.metadata) == job.frames.map(\.metadata))
        #expect(loaded.frames.map(\.bytes) == job.frames.map(\.bytes))
        #expect(loaded.frames.map(\.exposureStart) == job.frames.map(\.exposureStart))
        #expect(loaded.frames.map(\.timestampMarks) == job.frames.map(\.timestampMarks))
        #expect(loaded.plan == job.plan)
        #expect(loaded.template == job.template)
    }

    @Test("the deferred worker makes a final only once the agent is idle, when woken, without polling")
    func workerWakesUp() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "camrig-worker-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let spool = try ResultSpool(directory: directory, capacityBytes: 1 << 20)
        let store = DeferredPhotoStore(spoolDirectory: spool.directory)
        guard case .deferred(let proxy, let job) = try PhotoProcessor.process(Self.input(deferred: true)) else {
            Issue.record("a deferred photo")
            return
        }
        try store.save(job)
        try spool.store(proxy.result, image: proxy.image)
        let thread = NIOThreadPool.singleton

        // The agent is busy until the test says otherwise; its clock is far past its last activity.
        let busy = NIOLockedValueBox(true)
        let looks = NIOLockedValueBox(0)
        let made = NIOLockedValueBox<[String]>([])
        let worker = DeferredPhotoWorker(
            finalizer: PhotoFinalizer(deferred: store, spool: spool, spoolThread: thread, agentID: "host-1"),
            now: { 100_000_000_000 },
            activity: {
                looks.withLockedValue { $0 += 1 }
                return .init(busy: busy.withLockedValue { $0 }, lastActivity: 0)
            },
            logger: Logger(label: "test"))
        let task = Task { await worker.run { final in made.withLockedValue { $0.append(final.deviceID) } } }
        defer { task.cancel() }

        // Woken while busy, it looks again and goes back to waiting.
        worker.wakeUp()
        try await until { looks.withLockedValue { $0 } >= 2 }
        #expect(!spool.contains("host-1-photo"), "no final while the agent is busy")
        #expect(looks.withLockedValue { $0 } == 2, "no look without a wake-up")

        busy.withLockedValue { $0 = false }
        worker.wakeUp()
        try await until { !made.withLockedValue { $0 }.isEmpty }
        #expect(spool.contains("host-1-photo"))
        #expect(store.ids.isEmpty, "the saved frames are deleted once the final is stored")
        #expect(made.withLockedValue { $0 } == ["synthetic:SYN0001"])
    }

    /// Returns once `condition` holds; fails the test after ten seconds.
    func until(_ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while !condition() {
            guard ContinuousClock.now < deadline else {
                Issue.record("the condition did not come true within ten seconds")
                throw CancellationError()
            }
            try await Task.sleep(for: .milliseconds(2))
        }
    }
}
