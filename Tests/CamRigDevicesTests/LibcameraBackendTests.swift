import CLibcamera
import CamRigClock
import CamRigDeviceModel
import NIOCore
import Testing

@testable import CamRigDevices

/// The libcamera backend's own logic, which needs no camera: frame-rate ranges from FrameDurationLimits,
/// libcamera's controls as raw controls, the typed settings onto libcamera's controls (upstream 0.4 and
/// Raspberry Pi's 0.5-style controls), stamps on BOOTTIME or MONOTONIC, and 4:2:0 frames for photos.
@Suite("libcamera backend: the mapping onto the device model", .timeLimit(.minutes(1)))
struct LibcameraBackendTests {
    /// A control as CLibcamera reports one.
    static func control(
        _ id: UInt32, _ name: String, type: Int32, array: Bool = false, minimum: [Double] = [], maximum: [Double] = [],
        defaultValue: [Double] = [], enumerators: [(Int32, String)] = []
    ) -> LibcameraControl {
        var c = camrig_lc_control()
        c.id = id
        withUnsafeMutableBytes(of: &c.name) { raw in
            for (index, byte) in name.utf8.prefix(63).enumerated() { raw[index] = byte }
        }
        c.type = type
        c.is_array = array ? 1 : 0
        func fill(_ tuple: inout (Double, Double, Double, Double), _ values: [Double]) {
            withUnsafeMutableBytes(of: &tuple) { raw in
                let slots = raw.bindMemory(to: Double.self)
                for index in 0..<4 { slots[index] = index < values.count ? values[index] : .nan }
            }
        }
        fill(&c.minimum, minimum)
        fill(&c.maximum, maximum)
        fill(&c.default_value, defaultValue)
        c.enumerator_count = UInt32(enumerators.count)
        withUnsafeMutableBytes(of: &c.enumerators) { raw in
            let slots = raw.bindMemory(to: Int32.self)
            for (index, entry) in enumerators.enumerated() { slots[index] = entry.0 }
        }
        withUnsafeMutableBytes(of: &c.enumerator_names) { raw in
            for (index, entry) in enumerators.enumerated() {
                for (offset, byte) in entry.1.utf8.prefix(31).enumerated() { raw[32 * index + offset] = byte }
            }
        }
        return LibcameraControl(c)
    }

    static let int32 = Int32(CAMRIG_LC_INT32)
    static let int64 = Int32(CAMRIG_LC_INT64)
    static let float = Int32(CAMRIG_LC_FLOAT)
    static let bool = Int32(CAMRIG_LC_BOOL)
    static let rectangle = Int32(CAMRIG_LC_RECTANGLE)

    @Test("FrameDurationLimits in whole microseconds become exact rates: 33333 µs is 1/30 s, 16666 µs 1/60 s; others stay as they are")
    func frameDurations() throws {
        #expect(LibcameraCamera.duration(microseconds: 33333) == FrameDuration(framesPerSecond: 30))
        #expect(LibcameraCamera.duration(microseconds: 16666) == FrameDuration(framesPerSecond: 60))
        #expect(LibcameraCamera.duration(microseconds: 66666) == FrameDuration(framesPerSecond: 15))
        #expect(LibcameraCamera.duration(microseconds: 33000) == FrameDuration(numerator: 33000, denominator: 1_000_000))
        let limits = Self.control(25, "FrameDurationLimits", type: Self.int64, array: true, minimum: [16666], maximum: [66666])
        let range = try #require(LibcameraCamera.frameRateRanges(limits).first)
        #expect(range.kind == .continuous)
        #expect(range.minFrameDuration == FrameDuration(framesPerSecond: 60) && range.maxFrameDuration == FrameDuration(framesPerSecond: 15))
        // A camera that lists no limits is taken to run at 30 fps.
        #expect(LibcameraCamera.frameRateRanges(nil) == [FrameRateRange(discrete: FrameDuration(framesPerSecond: 30)!)])
    }

