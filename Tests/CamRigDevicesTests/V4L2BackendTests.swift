import CamRigDeviceModel
import CamRigDevices
import Foundation
import NIOCore
import CamRigTestSupport
import Testing

/// The V4L2 backend against the emulated camera (Tests/V4L2Emulator: a libv4l2 plugin that behaves like
/// the kernel's vivid driver for what the backend uses).
enum Emulator {
    static let pluginPath = "/usr/lib/x86_64-linux-gnu/libv4l/plugins/libcamrig-v4l2-emulator.so"
    static let directory = ProcessInfo.processInfo.environment["CAMRIG_V4L2_EMULATOR_DIR"] ?? "/dev/shm/camrig-v4l2"

    static var unavailable: String? {
        FileManager.default.fileExists(atPath: pluginPath)
            ? nil : "the emulated V4L2 device is not installed (make -C Tests/V4L2Emulator install, as root)"
    }

    /// Creates a fresh emulated device node `videoN` and returns its path.
    static func makeDevice(_ number: Int) throws -> String {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let path = "\(directory)/video\(number)"
        for suffix in ["", ".state", ".lock", ".unplugged"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        _ = FileManager.default.createFile(atPath: path, contents: nil)
        return path
    }

    static func remove(_ path: String) {
        for suffix in ["", ".state", ".lock", ".unplugged"] { try? FileManager.default.removeItem(atPath: path + suffix) }
    }

    static func unplug(_ path: String) {
        _ = FileManager.default.createFile(atPath: path + ".unplugged", contents: nil)
    }
}

@Suite(
    "V4L2 backend on the emulated device", .serialized, .timeLimit(.minutes(1)),
    .enabled(if: Emulator.unavailable == nil, "\(Emulator.unavailable ?? "")"))
struct V4L2BackendTests {
    @Test("formats with discrete, stepwise and continuous intervals, and controls with menus, as the device reports them")
    func describe() throws {
        // video40: stepwise frame sizes (N % 3 == 1); the interval kinds are the same on every node.
        let path = try Emulator.makeDevice(40)
        defer { Emulator.remove(path) }
        let device = try CaptureDevice(backend: try V4L2Camera(path: path))
        #expect(device.uniqueID == "v4l2:camrig-emu:platform:camrig-emu-40")
        #expect(device.identity.localizedName == "CamRig Emulated Camera 40")

        let yuyv = try #require(device.formats.first { $0.id == "YUYV-640x480" })
        #expect(yuyv.frameRateRanges.map(\.minFrameDuration) == [60, 30, 15].map { FrameDuration(framesPerSecond: $0)! })
        #expect(yuyv.frameRateRanges.allSatisfy { $0.kind == .discrete })
        let rgb = try #require(device.formats.first { $0.id == "RGB3-800x600" })
        #expect(rgb.frameRateRanges.first?.kind == .stepwise(step: FrameDuration(framesPerSecond: 60)!))
        let grey = try #require(device.formats.first { $0.id == "GREY-1280x1024" })
        #expect(grey.frameRateRanges.first?.kind == .continuous)
        #expect(grey.frameRateRanges.first?.maxFrameRate == 120)
        #expect(!device.formats.contains { $0.pixelFormat == PixelFormat(fourCC: "BGR3") }, "formats libv4l2 emulates are not offered")

        let exposure = try #require(device.controls.first { $0.id == V4L2ControlID.exposureAuto })
        #expect(exposure.type == .menu)
        #expect(exposure.menu.map(\.index) == [1, 3], "menu entries the driver skips are skipped")
        let link = try #require(device.controls.first { $0.type == .integerMenu })
        #expect(link.menu.compactMap(\.value) == [192_000_000, 384_000_000, 456_000_000])
        #expect(device.isFocusModeSupported(.continuous))
        #expect(device.isExposureModeSupported(.custom))
        #expect(device.highestFrameRateFormat()?.range.maxFrameRate == 120)
    }

