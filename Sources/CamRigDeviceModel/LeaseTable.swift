/// Who may configure which device: AVFoundation's `lockForConfiguration` as a network lease.
///
/// A lease belongs to one client identity (its certificate name) on one connection, lasts a duration
/// unless renewed by heartbeat, and ends on unlock, on the connection's close, or on expiry. Pure: the
/// time is a parameter (agent `CLOCK_MONOTONIC` nanoseconds), so every rule is tested without a clock.
public struct LeaseTable: Sendable {
    /// One granted lease.
    public struct Lease: Hashable, Sendable {
        public var id: String
        public var deviceID: String
        public var holder: String
        public var connection: UInt64
        public var duration: Int64
        public var expiresAt: Int64
    }

    /// Why a lease request failed.
    public enum Failure: Error, Hashable, Sendable {
        /// Someone else holds the device; their lease is included.
        case held(Lease)
        /// The lease named was issued but has expired or was released.
        case unknownLease(String)
        /// No lease with that id was ever issued by this table (another agent's, an earlier run's, made up).
        case neverIssued(String)
        /// The lease belongs to another client, or to the same client on another connection.
        case notHolder(Lease)
    }

    public static let defaultDuration: Int64 = 10_000_000_000
    public static let maximumDuration: Int64 = 300_000_000_000
    public static let minimumDuration: Int64 = 1_000_000_000

    private var byDevice: [String: Lease] = [:]
    private var nextID: UInt64 = 1
    private let idPrefix: String

    /// - Parameter idPrefix: makes lease ids unique across agent restarts (e.g. a boot-time random).
    public init(idPrefix: String) {
        self.idPrefix = idPrefix
    }

    /// The current lease on a device, if any and not expired at `now`.
    public func lease(onDevice deviceID: String, now: Int64) -> Lease? {
        guard let lease = byDevice[deviceID], lease.expiresAt > now else { return nil }
        return lease
    }

    /// Grants a lease on `deviceID` to `holder`, or renews the holder's own lease on it from the same
    /// connection. `requested` is clamped to 1…300 s; 0 means 10 s.
    public mutating func acquire(
        deviceID: String,
        holder: String,
        connection: UInt64,
        requested: Int64,
        now: Int64
    ) -> Result<Lease, Failure> {
        let duration = requested == 0 ? Self.defaultDuration : min(max(requested, Self.minimumDuration), Self.maximumDuration)
        if let current = lease(onDevice: deviceID, now: now) {
            guard current.holder == holder, current.connection == connection else { return .failure(.held(current)) }
            var renewed = current
            renewed.duration = duration
            renewed.expiresAt = now + duration
            byDevice[deviceID] = renewed
            return .success(renewed)
        }
        let lease = Lease(
            id: "\(idPrefix)-\(nextID)",
            deviceID: deviceID,
            holder: holder,
            connection: connection,
            duration: duration,
            expiresAt: now + duration
        )
        nextID += 1
        byDevice[deviceID] = lease
        return .success(lease)
    }

    /// Whether `leaseID` is one this table issued (whether or not it is still valid).
    public func issued(_ leaseID: String) -> Bool {
        guard leaseID.hasPrefix(idPrefix + "-"), let number = UInt64(leaseID.dropFirst(idPrefix.count + 1)) else { return false }
        return number >= 1 && number < nextID
    }

    /// Finds a valid lease by id for `holder` on `connection` (for renewals, unlocks and changes): a
    /// lease is its holder's on the connection that took it, not on a second connection with the same
    /// certificate.
    public func check(leaseID: String, holder: String, connection: UInt64, now: Int64) -> Result<Lease, Failure> {
        guard let lease = byDevice.values.first(where: { $0.id == leaseID }), lease.expiresAt > now else {
            return .failure(issued(leaseID) ? .unknownLease(leaseID) : .neverIssued(leaseID))
        }
        guard lease.holder == holder, lease.connection == connection else { return .failure(.notHolder(lease)) }
        return .success(lease)
    }

    /// Heartbeat: extends the lease by its duration from `now`.
    public mutating func renew(leaseID: String, holder: String, connection: UInt64, now: Int64) -> Result<Lease, Failure> {
        switch check(leaseID: leaseID, holder: holder, connection: connection, now: now) {
        case .success(var lease):
            lease.expiresAt = now + lease.duration
            byDevice[lease.deviceID] = lease
            return .success(lease)
        case .failure(let failure):
            return .failure(failure)
        }
    }

    /// unlockForConfiguration.
    public mutating func release(leaseID: String, holder: String, connection: UInt64, now: Int64) -> Result<Lease, Failure> {
        switch check(leaseID: leaseID, holder: holder, connection: connection, now: now) {
        case .success(let lease):
            byDevice.removeValue(forKey: lease.deviceID)
            return .success(lease)
        case .failure(let failure):
            return .failure(failure)
        }
    }

    /// Ends every lease of a closed connection; returns them.
    public mutating func releaseAll(connection: UInt64) -> [Lease] {
        let ended = byDevice.values.filter { $0.connection == connection }
        for lease in ended { byDevice.removeValue(forKey: lease.deviceID) }
        return ended.sorted { $0.deviceID < $1.deviceID }
    }

    /// Whether any lease has expired by `now` (and `expire(now:)` would end it).
    public func hasExpired(now: Int64) -> Bool {
        byDevice.values.contains { $0.expiresAt <= now }
    }

    /// Removes leases that expired by `now`; returns them (their holders get LEASE_LOST).
    public mutating func expire(now: Int64) -> [Lease] {
        let expired = byDevice.values.filter { $0.expiresAt <= now }
        for lease in expired { byDevice.removeValue(forKey: lease.deviceID) }
        return expired.sorted { $0.deviceID < $1.deviceID }
    }

    /// Ends the lease on a device that went away.
    public mutating func drop(deviceID: String) -> Lease? {
        byDevice.removeValue(forKey: deviceID)
    }
}
