import CamRigCoordinator
import CamRigDeviceModel
import CamRigDevices
import Testing

/// The grid instant an on-host recording starts at: far enough ahead that every camera makes it.
@Suite("On-host recording start", .timeLimit(.minutes(1)))
struct HostRecordingStartTests {
    static let now: Int64 = 5_000_000_000
    static let period = 1e9 / 30

    /// The first grid index a camera that starts exposing on command records, as its agent starts it: on
    /// the first instant at least 5 ms after the camera is started (`AgentRecordings.start`); frames
    /// before instant 0 are not recorded.
    static func firstIndex(start: Int64, cameraStartedAt: Int64) -> Int64 {
        max(0, Int64((Double(cameraStartedAt + 5_000_000 - start) / period).rounded(.up)))
    }

    /// When an agent gets to start its `track`th camera: the manifest written, the request across, the
    /// check repeated, request and state flushed and the files opened, the cameras before it started.
    static func cameraStart(plannedAt: Int64, roundTrip: Int64, check: Int64, setUp: Int64, track: Int = 0) -> Int64 {
        plannedAt + 15_000_000 + roundTrip / 2 + check + setUp + Int64(track) * 30_000_000
    }

    @Test("a busy agent (a 60 ms check, 120 ms to set up) starts its synthetic cameras on instant 0; the trigger's lead alone left them on instant 1")
    func everyCameraMakesInstantZero() {
        let roundTrip: Int64 = 2_000_000
        let grid = PhaseGrid(anchor: 1_234_567, period: Self.period)
        let chosen = HostRecordingStart(
            now: Self.now, triggerLead: CapturePlan.lead(roundTrips: [roundTrip]), checkDurations: [8_000_000, 60_000_000], tracksPerAgent: 2,
            framePeriod: Self.period, grid: grid)
        for track in 0..<2 {
            let started = Self.cameraStart(plannedAt: Self.now, roundTrip: roundTrip, check: 60_000_000, setUp: 120_000_000, track: track)
            #expect(Self.firstIndex(start: chosen.startAt, cameraStartedAt: started) == 0, "track \(track) misses instant 0")
        }
        // The trigger's lead (what a recording started with before) is long gone by then.
        let triggerOnly = CapturePlan.recording(
            at: Self.now, roundTrips: [roundTrip], duration: .seconds(1), frameDuration: FrameDuration(framesPerSecond: 30)!, grid: grid
        ).fireAt
        let started = Self.cameraStart(plannedAt: Self.now, roundTrip: roundTrip, check: 60_000_000, setUp: 120_000_000)
        #expect(Self.firstIndex(start: triggerOnly, cameraStartedAt: started) >= 1)
    }

    @Test("the start is a grid instant, at least the trigger's lead, the slowest check, the set-up allowances and a frame period ahead")
    func leadAndGrid() {
        let grid = PhaseGrid(anchor: 777, period: Self.period)
        let lead = CapturePlan.lead(roundTrips: [10_000_000])
        let chosen = HostRecordingStart(
            now: Self.now, triggerLead: lead, checkDurations: [30_000_000, 5_000_000], tracksPerAgent: 3, framePeriod: Self.period, grid: grid)
        let earliest = Self.now + lead.nanoseconds + 30_000_000 + HostRecordingStart.setUpAllowance + 2 * HostRecordingStart.perTrackAllowance
            + Int64(Self.period.rounded(.up))
        #expect(chosen.startAt >= earliest)
        #expect(chosen.startAt < earliest + Int64(Self.period.rounded(.up)), "the first grid instant at or after the earliest")
        #expect(abs(grid.error(of: chosen.startAt)) < 1)
        #expect(chosen.lead == .nanoseconds(chosen.startAt - Self.now))
    }

    @Test("without a grid (the rig not phase-locked) and before any check was timed, the start is the earliest instant")
    func noGrid() {
        let chosen = HostRecordingStart(
            now: Self.now, triggerLead: .milliseconds(50), checkDurations: [], tracksPerAgent: 1, framePeriod: Self.period, grid: nil)
        #expect(chosen.startAt == Self.now + 50_000_000 + HostRecordingStart.setUpAllowance + Int64(Self.period.rounded(.up)))
    }
}
