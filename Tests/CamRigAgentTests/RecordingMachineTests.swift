import CamRigWire
import Testing

@testable import CamRigAgent

/// The life of an on-host recording as its machine decides it: when tracks close, which state file is
/// written when (and never two at once), and when the end is announced.
@Suite("On-host recording: the recording's machine", .timeLimit(.minutes(1)))
struct RecordingMachineTests {
    static let second: Int64 = 1_000_000_000
    /// A recording of two tracks whose last instant plus one period is at 10 s.
    static let end: Int64 = 10 * second

    func machine(_ devices: [String] = ["left", "right"]) -> RecordingMachine {
        RecordingMachine(tracks: devices.map { track($0, .recording) }, end: Self.end, period: 33_333_333.3)
    }

    func track(_ device: String, _ state: WireRecordingState, frames: UInt64 = 0) -> WireRecordedTrack {
        var track = WireRecordedTrack()
        track.deviceID = device
        track.state = state
        track.frames = frames
        return track
    }

    @Test("it wakes a grace second after its end, not before, and wakes again if woken early")
    func wakesAtTheEnd() {
        var machine = machine()
        #expect(machine.started() == [.wake(at: Self.end + RecordingMachine.grace)])
        #expect(machine.deadline(now: Self.end, idle: [:]) == [.wake(at: Self.end + RecordingMachine.grace)], "early: nothing closes")
        #expect(machine.state == .recording)
    }

    @Test("past the end, a quiet track closes and one still delivering gets until it is quiet for a second")
    func lateAndBehind() {
        var machine = machine()
        _ = machine.started()
        let now = Self.end + RecordingMachine.grace
        let actions = machine.deadline(now: now, idle: ["left": 2 * Self.second, "right": 300_000_000])
        #expect(actions == [.closeTracks(["left"], error: nil), .wake(at: now + 700_000_000)], "right is woken for when it would be quiet")
        #expect(machine.state == .closing)
        // Right delivered again: still behind at the next look, so it is looked at again later, not closed.
        #expect(machine.deadline(now: now + 700_000_000, idle: ["left": 3 * Self.second, "right": 100_000_000]) == [.wake(at: now + 1_600_000_000)], "left, asked to close already, is not asked again")
    }

    @Test("a camera still delivering is closed ten seconds after the end whatever it does")
    func lateLimit() {
        var machine = machine(["left"])
        _ = machine.started()
        let closeBy = Self.end + RecordingMachine.lateLimit
        #expect(machine.deadline(now: closeBy - 10, idle: ["left": 0]) == [.wake(at: closeBy)])
        #expect(machine.deadline(now: closeBy, idle: ["left": 0]) == [.closeTracks(["left"], error: nil)])
    }

    @Test("a track that never delivered counts as quiet")
    func neverDelivered() {
        var machine = machine(["left"])
        _ = machine.started()
        #expect(machine.deadline(now: Self.end + RecordingMachine.grace, idle: [:]) == [.closeTracks(["left"], error: nil)])
    }

    @Test("closed tracks are written as they close, one write at a time; the end is announced once the final state is on disk")
    func writesInOrder() {
        var machine = machine()
        _ = machine.started()
        let left = track("left", .complete, frames: 300)
        #expect(machine.trackClosed(left) == [.stopStream(deviceID: "left"), .writeState(.recording, tracks: [left, track("right", .recording)])])
        // Right closes while the first write is on its way: its write waits, it is not lost.
        let right = track("right", .complete, frames: 300)
        #expect(machine.trackClosed(right) == [.stopStream(deviceID: "right")])
        #expect(machine.state == .finishing(.complete))
        #expect(machine.stateWritten() == [.writeState(.complete, tracks: [left, right])], "the final state follows the first write")
        #expect(machine.stateWritten() == [.announceEnded(.complete, tracks: [left, right])])
        #expect(machine.state == .ended)
        #expect(machine.deadline(now: Self.end * 2, idle: [:]) == [], "an ended recording does nothing more")
        #expect(machine.trackClosed(right) == [])
    }

