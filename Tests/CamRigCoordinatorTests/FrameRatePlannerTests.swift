import CamRigCoordinator
import CamRigDeviceModel
import CamRigDevices
import Testing

/// One frame rate for the whole rig, chosen before anything changes.
@Suite("Rig-wide frame rate", .timeLimit(.minutes(1)))
struct FrameRatePlannerTests {
    static let hd = Dimensions(width: 1920, height: 1080)
    static let vga = Dimensions(width: 640, height: 480)

    static func fps(_ rate: UInt32) -> FrameDuration { FrameDuration(framesPerSecond: rate)! }

    static func format(_ pixel: PixelFormat, _ size: Dimensions, _ rates: [UInt32]) -> DeviceFormat {
        DeviceFormat(pixelFormat: pixel, dimensions: size, frameRateRanges: rates.map { FrameRateRange(discrete: fps($0)) })
    }

    @Test("the highest rate every camera supports at the size wins, min = max frame duration on all")
    func highestCommon() throws {
        let devices = [
            FrameRatePlanner.Device(name: "a/cam0", formats: [Self.format(.yuyv, Self.hd, [60, 30, 15])]),
            FrameRatePlanner.Device(name: "b/cam0", formats: [Self.format(.yuyv, Self.hd, [30, 15]), Self.format(.mjpeg, Self.hd, [60, 30])]),
            FrameRatePlanner.Device(name: "c/cam0", formats: [Self.format(.yuyv, Self.hd, [50, 30, 25])]),
        ]
        let plan = try FrameRatePlanner.plan(.init(dimensions: Self.hd), devices: devices)
        #expect(plan.frameDuration == Self.fps(30))
        #expect(plan.formats.map(\.pixelFormat) == [.yuyv, .yuyv, .yuyv])
    }

    @Test("a continuous range meets a discrete one at the slower camera's fastest rate")
    func continuousAndDiscrete() throws {
        let continuous = DeviceFormat(pixelFormat: .yuyv, dimensions: Self.vga, frameRateRanges: [FrameRateRange(min: Self.fps(120), max: Self.fps(1), kind: .continuous)!])
        let devices = [
            FrameRatePlanner.Device(name: "a/cam0", formats: [continuous]),
            FrameRatePlanner.Device(name: "b/cam0", formats: [Self.format(.yuyv, Self.vga, [90, 45])]),
        ]
        #expect(try FrameRatePlanner.plan(.init(dimensions: Self.vga), devices: devices).frameDuration == Self.fps(90))
    }

    @Test("NTSC rates stay exact: 30000/1001 is planned as 1001/30000 s, not 29.97")
    func exactRates() throws {
        let ntsc = FrameDuration(numerator: 1001, denominator: 30000)!
        let format = DeviceFormat(pixelFormat: .yuyv, dimensions: Self.hd, frameRateRanges: [FrameRateRange(discrete: ntsc), FrameRateRange(discrete: Self.fps(25))])
        let devices = [FrameRatePlanner.Device(name: "a/cam0", formats: [format]), FrameRatePlanner.Device(name: "b/cam0", formats: [format])]
        #expect(try FrameRatePlanner.plan(.init(dimensions: Self.hd), devices: devices).frameDuration == ntsc)
    }

    @Test("a requested rate some camera lacks fails before anything changes, listing every camera's ranges")
    func requestedRateUnsupported() {
        let devices = [
            FrameRatePlanner.Device(name: "a/cam0", formats: [Self.format(.yuyv, Self.hd, [60, 30])]),
            FrameRatePlanner.Device(name: "b/cam0", formats: [Self.format(.yuyv, Self.hd, [30, 15])]),
        ]
        #expect(throws: FrameRatePlanner.PlanError.self) {
            try FrameRatePlanner.plan(.init(dimensions: Self.hd, frameDuration: Self.fps(60)), devices: devices)
        }
        do {
            _ = try FrameRatePlanner.plan(.init(dimensions: Self.hd, frameDuration: Self.fps(60)), devices: devices)
        } catch {
            #expect(error.description.contains("60 fps"))
            #expect(error.description.contains("a/cam0"))
            #expect(error.description.contains("b/cam0"))
        }
    }

    @Test("a size one camera does not offer is named with the sizes it does offer")
    func missingSize() {
        let devices = [
            FrameRatePlanner.Device(name: "a/cam0", formats: [Self.format(.yuyv, Self.hd, [30])]),
            FrameRatePlanner.Device(name: "b/cam0", formats: [Self.format(.yuyv, Self.vga, [30])]),
        ]
        do {
            _ = try FrameRatePlanner.plan(.init(dimensions: Self.hd), devices: devices)
            Issue.record("planned a size camera b lacks")
        } catch {
            #expect(error.description.contains("b/cam0: offers YUYV 640x480"))
            #expect(!error.description.contains("a/cam0"))
        }
    }

    @Test("a requested pixel format narrows the choice")
    func pixelFormat() throws {
        let devices = [FrameRatePlanner.Device(name: "a/cam0", formats: [Self.format(.yuyv, Self.hd, [30]), Self.format(.mjpeg, Self.hd, [60])])]
        let plan = try FrameRatePlanner.plan(.init(dimensions: Self.hd, pixelFormat: .mjpeg), devices: devices)
        #expect(plan.formats[0].pixelFormat == .mjpeg)
        #expect(plan.frameDuration == Self.fps(60))
    }
}
