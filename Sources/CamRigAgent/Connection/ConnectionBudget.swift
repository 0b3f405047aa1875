/// Who may hold one of the agent's connections: a pure state machine, the registry carries out its
/// answers.
///
/// Connections live in two budgets, so that a peer without a certificate cannot take capacity from the
/// rig's own clients (as sshd's `MaxStartups` keeps unauthenticated connections apart):
///
/// - **Unauthenticated** (its certificate not yet verified): at most `pendingLimit` in all and
///   `pendingPerAddress` from one address, each for at most the handshake deadline. When the budget is
///   full, a new connection takes the place of one from the address holding the most, and of those the
///   one stalled the longest: one that has sent nothing at all (an idle flood) before one that has, and
///   then the one whose last bytes are the oldest (a slow, trickling TLS handshake). A client in the middle of its
///   handshake (a few milliseconds of steady exchange for the coordinator) is the last to go, so a
///   flood of idle or slow connections from any number of addresses only shortens its own connections'
///   lives. A new connection from an address that already has its share is refused. A connection
///   leaves this budget the moment its certificate is verified.
/// - **Authenticated** (certificate checked and `Hello` answered): at most `clientLimit`, of which
///   `reservedForCoordinators` can only be taken by the coordinator role, so viewers cannot lock the
///   coordinator out either.
public struct ConnectionBudget: Sendable {
    /// The limits; see the type's description.
    public struct Limits: Sendable, Equatable {
        public var pendingLimit: Int
        public var pendingPerAddress: Int
        public var clientLimit: Int
        public var reservedForCoordinators: Int

        /// The agent's defaults: 32 unauthenticated (4 per address), 64 clients of which 8 are kept
        /// for coordinators.
        public init(pendingLimit: Int = 32, pendingPerAddress: Int = 4, clientLimit: Int = 64, reservedForCoordinators: Int = 8) {
            self.pendingLimit = max(pendingLimit, 1)
            self.pendingPerAddress = max(pendingPerAddress, 1)
            self.clientLimit = max(clientLimit, 1)
            self.reservedForCoordinators = min(max(reservedForCoordinators, 0), self.clientLimit)
        }
    }

    /// What happened to connections so far, for the log and metrics.
    public struct Counts: Sendable, Equatable {
        /// Unauthenticated connections closed to make room for newer ones.
        public var evicted = 0
        /// New connections refused because their address already had its share.
        public var refusedPerAddress = 0
        /// Authenticated clients refused because the client budget was full.
        public var refusedClients = 0
    }

    /// What to do with a new connection.
    public enum Admission: Sendable, Equatable {
        case admit
        /// Admit it and close this unauthenticated connection to make room.
        case admitEvicting(UInt64)
        /// Refuse it: its address already holds `pendingPerAddress` unauthenticated connections.
        case refuse(reason: String)
    }

    public let limits: Limits
    public private(set) var counts = Counts()
    /// An unauthenticated connection.
    private struct Pending {
        var id: UInt64
        var address: String
        /// Whether it has sent anything, and when it last did (or connected, if it has not).
        var heard: Bool
        var lastActivity: Int64
    }

    /// Unauthenticated connections, oldest first.
    private var pending: [Pending] = []
    private var pendingByAddress: [String: Int] = [:]
    private var clients: [UInt64: Bool] = [:]

    public init(limits: Limits) {
        self.limits = limits
    }

    /// Unauthenticated connections now.
    public var pendingCount: Int { pending.count }
    /// Authenticated clients now.
    public var clientCount: Int { clients.count }

    /// A new connection `id` from `address` (its IP, without the port) at `now` (nanoseconds, any
    /// monotonic clock as long as `received` uses the same).
    public mutating func connect(_ id: UInt64, address: String, now: Int64 = 0) -> Admission {
        if pendingByAddress[address, default: 0] >= limits.pendingPerAddress {
            counts.refusedPerAddress += 1
            return .refuse(reason: "\(address) already has \(limits.pendingPerAddress) connections that have not completed TLS and Hello")
        }
        var evicted: UInt64?
        if pending.count >= limits.pendingLimit {
            // From the address holding the most, the one stalled the longest: silent before heard, then
            // the oldest activity (ties: the oldest connection).
            func rank(_ entry: Pending) -> (Int, Int, Int64) {
                (-(pendingByAddress[entry.address] ?? 0), entry.heard ? 1 : 0, entry.lastActivity)
            }
            var index = 0
            for candidate in pending.indices.dropFirst() where rank(pending[candidate]) < rank(pending[index]) {
                index = candidate
            }
            let victim = pending.remove(at: index)
            decrement(victim.address)
            counts.evicted += 1
            evicted = victim.id
        }
        pending.append(Pending(id: id, address: address, heard: false, lastActivity: now))
        pendingByAddress[address, default: 0] += 1
        return evicted.map { .admitEvicting($0) } ?? .admit
    }

    /// Unauthenticated connection `id` sent bytes at `now`.
    public mutating func received(_ id: UInt64, now: Int64) {
        guard let index = pending.firstIndex(where: { $0.id == id }) else { return }
        pending[index].heard = true
        pending[index].lastActivity = now
    }

    /// Connection `id` completed TLS and `Hello` as a client of `role`; `nil` when it may stay, else why
    /// not (the client budget is full for its role). Either way it leaves the unauthenticated budget.
    public mutating func authenticate(_ id: UInt64, isCoordinator: Bool) -> String? {
        removePending(id)
        let limit = isCoordinator ? limits.clientLimit : limits.clientLimit - limits.reservedForCoordinators
        guard clients.count < limit else {
            counts.refusedClients += 1
            return isCoordinator
                ? "the agent already serves \(limits.clientLimit) clients"
                : "the agent already serves \(clients.count) clients; the remaining \(limits.clientLimit - clients.count) places are kept for coordinators"
        }
        clients[id] = isCoordinator
        return nil
    }

    /// Connection `id` closed (in whichever budget it was).
    public mutating func disconnect(_ id: UInt64) {
        removePending(id)
        clients.removeValue(forKey: id)
    }

    private mutating func removePending(_ id: UInt64) {
        guard let index = pending.firstIndex(where: { $0.id == id }) else { return }
        decrement(pending[index].address)
        pending.remove(at: index)
    }

    private mutating func decrement(_ address: String) {
        let left = pendingByAddress[address, default: 1] - 1
        pendingByAddress[address] = left > 0 ? left : nil
    }
}
