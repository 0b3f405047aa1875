/// Every pending trigger of an agent, ordered by time, and what the scheduler's thread does next.
///
/// A trigger has two moments on the agent's clock: it is *prepared* a lead before its instant T
/// (cameras start, so that the frame exposed at T exists), and it *fires* at T. The thread sleeps to the
/// earliest moment, stopping `spinWindow` short of a firing to spin the last stretch, since a sleep
/// wakes tens of microseconds late and a spin does not.
///
/// Pure: time is a parameter (agent clock nanoseconds), so tests drive it with a manual clock.
public struct TriggerSchedule<Payload: Sendable>: Sendable {
    /// A trigger waiting for its moments.
    public struct Entry: Sendable {
        /// Identifies the entry within this schedule.
        public var id: UInt64
        /// The instant T on the agent's clock.
        public var fireAt: Int64
        /// When preparing starts (T minus the lead).
        public var prepareAt: Int64
        /// Whether the entry has been prepared.
        public var prepared = false
        /// What to do at the two moments.
        public var payload: Payload
    }

    /// What the scheduler's thread does next.
    public enum Next: Sendable {
        /// Nothing is pending: wait until a trigger is added.
        case idle
        /// Sleep until the agent clock reads this (a new trigger may wake the thread earlier).
        case sleep(untilReading: Int64)
        /// Spin until the agent clock reads this, then ask again.
        case spin(untilReading: Int64)
        /// Prepare these entries now.
        case prepare([Entry])
        /// Fire these entries now (their instant has come); they leave the schedule.
        case fire([Entry])
    }

    /// Why a trigger was not added.
    public enum Refusal: Error, Sendable, Equatable {
        /// Its instant has passed by this many nanoseconds.
        case late(byNanoseconds: Int64)
        /// `capacity` triggers are already pending.
        case full(capacity: Int)
        /// The scheduler has shut down.
        case stopped
    }

    /// How many triggers may be pending at once.
    public let capacity: Int
    /// How long before a trigger's instant the scheduler stops sleeping and spins.
    public let spinWindow: Int64
    /// How long before a trigger's instant it is prepared.
    public let lead: Int64
    private var entries: [Entry] = []
    private var nextID: UInt64 = 1

    /// - Parameters:
    ///   - capacity: the most triggers pending at once.
    ///   - lead: how long before T a trigger is prepared (its cameras started).
    ///   - spinWindow: how long before T the thread stops sleeping and spins.
    public init(capacity: Int, lead: Int64, spinWindow: Int64) {
        self.capacity = capacity
        self.lead = lead
        self.spinWindow = spinWindow
    }

    /// Triggers pending.
    public var count: Int { entries.count }

    /// Adds a trigger firing at `fireAt`; refuses it if that instant is not after `now` or the schedule is full.
    public mutating func add(fireAt: Int64, payload: Payload, now: Int64) -> Result<UInt64, Refusal> {
        guard fireAt > now else { return .failure(.late(byNanoseconds: now - fireAt)) }
        guard entries.count < capacity else { return .failure(.full(capacity: capacity)) }
        let id = nextID
        nextID += 1
        let entry = Entry(id: id, fireAt: fireAt, prepareAt: fireAt - lead, payload: payload)
        // Kept sorted by instant; equal instants keep their arrival order.
        let index = entries.firstIndex { $0.fireAt > fireAt } ?? entries.endIndex
        entries.insert(entry, at: index)
        return .success(id)
    }

    /// Removes and returns every pending entry (shutdown).
    public mutating func removeAll() -> [Entry] {
        defer { entries.removeAll() }
        return entries
    }

    /// What to do at `now`. Preparing and firing entries are taken (prepared ones marked, fired ones
    /// removed). An entry is always prepared before it fires, even one whose instant came first (its
    /// thread was held up, or it arrived with less than the lead).
    public mutating func next(now: Int64) -> Next {
        guard let first = entries.first else { return .idle }
        var toPrepare: [Entry] = []
        if first.fireAt <= now {
            let due = entries.prefix { $0.fireAt <= now }.count
            for index in 0..<due where !entries[index].prepared {
                entries[index].prepared = true
                toPrepare.append(entries[index])
            }
            if !toPrepare.isEmpty { return .prepare(toPrepare) }
            defer { entries.removeFirst(due) }
            return .fire(Array(entries.prefix(due)))
        }
        for index in entries.indices where !entries[index].prepared && entries[index].prepareAt <= now {
            entries[index].prepared = true
            toPrepare.append(entries[index])
        }
        if !toPrepare.isEmpty { return .prepare(toPrepare) }
        if first.fireAt - spinWindow <= now { return .spin(untilReading: first.fireAt) }
        let nextPrepare = entries.lazy.filter { !$0.prepared }.map(\.prepareAt).min() ?? .max
        return .sleep(untilReading: min(first.fireAt - spinWindow, nextPrepare))
    }
}