    @Test(
        "frame sizes of each kind: discrete (video39), stepwise (video40), continuous (video38)",
        arguments: [39, 40, 38])
    func frameSizeKinds(node: Int) throws {
        // The emulator gives every format of videoN the same kind of frame sizes: N % 3 == 0 discrete,
        // 1 stepwise (64x48 - 1280x1024, step 16x8), 2 continuous (32x32 - 1280x1024).
        let path = try Emulator.makeDevice(node)
        defer { Emulator.remove(path) }
        let device = try CaptureDevice(backend: try V4L2Camera(path: path))
        func ids(_ fourCC: String) -> [String] {
            device.formats.filter { $0.pixelFormat == PixelFormat(fourCC: fourCC) }.map(\.id)
        }
        if node % 3 == 0 {
            #expect(ids("YUYV") == ["YUYV-640x480", "YUYV-1280x720", "YUYV-1920x1080"])
            #expect(ids("RGB3") == ["RGB3-320x240", "RGB3-800x600", "RGB3-1920x1080"])
            #expect(ids("GREY") == ["GREY-640x480", "GREY-1280x1024"])
            #expect(ids("RGGB") == ["RGGB-640x480"])
            let hd = try #require(device.formats.first { $0.id == "YUYV-1920x1080" })
            #expect(hd.frameRateRanges.map(\.minFrameDuration) == [30, 15, 5].map { FrameDuration(framesPerSecond: $0)! })
        } else {
            // A range: the common sizes in it (on the step grid), the largest being the range's maximum.
            let common = [
                "640x480", "800x600", "1024x768", "1280x720", "1280x960", "1280x1024",
            ]
            for fourCC in ["YUYV", "RGB3", "GREY", "RGGB"] {
                let sizes = ids(fourCC)
                #expect(common.allSatisfy { sizes.contains("\(fourCC)-\($0)") }, "\(fourCC): \(sizes)")
                #expect(sizes.last == "\(fourCC)-1280x1024")
                #expect(!sizes.contains("\(fourCC)-1920x1080"), "beyond the range")
            }
        }
        // Every node offers all three kinds of frame intervals.
        let yuyv = try #require(device.formats.first { $0.id == "YUYV-640x480" })
        #expect(yuyv.frameRateRanges.map(\.minFrameDuration) == [60, 30, 15].map { FrameDuration(framesPerSecond: $0)! })
        let rgb = try #require(device.formats.first { $0.id == "RGB3-800x600" })
        #expect(rgb.frameRateRanges.first?.kind == .stepwise(step: FrameDuration(framesPerSecond: 60)!))
        let grey = try #require(device.formats.first { $0.id == "GREY-1280x1024" })
        #expect(grey.frameRateRanges.first?.kind == .continuous)
    }

    @Test("100 frames: sequence and driver timestamps monotonic, spaced by the frame duration, marked start of exposure")
    func capture() async throws {
        let path = try Emulator.makeDevice(41)
        defer { Emulator.remove(path) }
        let device = try CaptureDevice(backend: try V4L2Camera(path: path))
        let lock = try device.lockForConfiguration(holder: "test")
        try device.configure(DeviceConfigurationChange(formatID: "YUYV-640x480", minFrameDuration: FrameDuration(framesPerSecond: 60)), lock: lock)
        var frames: [CapturedFrame] = []
        for try await frame in try device.frames(bufferLimit: 100) {
            frames.append(frame)
            if frames.count == 100 { break }
        }
        let sequences = frames.map(\.sequence)
        #expect(zip(sequences.dropFirst(), sequences).allSatisfy { $0 > $1 })
        #expect(frames.allSatisfy { $0.timestampMarks == .startOfExposure })
        #expect(frames.allSatisfy { $0.bytes.readableBytes == 640 * 480 * 2 })
        // The emulated sensor runs 1/60 s in whole lines: 4167 lines of (640 + 160) pixels at 200 MHz.
        let period: Int64 = 4167 * 4_000
        for (next, previous) in zip(frames.dropFirst(), frames) {
            let expected = Int64(next.sequence - previous.sequence) * period
            #expect(abs(next.timestamp - previous.timestamp - expected) < 1_000, "timeval stamps are µs-exact")
        }
        // The emulator's pixels carry its sequence number and stamp.
        for frame in frames {
            #expect(frame.bytes.getInteger(at: 0, endianness: .little, as: UInt32.self) == 0x4352_4D55)
            #expect(frame.bytes.getInteger(at: 4, endianness: .little, as: UInt32.self) == UInt32(truncatingIfNeeded: frame.sequence))
        }
    }

