import CamRigViews
import CamRigWire
import Foundation
import Testing

/// `camrig device set CAMERA key=value…` and the service's settings route read settings through one parser:
/// what an operator writes becomes one `Configure` change, and what cannot be applied as written says
/// what to write instead.
@Suite("Device settings as written", .timeLimit(.minutes(1)))
struct DeviceSettingsParserTests {
    @Test("rates, exposure times, modes, photo output and raw controls become one Configure change")
    func parsesWhatOperatorsWrite() throws {
        let change = try DeviceSettingsParser.parse([
            "format=YUYV-1280x720", "fps=30000/1001", "exposure-duration=1/250", "iso=200", "bias=-0.5", "white-balance=locked",
            "max-photo-size=1920x1080", "max-quality=quality", "0x271b=-12",
        ])
        #expect(change.formatID == "YUYV-1280x720")
        // 29.97 fps is a frame every 1001/30000 s, held there (minimum and maximum alike).
        #expect(change.minFrameDuration.numerator == 1001 && change.minFrameDuration.denominator == 30000)
        #expect(change.maxFrameDuration == change.minFrameDuration)
        #expect(change.exposure.mode == .custom)
        #expect(change.exposure.duration.numerator == 1 && change.exposure.duration.denominator == 250)
        #expect(change.exposure.iso == 200 && change.exposure.targetBias == -0.5)
        #expect(change.whiteBalance.mode == .locked)
        #expect(change.photoOutput.maxPhotoDimensions.width == 1920 && change.photoOutput.maxPhotoDimensions.height == 1080)
        #expect(change.photoOutput.maxQualityPrioritization == .quality)
        #expect(change.rawControls.count == 1 && change.rawControls[0].id == 0x271b && change.rawControls[0].integer == -12)
    }

    @Test("a photo output setting keeps the device's other photo output settings")
    func photoOutputKeepsTheRest() throws {
        var current = WirePhotoOutputSettings()
        current.responsiveCapture = true
        current.maxQualityPrioritization = .balanced
        let change = try DeviceSettingsParser.parse(["deferred=on"], photoOutput: current)
        #expect(change.photoOutput.deferredDelivery)
        #expect(change.photoOutput.responsiveCapture, "responsive capture, set before, is kept")
        #expect(change.photoOutput.maxQualityPrioritization == .balanced)
        // A change without photo output keys leaves the photo output alone.
        #expect(try !DeviceSettingsParser.parse(["fps=30"], photoOutput: current).hasPhotoOutput)
    }

    @Test(
        "what cannot be applied as written is refused with what to write",
        arguments: [
            ([], "at least one key=value"),
            (["fps"], "is not key=value"),
            (["fps=0"], "give a rate like 30 or 30000/1001"),
            (["fps=030"], "give a rate like 30"),
            (["exposure-duration=0.004"], "give seconds as a fraction like 1/250"),
            (["iso=1e3"], "not a number"),
            (["iso=nan"], "not a number"),
            (["focus=manual"], "use one of auto, continuous, locked"),
            (["max-photo-size=1920"], "give WxH"),
            (["shutter=1/250"], "unknown setting 'shutter'"),
            (["0x123456789=1"], "unknown setting"),
            (["0x10=1234567890123456789"], "unknown setting"),
        ] as [([String], String)]
    )
    func refusals(settings: [String], says: String) {
        #expect {
            try DeviceSettingsParser.parse(settings)
        } throws: { error in
            "\(error)".contains(says)
        }
    }
}
