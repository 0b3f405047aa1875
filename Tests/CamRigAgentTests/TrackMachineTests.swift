import Testing

@testable import CamRigAgent

/// One track's life as its machine decides it: where frames go, when it closes, what is left as gaps, and
/// which frames the stream may hand over.
@Suite("On-host recording: a track's machine", .timeLimit(.minutes(1)))
struct TrackMachineTests {
    /// A 30 fps grid from t = 1 s, five instants.
    static let grid = RecordingGrid(start: 1_000_000_000, period: 33_333_333.3, count: 5)

    @Test("frames are written at their instants with the skipped ones as gaps; the last instant's frame closes the track")
    func closesAtTheLastInstant() {
        var machine = TrackMachine(grid: Self.grid)
        #expect(machine.frame(exposureStart: Self.grid.instant(0) - 20_000_000) == .ignore, "before the first instant")
        #expect(machine.frame(exposureStart: Self.grid.instant(0)) == .write(index: 0, gaps: 0..<0, duplicate: false, thenClose: nil))
        #expect(machine.frame(exposureStart: Self.grid.instant(3)) == .write(index: 3, gaps: 1..<3, duplicate: false, thenClose: nil))
        #expect(machine.frame(exposureStart: Self.grid.instant(4)) == .write(index: 4, gaps: 4..<4, duplicate: false, thenClose: 5..<5))
        #expect(machine.state == .closed)
        #expect(machine.frame(exposureStart: Self.grid.instant(4) + 100) == .ignore, "a closed track writes nothing")
        #expect(machine.grid.frames == 3 && machine.grid.gaps == 2)
    }

    @Test("a frame past the last instant closes the track, the instants it never had left as gaps")
    func frameAfterTheEnd() {
        var machine = TrackMachine(grid: Self.grid)
        _ = machine.frame(exposureStart: Self.grid.instant(1))
        #expect(machine.frame(exposureStart: Self.grid.instant(7)) == .close(trailingGaps: 2..<5))
        #expect(machine.close() == nil, "closing again does nothing")
    }

    @Test("a stop waits for the frame of the instant nearest it, or closes at once when that instant is filled")
    func stop() {
        var machine = TrackMachine(grid: Self.grid)
        _ = machine.frame(exposureStart: Self.grid.instant(0))
        #expect(machine.stop(at: Self.grid.instant(1) + 1_000_000) == nil, "instant 1 is still to come")
        #expect(machine.frame(exposureStart: Self.grid.instant(1)) == .write(index: 1, gaps: 1..<1, duplicate: false, thenClose: 2..<2))
        var filled = TrackMachine(grid: Self.grid)
        _ = filled.frame(exposureStart: Self.grid.instant(0))
        _ = filled.frame(exposureStart: Self.grid.instant(1))
        #expect(filled.stop(at: Self.grid.instant(0) + 1_000_000) == 2..<2, "a stop before the last frame written closes at once")
        #expect(filled.state == .closed)
    }

    @Test("a close (time is up, the stream ended) leaves every instant ahead as a gap")
    func close() {
        var machine = TrackMachine(grid: Self.grid)
        _ = machine.frame(exposureStart: Self.grid.instant(0))
        #expect(machine.close() == 1..<5)
        #expect(machine.grid.gaps == 4)
    }

    @Test("the intake lends the driver's buffers for the first waiting frames, copies the rest, and refuses past its limit or once closed")
    func intake() {
        var intake = TrackIntake(maxQueued: 4, lentFrames: 2)
        #expect([intake.admit(), intake.admit(), intake.admit(), intake.admit(), intake.admit()] == [.keep, .keep, .copy, .copy, .refuse])
        intake.taken()
        #expect(intake.admit() == .copy, "room again once the writer took one")
        intake.close()
        #expect(intake.admit() == .refuse)
    }
}
