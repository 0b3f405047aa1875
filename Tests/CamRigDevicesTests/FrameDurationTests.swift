import CamRigDeviceModel
import CamRigDevices
import Testing

@Suite("Frame durations as exact rationals", .timeLimit(.minutes(1)))
struct FrameDurationTests {
    @Test("equal values in different terms are equal and hash alike")
    func equality() {
        let a = FrameDuration(numerator: 1, denominator: 30)!
        let b = FrameDuration(numerator: 2, denominator: 60)!
        #expect(a == b)
        #expect(Set([a, b]).count == 1)
        #expect(b.reduced.numerator == 1 && b.reduced.denominator == 30)
    }

    @Test("ordering compares exactly, where floating point would not")
    func ordering() {
        // 1001/30000 (29.97 fps) is longer than 1/30.
        let ntsc = FrameDuration(numerator: 1001, denominator: 30000)!
        let thirty = FrameDuration(framesPerSecond: 30)!
        #expect(thirty < ntsc)
        // Cross-multiplied in 64 bits: exact even at the extremes of 32-bit fractions.
        let a = FrameDuration(numerator: .max, denominator: .max - 1)!
        let b = FrameDuration(numerator: .max - 1, denominator: .max - 2)!
        #expect(a < b)
        #expect(a != b)
    }

    @Test("zero numerators or denominators are not durations")
    func invalid() {
        #expect(FrameDuration(numerator: 0, denominator: 30) == nil)
        #expect(FrameDuration(numerator: 1, denominator: 0) == nil)
    }

    @Test("conversions for display and scheduling")
    func conversions() {
        let ntsc = FrameDuration(numerator: 1001, denominator: 30000)!
        #expect(ntsc.nanoseconds == 33_366_667)
        #expect(abs(ntsc.frameRate - 29.97) < 0.001)
        #expect(ntsc.description == "1001/30000 s (29.97 fps)")
        #expect(FrameDuration(framesPerSecond: 60)!.description == "1/60 s (60 fps)")
    }
}
