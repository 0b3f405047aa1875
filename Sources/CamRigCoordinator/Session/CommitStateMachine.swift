/// The two-phase commit of a rig session's configuration across agents, as a pure state machine.
///
/// Participants are the session's devices, numbered `0..<count`. Phase one *prepares* every device
/// (lease it, remember its configuration, validate the change without applying it); phase two
/// *applies* the change everywhere. Any failure in phase one releases every lease taken; any failure
/// in phase two first rolls the devices already changed back to what they were, then releases every
/// lease. The driver performs the actions and reports each device's outcome; the machine decides what
/// happens next, so every path is tested without an agent.
public struct CommitStateMachine: Sendable {
    /// One device's failure, as the error message shows it.
    public struct Failure: Sendable, Equatable {
        public var device: Int
        public var message: String

        public init(device: Int, message: String) {
            self.device = device
            self.message = message
        }
    }

    public enum Outcome: Sendable, Equatable {
        case committed
        /// `failures` caused the abort; `rollbackFailures` are devices that could not be restored.
        case aborted(failures: [Failure], rollbackFailures: [Failure])
    }

    /// What the driver must do next.
    public enum Action: Sendable, Equatable {
        /// Lease, snapshot and validate these devices.
        case prepare([Int])
        /// Apply the change on these devices.
        case apply([Int])
        /// Restore these devices' previous configuration.
        case rollBack([Int])
        /// Release these devices' leases.
        case release([Int])
        /// Done; keep the leases when committed.
        case finish(Outcome)
        /// Wait for more outcomes.
        case wait
    }

    private enum Phase: Equatable {
        case idle
        case preparing
        case applying
        case rollingBack
        case releasing
        case done
    }

    private let count: Int
    private var phase = Phase.idle
    private var outstanding = Set<Int>()
    /// Devices holding a lease taken by this commit.
    private var leased = Set<Int>()
    /// Devices whose configuration this commit changed.
    private var applied = Set<Int>()
    private var failures: [Failure] = []
    private var rollbackFailures: [Failure] = []

    public init(deviceCount: Int) {
        count = deviceCount
    }

    public mutating func start() -> Action {
        precondition(phase == .idle, "a commit starts once")
        guard count > 0 else {
            phase = .done
            return .finish(.committed)
        }
        phase = .preparing
        outstanding = Set(0..<count)
        return .prepare(Array(0..<count))
    }

    /// A device's prepare step ended. `leased` says whether it holds a lease now, even when the
    /// step failed afterwards (validation refused a change on a device it had locked).
    public mutating func prepared(_ device: Int, leased holdsLease: Bool, failure: String?) -> Action {
        precondition(phase == .preparing && outstanding.contains(device), "unexpected prepare outcome for device \(device)")
        outstanding.remove(device)
        if holdsLease { leased.insert(device) }
        if let failure { failures.append(Failure(device: device, message: failure)) }
        guard outstanding.isEmpty else { return .wait }
        if failures.isEmpty {
            phase = .applying
            outstanding = Set(0..<count)
            return .apply(Array(0..<count))
        }
        return releaseEverything()
    }

    /// A device's apply step ended.
    public mutating func applied(_ device: Int, failure: String?) -> Action {
        precondition(phase == .applying && outstanding.contains(device), "unexpected apply outcome for device \(device)")
        outstanding.remove(device)
        if let failure {
            failures.append(Failure(device: device, message: failure))
        } else {
            applied.insert(device)
        }
        guard outstanding.isEmpty else { return .wait }
        if failures.isEmpty {
            phase = .done
            return .finish(.committed)
        }
        guard !applied.isEmpty else { return releaseEverything() }
        phase = .rollingBack
        outstanding = applied
        return .rollBack(applied.sorted())
    }

    /// A device's rollback ended.
    public mutating func rolledBack(_ device: Int, failure: String?) -> Action {
        precondition(phase == .rollingBack && outstanding.contains(device), "unexpected rollback outcome for device \(device)")
        outstanding.remove(device)
        if let failure { rollbackFailures.append(Failure(device: device, message: failure)) }
        guard outstanding.isEmpty else { return .wait }
        return releaseEverything()
    }

    /// A device's lease release ended (failures are not fatal: the lease expires on its own).
    public mutating func released(_ device: Int) -> Action {
        precondition(phase == .releasing && outstanding.contains(device), "unexpected release outcome for device \(device)")
        outstanding.remove(device)
        guard outstanding.isEmpty else { return .wait }
        return abort()
    }

    private mutating func releaseEverything() -> Action {
        guard !leased.isEmpty else { return abort() }
        phase = .releasing
        outstanding = leased
        return .release(leased.sorted())
    }

    private mutating func abort() -> Action {
        phase = .done
        return .finish(.aborted(failures: failures.sorted { $0.device < $1.device }, rollbackFailures: rollbackFailures.sorted { $0.device < $1.device }))
    }
}
