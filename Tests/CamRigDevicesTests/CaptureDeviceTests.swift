import CamRigDeviceModel
import CamRigDevices
import Testing

@Suite("Capture device: lock, formats, ranges", .timeLimit(.minutes(1)))
struct CaptureDeviceTests {
    func device() throws -> CaptureDevice {
        try CaptureDevice(backend: SyntheticCamera(SyntheticCameraConfiguration(serial: "T1")))
    }

    @Test("changes need the configuration lock; a held lock names its holder")
    func lockRules() throws {
        let device = try device()
        let change = DeviceConfigurationChange(formatID: "YUYV-1280x720")
        let someone = try device.lockForConfiguration(holder: "coordinator-a")
        let held = #expect(throws: DeviceError.self) { try device.lockForConfiguration(holder: "coordinator-b") }
        #expect(held?.code == .lockHeld)
        #expect(held?.message.contains("'coordinator-a'") == true)
        device.unlockForConfiguration(someone)
        let unlocked = #expect(throws: DeviceError.self) { try device.configure(change, lock: someone) }
        #expect(unlocked?.code == .notLocked)
        let lock = try device.lockForConfiguration(holder: "coordinator-b")
        try device.configure(change, lock: lock)
        #expect(device.activeFormat.id == "YUYV-1280x720")
        #expect(device.activeMinFrameDuration == FrameDuration(framesPerSecond: 30))
    }

    @Test("a frame duration outside the active format's ranges is refused, listing the allowed ones")
    func outOfRange() throws {
        let device = try device()
        let lock = try device.lockForConfiguration(holder: "test")
        var change = DeviceConfigurationChange()
        change.minFrameDuration = FrameDuration(framesPerSecond: 25)
        let error = #expect(throws: DeviceError.self) { try device.configure(change, lock: lock) }
        #expect(error?.code == .outOfRange)
        #expect(error?.allowedRanges.count == 3)
        #expect(error?.message.contains("1/60 s (60 fps); 1/30 s (30 fps); 1/15 s (15 fps)") == true)
        #expect(device.activeMinFrameDuration == FrameDuration(framesPerSecond: 30), "nothing changes on failure")
    }

    @Test("stepwise ranges accept only whole steps, continuous ranges anything between")
    func stepwise() throws {
        let device = try device()
        let lock = try device.lockForConfiguration(holder: "test")
        try device.configure(DeviceConfigurationChange(formatID: "RGGB-1280x720", minFrameDuration: FrameDuration(numerator: 3, denominator: 60)), lock: lock)
        #expect(device.activeMinFrameDuration == FrameDuration(framesPerSecond: 20))
        #expect(throws: DeviceError.self) {
            try device.configure(DeviceConfigurationChange(minFrameDuration: FrameDuration(numerator: 5, denominator: 120)), lock: lock)
        }
        try device.configure(DeviceConfigurationChange(formatID: "MJPG-640x480", minFrameDuration: FrameDuration(numerator: 1001, denominator: 30000)), lock: lock)
        #expect(device.activeMinFrameDuration == FrameDuration(numerator: 1001, denominator: 30000))
    }

    @Test("an unknown format lists the device's formats; unsupported typed controls are refused")
    func unknownFormat() throws {
        let device = try device()
        let lock = try device.lockForConfiguration(holder: "test")
        let error = #expect(throws: DeviceError.self) { try device.configure(DeviceConfigurationChange(formatID: "NV12-640x480"), lock: lock) }
        #expect(error?.message.contains("YUYV-640x480") == true)
        var change = DeviceConfigurationChange()
        change.settings.zoomFactor = 9
        let zoom = #expect(throws: DeviceError.self) { try device.configure(change, lock: lock) }
        #expect(zoom?.code == .outOfRange)
        #expect(device.isFocusModeSupported(.continuous))
        #expect(device.isExposureModeSupported(.custom))
    }

    @Test("raw controls are checked against their descriptors")
    func rawControls() throws {
        let device = try device()
        let lock = try device.lockForConfiguration(holder: "test")
        var change = DeviceConfigurationChange()
        change.rawControls = [V4L2ControlID.brightness: 300]
        let error = #expect(throws: DeviceError.self) { try device.configure(change, lock: lock) }
        #expect(error?.message.contains("0…255") == true)
        change.rawControls = [V4L2ControlID.powerLineFrequency: 7]
        let menu = #expect(throws: DeviceError.self) { try device.configure(change, lock: lock) }
        #expect(menu?.message.contains("within 0…2") == true)
        change.rawControls = [V4L2ControlID.brightness: 200]
        try device.configure(change, lock: lock)
        #expect(try device.controlValues()[V4L2ControlID.brightness] == 200)
    }

    @Test("the highest-frame-rate selection picks the fastest range and sets min = max")
    func highestFrameRate() throws {
        let device = try device()
        let best = try #require(device.highestFrameRateFormat())
        #expect(best.format.id == "YUYV-320x240")
        #expect(best.range.maxFrameRate == 120)
        let lock = try device.lockForConfiguration(holder: "test")
        try device.configureForHighestFrameRate(lock: lock)
        #expect(device.activeFormat.id == "YUYV-320x240")
        #expect(device.activeMinFrameDuration == FrameDuration(framesPerSecond: 120))
        #expect(device.activeMaxFrameDuration == FrameDuration(framesPerSecond: 120))
    }
}