    @Test("typed settings land on the device's controls by id")
    func typedSettings() throws {
        let path = try Emulator.makeDevice(42)
        defer { Emulator.remove(path) }
        let device = try CaptureDevice(backend: try V4L2Camera(path: path))
        let lock = try device.lockForConfiguration(holder: "test")
        var change = DeviceConfigurationChange()
        change.settings.exposureDuration = FrameDuration(numerator: 1, denominator: 100)
        change.settings.lensPosition = 1
        try device.configure(change, lock: lock)
        let values = try device.controlValues()
        #expect(values[V4L2ControlID.exposureAuto] == V4L2ControlID.ExposureAutoValue.manual)
        #expect(values[V4L2ControlID.exposureAbsolute] == 100, "1/100 s in 100 µs units")
        #expect(values[V4L2ControlID.focusAuto] == 0)
        #expect(values[V4L2ControlID.focusAbsolute] == 1023)
    }

    @Test("a second streamer gets a clear busy error")
    func busy() async throws {
        let path = try Emulator.makeDevice(43)
        defer { Emulator.remove(path) }
        let first = try CaptureDevice(backend: try V4L2Camera(path: path))
        let second = try CaptureDevice(backend: try V4L2Camera(path: path))
        let stream = try first.frames()
        let error = #expect(throws: DeviceError.self) { try second.frames() }
        #expect(error?.code == .busy)
        #expect(error?.message.contains("device busy") == true)
        #expect(error?.deviceID == "v4l2:camrig-emu:platform:camrig-emu-43")
        for try await _ in stream { break }
    }

    @Test("a device that vanishes mid-stream ends the stream with a disconnected error, and discovery reports it gone")
    func vanishes() async throws {
        let path = try Emulator.makeDevice(44)
        defer { Emulator.remove(path) }
        let provider = V4L2DeviceProvider(patterns: [path])
        let discovery = DeviceDiscovery(providers: [provider])
        let device = try #require(discovery.devices.first)
        let events = discovery.events()
        var received = 0
        let error = await #expect(throws: DeviceError.self) {
            for try await _ in try device.frames() {
                received += 1
                if received == 5 { Emulator.unplug(path) }
            }
        }
        #expect(error?.code == .disconnected)
        #expect(error?.message.contains("the device is gone") == true)
        discovery.rescan()
        var iterator = events.makeAsyncIterator()
        guard case .disconnected(let identity) = await iterator.next() else {
            Issue.record("no disconnected event")
            return
        }
        #expect(identity.uniqueID == device.uniqueID)
        #expect(discovery.devices.isEmpty)
        #expect(provider.skipped[path]?.isEmpty == false, "the vanished node is reported with a reason")
    }

    @Test("a node that appears is discovered at the next scan")
    func appears() throws {
        let path = "\(Emulator.directory)/video45"
        Emulator.remove(path)
        defer { Emulator.remove(path) }
        let discovery = DeviceDiscovery(providers: [V4L2DeviceProvider(patterns: ["\(Emulator.directory)/video45"])])
        #expect(discovery.devices.isEmpty)
        _ = try Emulator.makeDevice(45)
        let events = discovery.rescan()
        guard case .connected(let device)? = events.first else {
            Issue.record("no connected event")
            return
        }
        #expect(device.uniqueID.hasSuffix("camrig-emu-45"))
    }

    /// The emulator writes each frame's sequence number at byte 4 of the image.
    static func intact(_ frame: CapturedFrame) -> Bool {
        frame.bytes.getInteger(at: 4, endianness: .little, as: UInt32.self) == UInt32(truncatingIfNeeded: frame.sequence)
    }

    static func streaming640x480(_ number: Int, lendFrames: Bool = true) throws -> (V4L2Camera, CaptureDevice, String) {
        let path = try Emulator.makeDevice(number)
        let camera = try V4L2Camera(path: path, lendFrames: lendFrames)
        let device = try CaptureDevice(backend: camera)
        let lock = try device.lockForConfiguration(holder: "test")
        try device.configure(DeviceConfigurationChange(formatID: "YUYV-640x480", minFrameDuration: FrameDuration(framesPerSecond: 60)), lock: lock)
        return (camera, device, path)
    }

