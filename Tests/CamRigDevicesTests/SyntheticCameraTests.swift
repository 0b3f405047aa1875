import CamRigClock
import CamRigDeviceModel
import CamRigDevices
import CamRigTestSupport
import Foundation
import NIOCore
import Testing

@Suite("Synthetic camera streaming", .timeLimit(.minutes(1)))
struct SyntheticCameraTests {
    func capture(_ device: CaptureDevice, count: Int) async throws -> [CapturedFrame] {
        var frames: [CapturedFrame] = []
        // Room for four times the frames wanted, so a consumer stalled by a busy machine loses none.
        for try await frame in try device.frames(bufferLimit: count * 4) {
            frames.append(frame)
            if frames.count == count { break }
        }
        return frames
    }

    /// Frames straight from the camera's own thread, with no consumer that a busy machine could stall.
    func direct(_ configuration: SyntheticCameraConfiguration, count: Int) async throws -> [CapturedFrame] {
        let camera = SyntheticCamera(configuration)
        let formats = try camera.formats()
        let hfr = try #require(formats.first { $0.id == "YUYV-320x240" })
        _ = try camera.activate(format: hfr, frameDuration: FrameDuration(framesPerSecond: 120)!)
        let collected = FrameCollector()
        try camera.startStreaming(bufferCount: 4) { event in
            if case .frame(let frame) = event { collected.append(frame) }
        }
        let arrived = try await eventually(timeout: .seconds(10)) { collected.count >= count }
        camera.stopStreaming()
        try #require(arrived, "the camera delivered \(collected.count) of \(count) frames within 10 s")
        return Array(collected.all.prefix(count))
    }

    func highSpeed(_ configuration: SyntheticCameraConfiguration) throws -> CaptureDevice {
        let device = try CaptureDevice(backend: SyntheticCamera(configuration))
        let lock = try device.lockForConfiguration(holder: "test")
        try device.configureForHighestFrameRate(lock: lock)
        return device
    }

    @Test("100 frames: consecutive sequence numbers, stamps spaced by the frame duration, pixels that say which frame and when")
    func hundredFrames() async throws {
        let before = HostClock.monotonicNow()
        let frames = try await direct(SyntheticCameraConfiguration(serial: "S1"), count: 100)
        #expect(frames.map(\.sequence) == Array(0..<100))
        let spacing = zip(frames.dropFirst(), frames).map { $0.timestamp - $1.timestamp }
        #expect(spacing.allSatisfy { $0 == FrameDuration(framesPerSecond: 120)!.nanoseconds })
        #expect(frames[0].timestamp >= before - 10_000_000)
        #expect(frames.allSatisfy { $0.timestampMarks == .startOfExposure })
        for frame in frames {
            let decoded = try #require(SyntheticFrames.decode(frame))
            #expect(decoded.sequence == frame.sequence)
            #expect(decoded.timestamp == frame.timestamp)
            #expect(decoded.fromClaimedDevice)
            #expect(frame.bytes.readableBytes == 320 * 240 * 2)
        }
    }

    @Test("through a CaptureDevice stream, every frame is delivered or counted as dropped; leaving the loop stops it")
    func deviceStreamAccounting() async throws {
        let device = try highSpeed(SyntheticCameraConfiguration(serial: "S1b"))
        var frames: [CapturedFrame] = []
        var dropped: UInt64 = 0
        do {
            let stream = try device.frames(bufferLimit: 8)
            for try await frame in stream {
                frames.append(frame)
                if frames.count == 60 { break }
            }
            dropped = stream.dropped
        }
        let first = try #require(frames.first, "the stream delivered no frame")
        let last = try #require(frames.last)
        let span = last.sequence - first.sequence + 1
        #expect(span == UInt64(frames.count) + dropped, "gaps are exactly the frames counted as dropped")
        let period = FrameDuration(framesPerSecond: 120)!.nanoseconds
        for (next, previous) in zip(frames.dropFirst(), frames) {
            #expect(next.timestamp - previous.timestamp == Int64(next.sequence - previous.sequence) * period)
        }
        #expect(!device.isStreaming, "leaving the loop stops the stream")
    }

    @Test("a skewed host clock shows in the stamps: offset and drift")
    func clockSkew() async throws {
        let offset: Int64 = 250_000_000
        let clock = HostClock(offsetNanoseconds: offset, driftPPM: 100)
        let device = try highSpeed(SyntheticCameraConfiguration(serial: "S2", clock: clock))
        let started = HostClock.monotonicNow()
        let frames = try await capture(device, count: 5)
        let now = HostClock.monotonicNow()
        for frame in frames {
            // Mapped back to this machine's monotonic clock, each stamp lies within the capture…
            let monotonic = clock.monotonic(atReading: frame.timestamp)
            #expect(monotonic >= started - 10_000_000 && monotonic <= now)
            // …and the stamp itself is ahead of it by the offset plus the drift accumulated so far.
            let skew = frame.timestamp - monotonic
            #expect(skew >= offset && skew <= offset + (now - clock.epoch) / 10_000 + 1)
        }
        #expect(clock.monotonic(atReading: clock.reading(atMonotonic: now)) == now)
        #expect(clock.reading(atMonotonic: clock.epoch + 1_000_000_000) - clock.epoch - offset == 1_000_100_000)
    }