@Suite("Device discovery", .timeLimit(.minutes(1)))
struct DeviceDiscoveryTests {
    @Test("queries return devices ordered by the requested types and filtered by position")
    func query() throws {
        let provider = SyntheticDeviceProvider(count: 3)
        let discovery = DeviceDiscovery(providers: [provider])
        #expect(discovery.devices.count == 3)
        #expect(discovery.devices(types: [.external]).isEmpty)
        #expect(discovery.devices(types: [.external, .synthetic]).count == 3)
        #expect(discovery.devices(types: [.synthetic], position: .back).map(\.uniqueID) == ["synthetic:SYN0002"])
        #expect(discovery.defaultDevice(.synthetic, position: .front)?.uniqueID == "synthetic:SYN0001")
        #expect(discovery.devices(types: [], labelPrefix: "cam2").map(\.uniqueID) == ["synthetic:SYN0003"])
    }

    @Test("plugging and unplugging are published as events")
    func hotPlug() async throws {
        let provider = SyntheticDeviceProvider(count: 1)
        let discovery = DeviceDiscovery(providers: [provider])
        let events = discovery.events()
        let original = try #require(discovery.devices.first)
        provider.plug(SyntheticCameraConfiguration(serial: "HOT1"))
        provider.unplug(serial: "SYN0001")
        discovery.rescan()
        var seen: [String] = []
        for await event in events {
            switch event {
            case .connected(let device): seen.append("+\(device.uniqueID)")
            case .disconnected(let identity): seen.append("-\(identity.uniqueID)")
            }
            if seen.count == 2 { break }
        }
        #expect(seen == ["+synthetic:HOT1", "-synthetic:SYN0001"])
        #expect(!original.isConnected)
        #expect(discovery.devices.map(\.uniqueID) == ["synthetic:HOT1"])
    }
}

@Suite("Zoom ramps and white balance gains", .timeLimit(.minutes(1)))
struct RampTests {
    @Test("a zoom ramp moves the factor step by step to the target, and frames record it")
    func zoomRamp() async throws {
        let device = try CaptureDevice(backend: SyntheticCamera(SyntheticCameraConfiguration(serial: "R1")))
        let lock = try device.lockForConfiguration(holder: "test")
        var change = DeviceConfigurationChange(formatID: "YUYV-320x240", minFrameDuration: FrameDuration(framesPerSecond: 120))
        change.settings.zoomFactor = 2
        change.settings.zoomRampRate = 1  // one doubling a second: 1× to 2× in about a second
        try device.configure(change, lock: lock)
        #expect(device.isRampingZoom)
        #expect(device.settings.zoomFactor < 2)
        var zooms: [Double] = []
        for try await frame in try device.frames(bufferLimit: 400) {
            zooms.append(frame.metadata.zoomFactor)
            if frame.metadata.zoomFactor == 2 && zooms.count > 3 { break }
        }
        #expect(zooms.first! < 1.5)
        #expect(zooms.last == 2)
        #expect(zip(zooms.dropFirst(), zooms).allSatisfy { $0 >= $1 }, "the ramp only moves towards the target")
        #expect(zooms.contains { $0 > 1 && $0 < 2 }, "the ramp passes through intermediate factors")
        #expect(!device.isRampingZoom)
    }

    @Test("white balance gains lock the white balance and are range-checked")
    func gains() throws {
        let device = try CaptureDevice(backend: SyntheticCamera(SyntheticCameraConfiguration(serial: "R2")))
        let lock = try device.lockForConfiguration(holder: "test")
        var change = DeviceConfigurationChange()
        change.settings.whiteBalanceRedGain = 1.5
        try device.configure(change, lock: lock)
        #expect(device.settings.whiteBalanceMode == .locked)
        #expect(device.settings.whiteBalanceRedGain == 1.5)
        change.settings.whiteBalanceRedGain = 9
        #expect(throws: DeviceError.self) { try device.configure(change, lock: lock) }
    }
}