    @Test("a failed or cut-short track makes the recording failed; a track closing twice counts once")
    func failedTrack() {
        var machine = machine()
        _ = machine.started()
        let left = track("left", .failed)
        _ = machine.trackClosed(left)
        #expect(machine.trackClosed(track("left", .complete)) == [], "a track closes once")
        _ = machine.stateWritten()
        let right = track("right", .complete)
        #expect(machine.trackClosed(right) == [.stopStream(deviceID: "right"), .writeState(.failed, tracks: [left, right])])
        #expect(machine.stateWritten() == [.announceEnded(.failed, tracks: [left, right])])
    }

    @Test("a stop ends the recording at the instant nearest it; a camera that stopped delivering closes two periods and a second later")
    func stop() {
        var machine = machine()
        _ = machine.started()
        let now = 4 * Self.second
        #expect(machine.stop(now: now) == [.stopTracks(at: now), .wake(at: now + 66_666_666 + RecordingMachine.grace)])
        #expect(machine.deadline(now: now + 66_666_666 + RecordingMachine.grace, idle: ["left": 2 * Self.second, "right": 2 * Self.second]) == [
            .closeTracks(["left", "right"], error: nil)
        ])
    }

    @Test("a shutdown closes every open track with the reason; the recording still ends with its state on disk")
    func shutdown() {
        var machine = machine()
        _ = machine.started()
        let left = track("left", .complete)
        _ = machine.trackClosed(left)
        _ = machine.stateWritten()
        #expect(machine.shutdown() == [.closeTracks(["right"], error: "the agent shut down during the recording")])
        let right = track("right", .failed)
        #expect(machine.trackClosed(right) == [.stopStream(deviceID: "right"), .writeState(.failed, tracks: [left, right])])
        #expect(machine.stateWritten() == [.announceEnded(.failed, tracks: [left, right])])
    }

    @Test("a final state that cannot be written is tried again a second later, and the end announced once it is on disk or after the last try")
    func finalStateRetried() {
        var machine = machine(["left"])
        _ = machine.started()
        let left = track("left", .complete)
        _ = machine.trackClosed(left)
        let now = 20 * Self.second
        #expect(machine.stateWritten(false, now: now) == [.wake(at: now + RecordingMachine.retryDelay)], "not announced while the state is not on disk")
        #expect(machine.deadline(now: now + RecordingMachine.retryDelay, idle: [:]) == [.writeState(.complete, tracks: [left])])
        #expect(machine.stateWritten(true, now: now) == [.announceEnded(.complete, tracks: [left])])
        var failing = self.machine(["left"])
        _ = failing.started()
        _ = failing.trackClosed(left)
        for attempt in 1..<RecordingMachine.writeAttempts {
            #expect(failing.stateWritten(false, now: now) == [.wake(at: now + RecordingMachine.retryDelay)], "attempt \(attempt)")
            #expect(failing.deadline(now: now + RecordingMachine.retryDelay, idle: [:]) == [.writeState(.complete, tracks: [left])])
        }
        #expect(failing.stateWritten(false, now: now) == [.announceEnded(.complete, tracks: [left])], "announced after the last try")
    }

    @Test("a fetch's chunks fit the client's announced frame limit, as asked otherwise")
    func chunksFitTheClient() {
        let minimum = WireProtocol.minimumMaxFrameLength
        #expect(AgentRecordings.chunkBytes(asked: 0, clientMaxFrameLength: 64 << 20) == 1 << 20)
        #expect(AgentRecordings.chunkBytes(asked: 16 << 20, clientMaxFrameLength: 64 << 20) == 4 << 20, "at most 4 MiB")
        let atMinimum = AgentRecordings.chunkBytes(asked: 0, clientMaxFrameLength: minimum)
        #expect(atMinimum < 1 << 20 && atMinimum + AgentRecordings.fileChunkHeadroom == Int(minimum))
        #expect(AgentRecordings.chunkBytes(asked: 4 << 20, clientMaxFrameLength: 2 << 20) == (2 << 20) - AgentRecordings.fileChunkHeadroom)
        #expect(AgentRecordings.chunkBytes(asked: 0, clientMaxFrameLength: 1000) == atMinimum, "an announcement below the minimum is the minimum")
    }
}