    @Test("drops and jitter are reproducible under a seed; dropped frames leave gaps in the sequence")
    func seededDrops() async throws {
        func sequences(seed: UInt64) async throws -> [UInt64] {
            try await direct(SyntheticCameraConfiguration(serial: "S3", seed: seed, dropProbability: 0.2, jitterNanoseconds: 100_000), count: 40).map(\.sequence)
        }
        let a = try await sequences(seed: 42)
        let b = try await sequences(seed: 42)
        let c = try await sequences(seed: 7)
        #expect(a == b)
        #expect(a != c)
        let lastSequence = try #require(a.last)
        #expect(lastSequence > 40, "20% drops must skip sequence numbers")
    }

    @Test("settings have visible effects: longer exposure is brighter, white balance tints, the torch lights")
    func controlEffects() async throws {
        func meanLuma(_ change: (inout DeviceConfigurationChange) -> Void) async throws -> (luma: Double, u: Double) {
            let device = try CaptureDevice(backend: SyntheticCamera(SyntheticCameraConfiguration(serial: "S4", noise: 0)))
            let lock = try device.lockForConfiguration(holder: "test")
            var configuration = DeviceConfigurationChange(formatID: "YUYV-640x480", minFrameDuration: FrameDuration(framesPerSecond: 60))
            configuration.rawControls = [V4L2ControlID.testPattern: 2]  // flat grey
            change(&configuration)
            try device.configure(configuration, lock: lock)
            let frame = try #require(try await capture(device, count: 1).first)
            let row = try #require(frame.bytes.getBytes(at: 240 * 1280, length: 1280))
            let luma = stride(from: 0, to: row.count, by: 2).map { Double(row[$0]) }
            return (luma.reduce(0, +) / Double(luma.count), Double(row[1]))
        }
        let short = try await meanLuma { $0.settings.exposureDuration = FrameDuration(numerator: 1, denominator: 240) }
        let long = try await meanLuma { $0.settings.exposureDuration = FrameDuration(numerator: 1, denominator: 60) }
        #expect(long.luma > short.luma + 40)
        let cool = try await meanLuma { $0.settings.whiteBalanceTemperature = 3000 }
        let warm = try await meanLuma { $0.settings.whiteBalanceTemperature = 8000 }
        #expect(cool.u > warm.u)
        let dark = try await meanLuma { $0.settings.exposureDuration = FrameDuration(numerator: 1, denominator: 240) }
        let lit = try await meanLuma {
            $0.settings.exposureDuration = FrameDuration(numerator: 1, denominator: 240)
            $0.settings.torchMode = .on
            $0.settings.torchLevel = 1
        }
        #expect(lit.luma > dark.luma)
        #expect(abs(short.luma - dark.luma) < 1, "same settings, same picture")
    }

    @Test("MJPEG frames are baseline JPEGs of the format's size carrying the frame header")
    func mjpeg() async throws {
        let device = try CaptureDevice(backend: SyntheticCamera(SyntheticCameraConfiguration(serial: "S5")))
        let lock = try device.lockForConfiguration(holder: "test")
        try device.configure(DeviceConfigurationChange(formatID: "MJPG-1280x720", minFrameDuration: FrameDuration(framesPerSecond: 60)), lock: lock)
        let frames = try await capture(device, count: 3)
        for frame in frames {
            let bytes = Array(frame.bytes.readableBytesView)
            #expect(bytes.prefix(2) == [0xFF, 0xD8])
            #expect(bytes.suffix(2) == [0xFF, 0xD9])
            let sof = try #require(bytes.indices.dropLast(8).first { bytes[$0] == 0xFF && bytes[$0 + 1] == 0xC0 })
            #expect(Int(bytes[sof + 5]) << 8 | Int(bytes[sof + 6]) == 720)
            #expect(Int(bytes[sof + 7]) << 8 | Int(bytes[sof + 8]) == 1280)
            #expect(SyntheticFrameHeader.decode(frame.bytes, format: .mjpeg)?.sequence == frame.sequence)
        }
    }

    @Test("unplugging mid-stream ends the stream with a disconnected error")
    func unplugMidStream() async throws {
        let provider = SyntheticDeviceProvider(count: 1)
        let discovery = DeviceDiscovery(providers: [provider])
        let device = try #require(discovery.devices.first)
        var received = 0
        let error = await #expect(throws: DeviceError.self) {
            for try await _ in try device.frames() {
                received += 1
                if received == 3 { provider.unplug(serial: "SYN0001") }
            }
        }
        #expect(error?.code == .disconnected)
        #expect(received >= 3)
    }

    @Test("a second stream on a streaming device is refused as busy")
    func busy() async throws {
        let device = try CaptureDevice(backend: SyntheticCamera(SyntheticCameraConfiguration(serial: "S6")))
        let stream = try device.frames()
        let error = #expect(throws: DeviceError.self) { try device.frames() }
        #expect(error?.code == .busy)
        for try await _ in stream { break }
    }
}

final class FrameCollector: @unchecked Sendable {
    private let lock = NSLock()
    private var frames: [CapturedFrame] = []
    func append(_ frame: CapturedFrame) { lock.lock(); frames.append(frame); lock.unlock() }
    var count: Int { lock.lock(); defer { lock.unlock() }; return frames.count }
    var all: [CapturedFrame] { lock.lock(); defer { lock.unlock() }; return frames }
}
