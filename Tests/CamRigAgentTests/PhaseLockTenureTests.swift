import Testing

@testable import CamRigAgent

/// Whom a phase lock answers to when its coordinator lets go during a recording of the camera.
@Suite("Phase lock tenure", .timeLimit(.minutes(1)))
struct PhaseLockTenureTests {
    static let second: Int64 = 1_000_000_000

    @Test("a coordinator that lets go while no recording runs ends the lock, as before")
    func releasedWithoutRecording() {
        var tenure = PhaseLockTenure()
        let left1 = tenure.coordinatorLeft(recording: false, steers: true, now: Self.second)
        #expect(left1 == .release)
        #expect(!tenure.isHeldForRecording)
    }

    @Test("a coordinator killed mid-recording leaves the camera held on its grid until the recording has ended")
    func heldUntilTheRecordingEnds() {
        var tenure = PhaseLockTenure()
        let left2 = tenure.coordinatorLeft(recording: true, steers: true, now: Self.second)
        #expect(left2 == .keep)
        #expect(tenure.isHeldForRecording)
        #expect(tenure.holder == .recording(since: Self.second))
        // Frames keep coming: it asks about the recording at most twice a second…
        let asks3 = tenure.shouldAskAboutRecording(now: Self.second + 100_000_000)
        #expect(!asks3)
        let asks4 = tenure.shouldAskAboutRecording(now: Self.second + PhaseLockTenure.recordingCheckInterval)
        #expect(asks4)
        let asks5 = tenure.shouldAskAboutRecording(now: Self.second + PhaseLockTenure.recordingCheckInterval + 1)
        #expect(!asks5)
        // …keeps steering while it runs, minutes on…
        #expect(tenure.recordingAnswered(recording: true, steers: true) == .keep)
        let asks6 = tenure.shouldAskAboutRecording(now: 300 * Self.second)
        #expect(asks6)
        #expect(tenure.recordingAnswered(recording: true, steers: true) == .keep)
        // …and lets go once it has ended.
        let asks7 = tenure.shouldAskAboutRecording(now: 301 * Self.second)
        #expect(asks7)
        #expect(tenure.recordingAnswered(recording: false, steers: true) == .release)
    }

    @Test("a second lease ending (another coordinator's) keeps the time the lock was first held for the recording")
    func leftTwice() {
        var tenure = PhaseLockTenure()
        let left8 = tenure.coordinatorLeft(recording: true, steers: true, now: Self.second)
        #expect(left8 == .keep)
        let left9 = tenure.coordinatorLeft(recording: true, steers: true, now: 2 * Self.second)
        #expect(left9 == .keep)
        #expect(tenure.holder == .recording(since: Self.second))
    }

    @Test("a camera that starts exposing on command, or a lock that has ended, has nothing to hold: released at once")
    func nothingToHold() {
        var triggered = PhaseLockTenure()
        let left10 = triggered.coordinatorLeft(recording: true, steers: false, now: Self.second)
        #expect(left10 == .release)
        var held = PhaseLockTenure()
        let left11 = held.coordinatorLeft(recording: true, steers: true, now: Self.second)
        #expect(left11 == .keep)
        // Its stream ended meanwhile (the camera vanished): nothing is left to hold for the recording.
        #expect(held.recordingAnswered(recording: true, steers: false) == .release)
    }

    @Test("a coordinator that locks the camera again takes it back: its lease governs, and no recording check releases it")
    func relocked() {
        var tenure = PhaseLockTenure()
        let left12 = tenure.coordinatorLeft(recording: true, steers: true, now: Self.second)
        #expect(left12 == .keep)
        tenure.relocked()
        #expect(tenure.holder == .coordinator)
        let asks13 = tenure.shouldAskAboutRecording(now: 10 * Self.second)
        #expect(!asks13)
        #expect(tenure.recordingAnswered(recording: false, steers: true) == .keep)
        // Its lease ending after the recording: released.
        let left14 = tenure.coordinatorLeft(recording: false, steers: true, now: 11 * Self.second)
        #expect(left14 == .release)
    }
}
