import CamRigClock
import CamRigDeviceModel

/// A capture's timeline on the coordinator's clock (nanoseconds of its `CLOCK_MONOTONIC`): the trigger
/// instant T every camera fires at and, for a recording, where it ends.
///
/// Pure: the current time and the agents' round trips come in, so the arithmetic is tested without
/// agents or a clock.
public struct CapturePlan: Sendable, Hashable {
    /// When the plan was made; the triggers leave right after.
    public var plannedAt: Int64
    /// How far ahead of `plannedAt` the cameras fire.
    public var lead: Duration
    /// The cut-offs of a recording; `nil` for a photo.
    public var recording: Recording?

    /// The trigger instant T.
    public var fireAt: Int64 { plannedAt + lead.nanoseconds }

    /// Where a recording of `duration` from T ends, for frames and for streams.
    public struct Recording: Sendable, Hashable {
        public var duration: Duration
        /// The cameras' common frame period.
        public var framePeriod: Int64
        /// T + duration.
        public var stopAt: Int64
        /// Frames exposed at or after this are after the end: counted, not recorded. Exposures on T's
        /// grid fall half a period clear of it, so jitter does not move a frame across.
        public var lastExposure: Int64
        /// When the streams are stopped: the last recorded frame is read out a period after its
        /// exposure began, and it must be delivered first (frames after the end that slip through are
        /// counted).
        public var stopStreamsAt: Int64
        /// How long a sync set waits for a lagging camera: a second, or four periods at slow rates.
        /// Frames from a busy agent arrive late, and a set closed too early turns them into unmatched
        /// frames.
        public var closeSetsAfter: Int64

        /// Whether a frame exposed at `timestamp` (coordinator clock) falls after the recording.
        public func isAfterEnd(exposedAt timestamp: Int64) -> Bool { timestamp >= lastExposure }

        /// T, the recording's first instant.
        public var start: Int64 { stopAt - duration.nanoseconds }

        /// The frames a camera on the grid exposes in the recording: one at T and every period after it,
        /// each at least a quarter period clear of `lastExposure` (when the period does not divide the
        /// duration, an instant right at the end may land on either side of it, and is not counted).
        public var framesPerCamera: Int {
            let span = lastExposure - start - framePeriod / 4
            return span <= 0 || framePeriod <= 0 ? 0 : Int((span - 1) / framePeriod) + 1
        }

        /// When the last of `framesPerCamera` is exposed.
        public var lastFrameDue: Int64 { start + Int64(max(0, framesPerCamera - 1)) * framePeriod }
    }

    public init(plannedAt: Int64, lead: Duration, recording: Recording? = nil) {
        self.plannedAt = plannedAt
        self.lead = lead
        self.recording = recording
    }

    /// Margin for scheduling on the coordinator, on top of the round trips.
    static let schedulingMargin: Int64 = 40_000_000
    /// The shortest lead, however fast the network.
    static let minimumLead: Int64 = 50_000_000
    /// What a round trip is taken to be before any was measured.
    static let unmeasuredRoundTrip: Int64 = 1_000_000
    /// How long after the last frame's readout the streams are stopped: room for a busy host to deliver
    /// it (a stop that arrives first cuts a frame of the span; frames exposed after the end are counted
    /// and left out, so a late stop costs only time).
    static let deliveryMargin: Int64 = 200_000_000

    /// Time allowed per agent for the triggers to go out and be taken in, before a fan-out was
    /// measured. The coordinator writes a trigger in about 15 µs of CPU; an agent on its own host takes
    /// one in well under a millisecond. Agents sharing the coordinator's cores (a simulated rig) take
    /// theirs one after the other: on 2 cores the last accepted 13 ms after the plan at 300 simulated
    /// hosts, 84 ms at 1000, and 115 ms at 200 agent processes (each woken on its own), where 250 µs
    /// per agent left 122 of 400 photos late. A millisecond per agent costs a large rig's first photo
    /// up to a second of lead; later photos take their lead from the fan-out measured.
    static let fanOutPerAgent: Int64 = 1_000_000

    /// The most room a measured fan-out may ask for. A fan-out is timed where its replies are read, by
    /// tasks that a busy coordinator may run late (seen: 11 s at 600 simulated hosts on 2 cores while the
    /// previous set was still being written); a photo is not put off that long.
    static let maximumLearntFanOut: Int64 = 2_000_000_000

    /// The lead before a trigger instant: the slowest recent round trip four times over (the trigger
    /// must reach every agent before T even on a bad round trip), a margin for scheduling, and room for
    /// the fan-out: the allowance for `agents` agents, or one and a half times the last fan-out
    /// measured (`lastFanOut`, from the plan until every agent accepted; at most 2 s), whichever is longer.
    public static func lead(roundTrips: [Int64], agents: Int = 1, lastFanOut: Int64? = nil) -> Duration {
        let worst = roundTrips.max() ?? unmeasuredRoundTrip
        let learnt = min((lastFanOut ?? 0) * 3 / 2, maximumLearntFanOut)
        let fanOut = max(Int64(max(0, agents - 1)) * fanOutPerAgent, learnt)
        return .nanoseconds(max(minimumLead, 4 * worst + schedulingMargin + fanOut))
    }

    /// A photo: every camera fires once at T (on `grid`'s next instant after the lead, when the rig is
    /// phase-locked to one).
    public static func photo(
        at now: Int64, roundTrips: [Int64], agents: Int = 1, lastFanOut: Int64? = nil, grid: PhaseGrid? = nil
    ) -> CapturePlan {
        CapturePlan(plannedAt: now, lead: lead(roundTrips: roundTrips, agents: agents, lastFanOut: lastFanOut))
            .snapped(to: grid)
    }

    /// The plan with T moved forward onto the grid's next instant.
    func snapped(to grid: PhaseGrid?) -> CapturePlan {
        guard let grid else { return self }
        var plan = self
        plan.lead = .nanoseconds(grid.next(atOrAfter: fireAt) - plannedAt)
        return plan
    }

    /// A recording: every camera starts streaming at T and records for `duration`.
    public static func recording(
        at now: Int64, roundTrips: [Int64], agents: Int = 1, lastFanOut: Int64? = nil, duration: Duration,
        frameDuration: FrameDuration, grid: PhaseGrid? = nil
    ) -> CapturePlan {
        var plan = CapturePlan(plannedAt: now, lead: lead(roundTrips: roundTrips, agents: agents, lastFanOut: lastFanOut))
            .snapped(to: grid)
        let period = frameDuration.nanoseconds
        let stopAt = plan.fireAt + duration.nanoseconds
        plan.recording = Recording(
            duration: duration,
            framePeriod: period,
            stopAt: stopAt,
            lastExposure: stopAt - period / 2,
            stopStreamsAt: stopAt + period + deliveryMargin,
            closeSetsAfter: max(4 * period, 1_000_000_000)
        )
        return plan
    }
}