    @Test("frames are the driver's own buffers: never overwritten while held; a consumer that keeps them gets copies, not a stalled camera")
    func lentFrames() async throws {
        let (camera, device, path) = try Self.streaming640x480(46)
        defer { Emulator.remove(path) }
        var held: [CapturedFrame] = []
        var released = 0
        for try await frame in try device.frames(bufferLimit: 2) {
            if released == 0 && held.count < 40 {
                held.append(frame)
                guard held.count == 40 else { continue }
                // Every frame kept so far still shows its own sequence number, lent or copied.
                #expect(held.allSatisfy(Self.intact))
                let kept = camera.frameBuffers
                // Four buffers, two kept with the driver: at most two frames live in driver memory at once.
                #expect((1...2).contains(kept.held), "\(kept)")
                #expect(kept.copied >= 30, "the camera went on with copies: \(kept)")
                held.removeAll()
                released = 1
            } else {
                #expect(Self.intact(frame))
                released += 1
                if released == 40 { break }
            }
        }
        let total = camera.frameBuffers
        #expect(total.lent >= 30, "frames let go at once are lent again: \(total)")
        #expect(total.lent + total.copied >= 79)
    }

    @Test("a frame held past the end of its stream stays readable, and the camera streams again once it is let go")
    func heldPastTheStream() async throws {
        let (camera, device, path) = try Self.streaming640x480(47)
        defer { Emulator.remove(path) }
        var kept: CapturedFrame?
        for try await frame in try device.frames(bufferLimit: 1) {
            kept = frame
            break
        }
        #expect(camera.frameBuffers.lent == 1)
        // The stream is over; its buffers are unmapped except the one this frame lives in.
        let stopped = try await eventually(timeout: .seconds(5)) { !camera.isStreaming }
        #expect(stopped, "the stream did not end within 5 s of its last consumer leaving")
        do {
            let frame = try #require(kept)
            #expect(Self.intact(frame))
            #expect(frame.bytes.readableBytes == 640 * 480 * 2)
        }
        kept = nil
        #expect(camera.frameBuffers.held == 0)
        var count = 0
        for try await next in try device.frames() {
            #expect(Self.intact(next))
            count += 1
            if count == 5 { break }
        }
        #expect(count == 5)
    }

    @Test("a stream left and the camera configured in another format at once: the change waits for the stream to wind down, then streams")
    func reconfiguredRightAfterAStream() async throws {
        let (camera, device, path) = try Self.streaming640x480(49, lendFrames: false)
        defer { Emulator.remove(path) }
        for try await _ in try device.frames(bufferLimit: 1) { break }
        // No waiting for the stream's thread: the backend's stream machine holds the change until it ended.
        let lock = try #require(device.currentLock, "streaming640x480 keeps the configuration lock")
        try device.configure(DeviceConfigurationChange(formatID: "RGB3-800x600"), lock: lock)
        #expect(!camera.isStreaming)
        var count = 0
        for try await frame in try device.frames() {
            #expect(frame.format.id == "RGB3-800x600")
            count += 1
            if count == 3 { break }
        }
        #expect(count == 3)
    }

    @Test("with lending off every frame is copied out of the driver's buffer")
    func copiedFrames() async throws {
        let (camera, device, path) = try Self.streaming640x480(48, lendFrames: false)
        defer { Emulator.remove(path) }
        var count = 0
        for try await frame in try device.frames() {
            #expect(Self.intact(frame))
            count += 1
            if count == 10 { break }
        }
        #expect(camera.frameBuffers.lent == 0)
        #expect(camera.frameBuffers.copied >= 10)
    }
}

/// Real cameras, where the machine has any: every capture node opens and describes itself, and streams.
@Suite("V4L2 backend on real hardware", .timeLimit(.minutes(2)))
struct V4L2HardwareTests {
    static let cameras = V4L2DeviceProvider().scan()

    @Test("each real camera lists formats and streams a few frames", .enabled(if: !cameras.isEmpty, "no V4L2 capture device on this machine (/dev/video*); tests on real hardware are skipped"))
    func realCameras() async throws {
        for backend in Self.cameras {
            let device = try CaptureDevice(backend: backend)
            #expect(!device.formats.isEmpty)
            var count = 0
            for try await frame in try device.frames() {
                #expect(frame.bytes.readableBytes > 0)
                count += 1
                if count == 5 { break }
            }
        }
    }
}