    @Test("scalar controls are raw controls by libcamera's id: booleans, menus named by libcamera's enumerators, floats in thousandths; arrays and rectangles are not")
    func rawControls() throws {
        let aeEnable = try #require(Self.control(1, "AeEnable", type: Self.bool, minimum: [0], maximum: [1], defaultValue: [1]).descriptor)
        #expect(aeEnable.type == .boolean && aeEnable.defaultValue == 1)
        let afMode = try #require(
            Self.control(28, "AfMode", type: Self.int32, minimum: [0], maximum: [2], defaultValue: [0], enumerators: [(0, "AfModeManual"), (1, "AfModeAuto"), (2, "AfModeContinuous")]).descriptor)
        #expect(afMode.type == .menu && afMode.menu.map(\.name) == ["AfModeManual", "AfModeAuto", "AfModeContinuous"])
        let gain = Self.control(7, "AnalogueGain", type: Self.float, minimum: [1], maximum: [16], defaultValue: [1])
        let gainDescriptor = try #require(gain.descriptor)
        #expect(gainDescriptor.name == "AnalogueGain (thousandths)" && gainDescriptor.minimum == 1000 && gainDescriptor.maximum == 16000)
        let value = gain.value(fromRaw: 2500)
        #expect(value.id == 7 && value.count == 1 && value.values.0 == 2.5)
        let exposure = try #require(Self.control(6, "ExposureTime", type: Self.int32, minimum: [100], maximum: [66666], defaultValue: [20000]).descriptor)
        #expect(exposure.type == .integer && exposure.maximum == 66666)
        #expect(Self.control(15, "ColourGains", type: Self.float, array: true).descriptor == nil)
        #expect(Self.control(22, "ScalerCrop", type: Self.rectangle).descriptor == nil)
    }

    /// What `values(for:)` sets, by control name.
    static func settingsValues(_ controls: [LibcameraControl], _ settings: CameraSettings, crop: [Double]? = nil) -> [String: [Double]] {
        let names = Dictionary(uniqueKeysWithValues: controls.map { ($0.id, $0.name) })
        var result: [String: [Double]] = [:]
        for value in LibcameraSettingsMapping(controls).values(for: settings, fullCrop: crop) {
            let numbers = withUnsafeBytes(of: value.values) { Array($0.bindMemory(to: Double.self).prefix(Int(value.count))) }
            result[names[value.id]!] = numbers
        }
        return result
    }

    @Test("a custom exposure sets AeEnable off, ExposureTime in µs and AnalogueGain as ISO/100 on libcamera 0.4; ExposureTimeMode and AnalogueGainMode on 0.5 and Raspberry Pi's fork")
    func exposureSettings() {
        var settings = CameraSettings()
        settings.exposureMode = .custom
        settings.exposureDuration = FrameDuration(numerator: 1, denominator: 250)!
        settings.iso = 400
        let common = [
            Self.control(6, "ExposureTime", type: Self.int32, minimum: [10], maximum: [100_000]),
            Self.control(7, "AnalogueGain", type: Self.float, minimum: [1], maximum: [16]),
        ]
        let upstream = Self.settingsValues(common + [Self.control(1, "AeEnable", type: Self.bool)], settings)
        #expect(upstream["AeEnable"] == [0] && upstream["ExposureTime"] == [4000] && upstream["AnalogueGain"] == [4])
        let newer = Self.settingsValues(
            common + [Self.control(40, "ExposureTimeMode", type: Self.int32), Self.control(41, "AnalogueGainMode", type: Self.int32)], settings)
        #expect(newer["ExposureTimeMode"] == [1] && newer["AnalogueGainMode"] == [1] && newer["AeEnable"] == nil)
        #expect(newer["ExposureTime"] == [4000])
        settings.iso = 10_000
        #expect(Self.settingsValues(common, settings)["AnalogueGain"] == [16], "clamped to the control's range")
        let support = LibcameraSettingsMapping(common + [Self.control(1, "AeEnable", type: Self.bool)]).support
        #expect(support.exposureModes == [.continuous, .auto, .custom, .locked])
        #expect(LibcameraSettingsMapping([]).support == TypedControlSupport(), "no controls, no typed settings")
    }

    @Test("white balance locks through ColourTemperature (or ColourGains), focus through AfMode and LensPosition (dioptres, 0 at infinity), zoom through a centred ScalerCrop")
    func otherSettings() {
        let controls = [
            Self.control(3, "AwbEnable", type: Self.bool),
            Self.control(16, "ColourTemperature", type: Self.int32, minimum: [2000], maximum: [10000]),
            Self.control(28, "AfMode", type: Self.int32, enumerators: [(0, "AfModeManual"), (1, "AfModeAuto"), (2, "AfModeContinuous")]),
            Self.control(30, "LensPosition", type: Self.float, minimum: [0], maximum: [12]),
            Self.control(22, "ScalerCrop", type: Self.rectangle),
        ]
        var settings = CameraSettings()
        settings.whiteBalanceMode = .locked
        settings.whiteBalanceTemperature = 4300
        settings.focusMode = .locked
        settings.lensPosition = 0.25
        settings.zoomFactor = 2
        let values = Self.settingsValues(controls, settings, crop: [0, 0, 4056, 3040])
        #expect(values["AwbEnable"] == [0] && values["ColourTemperature"] == [4300])
        // A quarter of the way from the nearest focus: 12 dioptres (the nearest) less a quarter of the range.
        #expect(values["AfMode"] == [0] && values["LensPosition"] == [9])
        #expect(LibcameraSettingsMapping(controls).lensPosition(dioptres: 9) == 0.25)
        #expect(LibcameraSettingsMapping(controls).lensPosition(dioptres: 0) == 1, "0 dioptres is infinity, the farthest")
        #expect(values["ScalerCrop"] == [1014, 760, 2028, 1520])
        let gainsOnly = Self.settingsValues([Self.control(15, "ColourGains", type: Self.float, array: true)], settings)
        #expect(gainsOnly["ColourGains"] == [1, 1])
        let support = LibcameraSettingsMapping(controls).support
        #expect(support.focusModes == [.locked, .auto, .continuous] && support.lensPosition && support.zoom)
        #expect(support.whiteBalanceModes == [.continuous, .auto, .locked])
    }

    @Test("a SensorTimestamp on CLOCK_MONOTONIC is used as it is; one on CLOCK_BOOTTIME is brought onto CLOCK_MONOTONIC")
    func stampClock() {
        let now = HostClock.monotonicNow()
        var monotonic = StampClock()
        #expect(monotonic.monotonic(sensorTimestamp: now) == now)
        #expect(monotonic.monotonic(sensorTimestamp: now + 33_000_000) == now + 33_000_000)
        // A host that slept 5 s: BOOTTIME leads MONOTONIC by 5 s. A stamp taken 10 ms ago on either clock.
        let lead: Int64 = 5_000_000_000
        #expect(StampClock.offset(of: now + lead - 10_000_000, now: now, bootTimeLead: lead) == lead)
        #expect(StampClock.offset(of: now - 10_000_000, now: now, bootTimeLead: lead) == 0)
        // One that never slept: the few nanoseconds between the two readings are no lead.
        #expect(StampClock.offset(of: now - 10_000_000, now: now, bootTimeLead: -40) == 0)
    }

    @Test("dev_t numbers split into major and minor as glibc's major() and minor() do")
    func deviceNumbers() {
        #expect(LibcameraDeviceProvider.split(0x5103) == (81, 3))
        // Major 511, minor 1000: the high bits of each live above bit 32 and bit 12.
        let device: UInt64 = (UInt64(511 & 0xfff) << 8) | (UInt64(1000 & 0xff)) | (UInt64(1000 & ~0xff) << 12)
        #expect(LibcameraDeviceProvider.split(device) == (511, 1000))
    }

    @Test(
        "without libcamera in the build the provider lists no camera and says why, and claims no V4L2 node",
        .enabled(if: !LibcameraManager.isAvailable, "this build has libcamera: LibcameraTests drive its cameras")
    )
    func withoutLibcamera() throws {
        let provider = LibcameraDeviceProvider()
        #expect(provider.scan().isEmpty)
        #expect(provider.skipped["libcamera"]?.contains("built without libcamera") == true, "\(provider.skipped)")
        #expect(provider.claimedDevices.isEmpty)
    }

    @Test("an NV12 or YU12 frame is packed as YUYV for photos: every luma kept, each chroma sample shared by two rows")
    func packedForPhotos() throws {
        let lumas: [UInt8] = [10, 20, 30, 40, 50, 60, 70, 80]  // 4×2
        let nv12 = DeviceFormat(pixelFormat: .nv12, dimensions: Dimensions(width: 4, height: 2), frameRateRanges: [])
        #expect(nv12.bytesPerLine == 4 && nv12.imageSize == 12)
        for (format, chroma) in [(nv12, [UInt8]([100, 200, 110, 210])), (DeviceFormat(pixelFormat: .yuv420, dimensions: nv12.dimensions, frameRateRanges: []), [100, 110, 200, 210])] {
            var bytes = ByteBuffer()
            bytes.writeBytes(lumas + chroma)
            let frame = CapturedFrame(
                deviceID: "test", sequence: 0, timestamp: 0, timestampMarks: .startOfExposure, format: format, bytes: bytes,
                metadata: CaptureMetadata(settings: CameraSettings()))
            let packed = try #require(PhotoProcessing.packed(frame))
            #expect(packed.format.pixelFormat == .yuyv && packed.format.bytesPerLine == 8)
            #expect(Array(packed.bytes.readableBytesView) == [10, 100, 20, 200, 30, 110, 40, 210, 50, 100, 60, 200, 70, 110, 80, 210], "\(format.pixelFormat)")
            var short = frame
            short.bytes = ByteBuffer(bytes: lumas + chroma.prefix(2))
            #expect(PhotoProcessing.packed(short) == nil, "a frame without all its chroma is not packed")
        }
    }

    @Test("a pipeline whose frames run the FrameDurationLimits asked (to within a line) can be steered; one whose frames keep another duration is judged to ignore them")
    func frameDurationCompliance() {
        var honouring = FrameDurationCompliance()
        for _ in 0..<20 { honouring.observe(requested: 33_333, reported: 33_331) }
        honouring.observe(requested: 30_000, reported: 33_333)
        #expect(honouring.verdict == nil)
        var ignoring = FrameDurationCompliance()
        for index in 0..<FrameDurationCompliance.judgedAfter {
            #expect(ignoring.verdict == nil, "not judged after \(index) frames")
            ignoring.observe(requested: 30_000, reported: 33_333)
        }
        let verdict = ignoring.verdict ?? ""
        #expect(verdict.contains("ignores FrameDurationLimits") && verdict.contains("30000 µs") && verdict.contains("33333 µs"), "\(verdict)")
    }
}
