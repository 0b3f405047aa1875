import CamRigWire
import Logging
import ServiceLifecycle

/// What the agent tells its subscribers of state they would otherwise poll for (`SPOOL_STATUS`,
/// `PHASE_STATUS`), decided from one reading of that state per tick: a pure machine, without clocks,
/// locks or I/O (its owner, `StatePublisher`, reads the state and publishes what it returns).
///
/// - The spool's figures are sent when they differ from the figures last sent (and the first reading);
///   a client that subscribes later asks `GetSpoolStatus` once for the figures of now.
/// - Each phase lock's status is sent every tick while the lock is held (its phase error and frame
///   count move with every frame), and an `UNLOCKED` status once for a lock that is gone.
struct StatePublication {
    struct Spool: Equatable {
        var usedBytes: UInt64
        var capacityBytes: UInt64
        var results: UInt32
    }

    private var sentSpool: Spool?
    /// Devices whose phase status was sent last tick.
    private var sentPhases: Set<String> = []

    /// The events for this tick's reading: the spool (nil on an agent without one) and the statuses of
    /// the phase locks held now (nil when no subscriber takes them: nothing is sent, nothing remembered).
    mutating func tick(spool: Spool?, phases: [WirePhaseStatus]?) -> [WireEvent] {
        var events: [WireEvent] = []
        if let spool, spool != sentSpool {
            sentSpool = spool
            var event = WireEvent()
            event.kind = .spoolStatus
            event.message = "result spool: \(spool.results) results, \(spool.usedBytes) of \(spool.capacityBytes) bytes"
            event.spool.usedBytes = spool.usedBytes
            event.spool.capacityBytes = spool.capacityBytes
            event.spool.results = spool.results
            events.append(event)
        }
        guard let phases else {
            sentPhases = []
            return events
        }
        for status in phases {
            var event = WireEvent()
            event.kind = .phaseStatus
            event.deviceID = status.deviceID
            event.message = "\(status.deviceID): phase \(status.state)"
            event.phase = status
            events.append(event)
        }
        let held = Set(phases.map(\.deviceID))
        for gone in sentPhases.subtracting(held).sorted() {
            var event = WireEvent()
            event.kind = .phaseStatus
            event.deviceID = gone
            event.message = "\(gone): phase lock ended"
            event.phase.deviceID = gone
            event.phase.state = .unlocked
            events.append(event)
        }
        sentPhases = held
        return events
    }
}

/// The owner of `StatePublication`: once a second it reads the spool's figures and the phase locks'
/// statuses and publishes what the machine says, until graceful shutdown.
struct StatePublisher: Service {
    let events: AgentEvents
    let spool: ResultSpool?
    let phaseLocks: AgentPhaseLocks?
    var interval: Duration = .seconds(1)

    func run() async {
        await cancelWhenGracefulShutdown {
            var publication = StatePublication()
            while !Task.isCancelled {
                let spool = spool.map {
                    StatePublication.Spool(usedBytes: $0.usedBytes, capacityBytes: $0.capacityBytes, results: UInt32(clamping: $0.count))
                }
                let phases = events.wants(.phaseStatus) ? phaseLocks?.status(deviceIDs: []).devices ?? [] : nil
                for event in publication.tick(spool: spool, phases: phases) { events.publish(event) }
                try? await Task.sleep(for: interval)
            }
        }
    }
}
