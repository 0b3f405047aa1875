import CamRigClock
import CamRigCoordinator
import CamRigDeviceModel
import CamRigDevices
import Testing

/// The capture timeline: trigger lead, T, and a recording's cut-offs.
@Suite("Capture plan", .timeLimit(.minutes(1)))
struct CapturePlanTests {
    static let now: Int64 = 5_000_000_000
    static let thirty = FrameDuration(framesPerSecond: 30)!

    @Test("the lead is four of the slowest recent round trips plus 40 ms and 1 ms per further agent (or 1.5× the last fan-out), and never under 50 ms")
    func lead() {
        #expect(CapturePlan.lead(roundTrips: []) == .milliseconds(50))
        #expect(CapturePlan.lead(roundTrips: [200_000, 900_000]) == .milliseconds(50))
        #expect(CapturePlan.lead(roundTrips: [1_000_000, 10_000_000, 3_000_000]) == .milliseconds(80))
        // A thousand agents take their triggers in one after the other: the lead leaves room for it.
        #expect(CapturePlan.lead(roundTrips: [200_000], agents: 1) == .milliseconds(50))
        #expect(CapturePlan.lead(roundTrips: [200_000], agents: 1000) == .nanoseconds(40_800_000 + 999 * 1_000_000))
        // Once a fan-out was measured, the lead leaves room for half as much again if that is more.
        #expect(CapturePlan.lead(roundTrips: [200_000], agents: 100, lastFanOut: 120_000_000) == .nanoseconds(40_800_000 + 180_000_000))
        #expect(CapturePlan.lead(roundTrips: [200_000], agents: 1000, lastFanOut: 10_000_000) == .nanoseconds(40_800_000 + 999 * 1_000_000))
        #expect(CapturePlan.lead(roundTrips: [200_000], agents: 10, lastFanOut: 11_000_000_000) == .nanoseconds(40_800_000 + 2_000_000_000))
    }

    @Test("a photo fires once, the lead after the plan was made, and has no cut-offs")
    func photo() {
        let plan = CapturePlan.photo(at: Self.now, roundTrips: [10_000_000])
        #expect(plan.plannedAt == Self.now)
        #expect(plan.fireAt == Self.now + 80_000_000)
        #expect(plan.recording == nil)
    }

    @Test("a recording stops its duration after T; streams stop a period and 20 ms after that")
    func recordingCutOffs() throws {
        let plan = CapturePlan.recording(
            at: Self.now, roundTrips: [], duration: .seconds(2), frameDuration: Self.thirty)
        let cutOffs = try #require(plan.recording)
        #expect(plan.fireAt == Self.now + 50_000_000)
        #expect(cutOffs.framePeriod == 33_333_333)
        #expect(cutOffs.stopAt == plan.fireAt + 2_000_000_000)
        #expect(cutOffs.lastExposure == cutOffs.stopAt - 16_666_666)
        #expect(cutOffs.stopStreamsAt == cutOffs.stopAt + 33_333_333 + 200_000_000)
        #expect(cutOffs.duration == .seconds(2))
    }

    @Test("exactly the frames on T's grid before the end are recorded, even with a millisecond of jitter")
    func framesWithinTheRecording() throws {
        let plan = CapturePlan.recording(
            at: Self.now, roundTrips: [], duration: .seconds(1), frameDuration: Self.thirty)
        let cutOffs = try #require(plan.recording)
        for jitter: Int64 in [-1_000_000, 0, 1_000_000] {
            let recorded = (0..<40).filter { frame in
                !cutOffs.isAfterEnd(exposedAt: plan.fireAt + Int64(frame) * cutOffs.framePeriod + jitter)
            }
            #expect(recorded == Array(0..<30), "jitter \(jitter) ns")
        }
    }

    @Test("a camera on the grid owes every frame recorded; when the period does not divide the duration, not the instant that lands on the end")
    func framesOwed() throws {
        func recording(_ duration: Duration, fps: UInt32) throws -> CapturePlan.Recording {
            try #require(
                CapturePlan.recording(at: Self.now, roundTrips: [], duration: duration, frameDuration: FrameDuration(framesPerSecond: fps)!)
                    .recording)
        }
        // Whole periods: every instant the recording keeps (see framesWithinTheRecording) is owed.
        let whole = try recording(.seconds(1), fps: 30)
        #expect(whole.framesPerCamera == 30)
        #expect(whole.lastFrameDue == whole.start + 29 * whole.framePeriod)
        #expect(try recording(.seconds(3), fps: 15).framesPerCamera == 45)
        // 1.5 s at 15 fps is 22.5 periods: instant 22 lies on the end itself (jitter puts it on either side),
        // so 22 are owed, and the 22 the recording keeps whatever the jitter are exactly those.
        let half = try recording(.milliseconds(1500), fps: 15)
        #expect(half.framesPerCamera == 22)
        for jitter: Int64 in [-1_000_000, 1_000_000] {
            let kept = (0..<30).filter { !half.isAfterEnd(exposedAt: half.start + Int64($0) * half.framePeriod + jitter) }
            #expect(kept.count >= half.framesPerCamera, "jitter \(jitter) ns: \(kept.count) kept")
        }
        // 1.2 s at 10 fps: 12 periods.
        #expect(try recording(.milliseconds(1200), fps: 10).framesPerCamera == 12)
    }

    @Test("a set waits a second for a lagging camera, or four periods at slow rates")
    func setTimeout() throws {
        let fast = try #require(
            CapturePlan.recording(at: Self.now, roundTrips: [], duration: .seconds(1), frameDuration: Self.thirty)
                .recording)
        #expect(fast.closeSetsAfter == 1_000_000_000)
        let slow = try #require(
            CapturePlan.recording(
                at: Self.now, roundTrips: [], duration: .seconds(10), frameDuration: FrameDuration(framesPerSecond: 2)!
            )
            .recording)
        #expect(slow.closeSetsAfter == 2_000_000_000)
    }
}
