import CamRigClock
import CamRigDeviceModel
import CamRigDevices
import CamRigWire
import CamRigWireModel
import Dispatch
import Foundation
import Logging
import NIOConcurrencyHelpers
import ServiceLifecycle

/// The device service: the agent's devices over the wire (list, describe, discovery queries, leases and
/// configuration) and their hot-plug.
///
/// What the service keeps (leases, the configuration locks they hold, descriptions, who is told of a
/// lease's end) is one `State` under one lock; its mutating methods say what to do once the lock is
/// released (unlock a device, tell the phase locks, publish an event). Work that calls into drivers
/// (locking, configuring and unlocking devices, starting and stopping streams) runs on `queue`, one item
/// at a time, off the event loops, so a slow driver call never delays another connection's clock probe;
/// the queue keeps no state of its own. Reading requests and renewals are answered where they arrive.
/// `run()` follows hot-plug and expires leases until graceful shutdown.
///
/// Lease times are readings of `leaseClock` (the host clock unless a test gives a `ManualClock`).
public final class AgentDevices: Service, Sendable {
    public let discovery: DeviceDiscovery
    let agentID: String
    /// Where driver work runs, one item at a time.
    let queue = DispatchQueue(label: "camrig.agent.devices")

    /// A lease that ended, and what ending it takes outside the lock.
    struct LeaseEnd {
        var lease: LeaseTable.Lease
        /// The configuration lock to give back to the device, when the lease held one.
        var configurationLock: ConfigurationLock?
        /// Told of the end (the phase locks).
        var notify: (@Sendable (_ deviceID: String, _ deviceVanished: Bool) -> Void)?
    }

    struct State {
        var leases: LeaseTable
        /// The device configuration lock held for each lease id.
        var configurationLocks: [String: ConfigurationLock] = [:]
        /// The unchanging part of each device's description, built once per device object (a device plugged
        /// in again is a new object, described afresh). Each entry holds its device, so its identifier
        /// cannot be reused by another while it is here.
        var descriptions: [ObjectIdentifier: (device: CaptureDevice, description: WireDeviceDescription)] = [:]
        /// Told when a device's lease ends (what was done under it, a phase lock, ends too), and whether it
        /// ended because the device vanished.
        var leaseEnded: (@Sendable (_ deviceID: String, _ deviceVanished: Bool) -> Void)?

        /// `leases` ended: their configuration locks are taken out to be given back.
        mutating func ended(_ leases: [LeaseTable.Lease]) -> [LeaseEnd] {
            leases.map { LeaseEnd(lease: $0, configurationLock: configurationLocks.removeValue(forKey: $0.id), notify: leaseEnded) }
        }

        mutating func expire(now: Int64) -> [LeaseEnd] { ended(leases.expire(now: now)) }
        mutating func releaseAll(connection: UInt64) -> [LeaseEnd] { ended(leases.releaseAll(connection: connection)) }
    }

    private let state: NIOLockedValueBox<State>
    private let logger: Logger
    /// Where lease and device events go.
    public let events: AgentEvents
    /// The host clock every agent time on the wire is read from.
    public let clock: HostClock
    /// The clock leases are granted, renewed and expired on.
    let leaseClock: any NanosecondClock

    /// - Parameters:
    ///   - clock: the host's clock; `.system` except for simulated hosts, where it must be the clock the
    ///     synthetic cameras stamp frames with.
    ///   - leaseClock: the clock of lease times; `clock` unless given (tests move a `ManualClock`).
    public init(discovery: DeviceDiscovery, agentID: String, clock: HostClock = .system, leaseClock: (any NanosecondClock)? = nil, logger: Logger) {
        self.discovery = discovery
        self.clock = clock
        self.leaseClock = leaseClock ?? clock
        self.events = AgentEvents(clock: clock)
        self.agentID = agentID
        self.logger = logger
        state = NIOLockedValueBox(State(leases: LeaseTable(idPrefix: String(UInt32.random(in: 0...UInt32.max), radix: 16))))
    }

    /// Sets who is told, on the queue, when a device's lease ends, and whether the device vanished.
    func onLeaseEnded(_ handler: @escaping @Sendable (_ deviceID: String, _ deviceVanished: Bool) -> Void) {
        state.withLockedValue { $0.leaseEnded = handler }
    }

    /// Answers a device request from `client` on `connection`, on the device queue; `reply` gets the answer.
    func handle(
        _ request: WireEnvelope.OneOf_Body,
        client: ServerConnectionStateMachine.Client,
        connection: UInt64,
        reply: @escaping @Sendable (WireEnvelope.OneOf_Body) -> Void
    ) {
        if let answer = answerInline(request, client: client, connection: connection) {
            reply(answer)
            return
        }
        queue.async {
            reply(self.answer(request, client: client, connection: connection))
        }
    }

    /// Answers a request that only reads (listing, discovery, a description), and a lease renewal, where
    /// it arrives, on the connection's event loop: a hop to the device queue and back costs two thread
    /// wake-ups, more than the whole round trip otherwise, and a renewal must not wait behind slow device
    /// work. Each device's state is read under its own lock; a renewal only touches the lease table (under
    /// its lock) and refuses a lease past its expiry itself. A read that finds a lease past its expiry
    /// goes through the queue, which ends the lease first. Returns `nil` for everything else.
    private func answerInline(
        _ request: WireEnvelope.OneOf_Body, client: ServerConnectionStateMachine.Client, connection: UInt64
    ) -> WireEnvelope.OneOf_Body? {
        switch request {
        case .renewLease(let renew):
            return self.renew(renew, client: client, connection: connection, now: leaseClock.now())
        case .listDevices, .discoveryQuery, .describeDevice:
            let now = leaseClock.now()
            guard !state.withLockedValue({ $0.leases.hasExpired(now: now) }) else { return nil }
            return answerReading(request, now: now)
        default:
            return nil
        }
    }

    private func renew(
        _ renew: WireRenewLease, client: ServerConnectionStateMachine.Client, connection: UInt64, now: Int64
    ) -> WireEnvelope.OneOf_Body {
        switch state.withLockedValue({ $0.leases.renew(leaseID: renew.leaseID, holder: client.name, connection: connection, now: now) }) {
        case .success(let lease):
            var reply = WireLease()
            reply.lease = WireLeaseInfo(lease)
            return .lease(reply)
        case .failure(let failure):
            return leaseError(failure, device: "", now: now)
        }
    }

    /// The answer to a request that only reads; `nil` for the others.
    private func answerReading(_ request: WireEnvelope.OneOf_Body, now: Int64) -> WireEnvelope.OneOf_Body? {
        switch request {
        case .listDevices:
            return .deviceList(list(discovery.devices, now: now))
        case .discoveryQuery(let query):
            let types = query.deviceTypes.compactMap(\.deviceType)
            return .deviceList(list(discovery.devices(types: types, position: query.position.position, labelPrefix: query.labelPrefix), now: now))
        case .describeDevice(let describe):
            guard let device = discovery.device(uniqueID: describe.deviceID) else { return notFound(describe.deviceID) }
            return .deviceDescription(describeDevice(device, now: now))
        default:
            return nil
        }
    }

    /// The connection closed: its leases end and the devices are free again.
    func connectionClosed(_ connection: UInt64) {
        queue.async {
            for end in self.state.withLockedValue({ $0.releaseAll(connection: connection) }) {
                self.finish(end)
                self.logger.info("lease released: client disconnected", metadata: ["device": "\(end.lease.deviceID)", "holder": "\(end.lease.holder)"])
            }
        }
    }

    /// Ends the leases expired at `now` (agent clock); `run()` calls it every second.
    func expireLeases(now: Int64? = nil) {
        queue.async { self.endExpired(now: now ?? self.leaseClock.now()) }
    }

    /// Ends the leases expired at `now`; on the queue.
    private func endExpired(now: Int64) {
        for end in state.withLockedValue({ $0.expire(now: now) }) {
            finish(end)
            let lease = end.lease
            logger.notice("lease expired without renewal", metadata: ["device": "\(lease.deviceID)", "holder": "\(lease.holder)"])
            events.publish(.leaseLost, device: lease.deviceID, message: "lease \(lease.id) of '\(lease.holder)' expired without renewal") {
                $0.lease = WireLeaseInfo(lease)
            }
        }
    }

    /// Carries out a lease's end, outside the lock, on the queue: the phase locks are told, the device's
    /// configuration lock is given back.
    private func finish(_ end: LeaseEnd) {
        end.notify?(end.lease.deviceID, false)
        guard let device = discovery.device(uniqueID: end.lease.deviceID) else { return }
        if let lock = end.configurationLock { device.unlockForConfiguration(lock) }
        publishChange(of: device, now: leaseClock.now(), "lease \(end.lease.id) of '\(end.lease.holder)' on \(device.uniqueID) ended")
    }

    /// `DEVICE_CHANGED`: the device's description as it is now (its lease, its configuration), for the
    /// clients that would otherwise list the devices again to learn it.
    private func publishChange(of device: CaptureDevice, now: Int64, _ message: String) {
        guard events.wants(.deviceChanged) else { return }
        events.publish(.deviceChanged, device: device.uniqueID, message: message) {
            $0.device = self.describeDevice(device, now: now)
        }
    }

    /// Follows hot-plug and expires leases that were not renewed, until graceful shutdown.
    public func run() async {
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                group.addTask {
                    while !Task.isCancelled {
                        try? await Task.sleep(for: .seconds(1))
                        self.expireLeases()
                    }
                }
                group.addTask { await self.monitor() }
            }
        }
    }

    /// Follows hot-plug: rescans every second and publishes devices coming and going, until cancelled.
    func monitor() async {
        let changes = discovery.events()
        await withDiscardingTaskGroup { group in
            group.addTask { await self.publish(changes) }
            await discovery.monitor(every: .seconds(1))
            group.cancelAll()
        }
    }

    /// Publishes hot-plug changes; a vanished device's lease ends (on the queue, after the work before it).
    private func publish(_ changes: AsyncStream<DeviceEvent>) async {
        for await change in changes {
            switch change {
            case .connected(let device):
                logger.info("device connected", metadata: ["device": "\(device.uniqueID)"])
                events.publish(.deviceConnected, device: device.uniqueID, message: "\(device.identity.localizedName) connected") {
                    $0.device = WireDeviceDescription(device: device, agentID: self.agentID, lease: nil)
                }
            case .disconnected(let identity):
                logger.warning("device disconnected", metadata: ["device": "\(identity.uniqueID)"])
                queue.async {
                    let ended = self.state.withLockedValue { state -> (LeaseTable.Lease, (@Sendable (String, Bool) -> Void)?)? in
                        guard let lease = state.leases.drop(deviceID: identity.uniqueID) else { return nil }
                        // The device is gone: its configuration lock goes with it, given back to nobody.
                        state.configurationLocks[lease.id] = nil
                        return (lease, state.leaseEnded)
                    }
                    if let (lease, notify) = ended {
                        notify?(lease.deviceID, true)
                        self.events.publish(.leaseLost, device: identity.uniqueID, message: "\(identity.uniqueID) was disconnected") {
                            $0.lease = WireLeaseInfo(lease)
                        }
                    }
                    self.events.publish(.deviceDisconnected, device: identity.uniqueID, message: "\(identity.localizedName) disconnected")
                }
            }
        }
    }

    // MARK: Requests

    func answer(_ request: WireEnvelope.OneOf_Body, client: ServerConnectionStateMachine.Client, connection: UInt64) -> WireEnvelope.OneOf_Body {
        let now = leaseClock.now()
        // Leases past their expiry end now, not at the next tick: their devices' locks are free for this request.
        endExpired(now: now)
        if let answer = answerReading(request, now: now) { return answer }
        switch request {
        case .lock(let lock):
            guard let device = discovery.device(uniqueID: lock.deviceID) else { return notFound(lock.deviceID) }
            let result = state.withLockedValue {
                $0.leases.acquire(deviceID: device.uniqueID, holder: client.name, connection: connection, requested: Int64(lock.durationMs) * 1_000_000, now: now)
            }
            switch result {
            case .success(let lease):
                if state.withLockedValue({ $0.configurationLocks[lease.id] }) == nil {
                    do throws(DeviceError) {
                        let configurationLock = try device.lockForConfiguration(holder: client.name)
                        state.withLockedValue { $0.configurationLocks[lease.id] = configurationLock }
                    } catch {
                        _ = state.withLockedValue { $0.leases.drop(deviceID: device.uniqueID) }
                        return .error(error.wire(agentID: agentID))
                    }
                }
                var reply = WireLease()
                reply.lease = WireLeaseInfo(lease)
                publishChange(of: device, now: now, "\(device.uniqueID) leased by '\(client.name)'")
                return .lease(reply)
            case .failure(let failure):
                return leaseError(failure, device: device.uniqueID, now: now)
            }

        case .renewLease(let renew):
            return self.renew(renew, client: client, connection: connection, now: now)

        case .unlock(let unlock):
            let released = state.withLockedValue { state in
                state.leases.release(leaseID: unlock.leaseID, holder: client.name, connection: connection, now: now).map { state.ended([$0])[0] }
            }
            switch released {
            case .success(let end):
                finish(end)
                return .ok(WireOk())
            case .failure(let failure):
                return leaseError(failure, device: "", now: now)
            }

        case .configure(let configure):
            return self.configure(configure, client: client, connection: connection, now: now)

        default:
            return .error(WireError(.unimplemented, agent: agentID, "agent \(agentID) (camrig-agent \(CamRigVersion.string)) does not serve \(request.messageName) yet"))
        }
    }

    /// The device named by a change request and its configuration lock, when `leaseID` is `client`'s
    /// live lease on it, taken on `connection`; otherwise the error to answer with. Call on the queue.
    func authorize(deviceID: String, leaseID: String, client: ServerConnectionStateMachine.Client, connection: UInt64, now: Int64) -> Result<(CaptureDevice, ConfigurationLock), WireErrorBody> {
        guard let device = discovery.device(uniqueID: deviceID) else { return .failure(WireErrorBody(notFound(deviceID))) }
        guard !leaseID.isEmpty else {
            if let held = state.withLockedValue({ $0.leases.lease(onDevice: device.uniqueID, now: now) }) {
                if held.holder == client.name && held.connection == connection {
                    // The holder itself, having left the lease out: it needs only to name it.
                    return .failure(WireErrorBody(failure(.leaseRequired, device: device.uniqueID, "changing \(device.uniqueID) needs its lease: name your lease \(held.id) in lease_id")))
                }
                return .failure(WireErrorBody(leaseError(.held(held), device: device.uniqueID, now: now)))
            }
            return .failure(WireErrorBody(failure(.leaseRequired, device: device.uniqueID, "changing \(device.uniqueID) needs its lease: send lock first")))
        }
        let lease: LeaseTable.Lease
        switch state.withLockedValue({ $0.leases.check(leaseID: leaseID, holder: client.name, connection: connection, now: now) }) {
        case .success(let found): lease = found
        case .failure(let failure): return .failure(WireErrorBody(leaseError(failure, device: device.uniqueID, now: now)))
        }
        guard lease.deviceID == device.uniqueID, let lock = state.withLockedValue({ $0.configurationLocks[lease.id] }) else {
            return .failure(WireErrorBody(failure(.leaseRequired, device: device.uniqueID, "lease \(lease.id) is for \(lease.deviceID), not \(device.uniqueID)")))
        }
        return .success((device, lock))
    }

    private func configure(_ configure: WireConfigure, client: ServerConnectionStateMachine.Client, connection: UInt64, now: Int64) -> WireEnvelope.OneOf_Body {
        let device: CaptureDevice
        let lock: ConfigurationLock
        switch authorize(deviceID: configure.deviceID, leaseID: configure.leaseID, client: client, connection: connection, now: now) {
        case .success(let granted): (device, lock) = granted
        case .failure(let refusal): return refusal.body
        }
        do {
            let change = try DeviceConfigurationChange(configure)
            let rawValues = (try? device.controlValues()) ?? [:]
            if configure.validateOnly {
                // The state the change would give, so a client sees what a commit would do.
                let resolved = try device.validate(change)
                return .deviceState(WireDeviceState(device: device, resolved: resolved, rawValues: rawValues))
            }
            try device.configure(change, lock: lock)
            publishChange(of: device, now: now, "\(device.uniqueID) configured by '\(client.name)'")
            return .deviceState(WireDeviceState(device: device, rawValues: (try? device.controlValues()) ?? [:]))
        } catch let error as DeviceError {
            return .error(error.wire(agentID: agentID))
        } catch let error as WireProtocolError {
            return failure(error.code, device: device.uniqueID, error.message)
        } catch {
            return failure(.internal, device: device.uniqueID, "\(error)")
        }
    }

    private func list(_ devices: [CaptureDevice], now: Int64) -> WireDeviceList {
        var list = WireDeviceList()
        list.devices = devices.map { describeDevice($0, now: now) }
        return list
    }

    private func describeDevice(_ device: CaptureDevice, now: Int64) -> WireDeviceDescription {
        let key = ObjectIdentifier(device)
        var description: WireDeviceDescription
        if let known = state.withLockedValue({ $0.descriptions[key]?.description }) {
            description = known
        } else {
            description = WireDeviceDescription(describing: device, agentID: agentID)
            let built = description
            // Devices gone from discovery are forgotten here too.
            let present = Set(discovery.devices.map(ObjectIdentifier.init))
            state.withLockedValue { state in
                state.descriptions = state.descriptions.filter { present.contains($0.key) }
                state.descriptions[key] = (device, built)
            }
        }
        description.update(device: device, lease: state.withLockedValue { $0.leases.lease(onDevice: device.uniqueID, now: now) })
        return description
    }

    private func notFound(_ id: String) -> WireEnvelope.OneOf_Body {
        let known = discovery.devices.map(\.uniqueID).joined(separator: ", ")
        return failure(.deviceNotFound, device: id, "agent \(agentID) has no device '\(id)'; it has: \(known.isEmpty ? "none" : known)")
    }

    private func leaseError(_ failure: LeaseTable.Failure, device: String, now: Int64) -> WireEnvelope.OneOf_Body {
        var error = WireError(.unspecified, agent: agentID, device: device, "")
        switch failure {
        case .held(let lease):
            error.code = .leaseHeld
            error.lease = WireLeaseInfo(lease)
            let seconds = Double(lease.expiresAt - now) / 1e9
            error.message = "\(lease.deviceID) is leased by '\(lease.holder)' for \(String(format: "%.1f", seconds)) s more (until agent time \(lease.expiresAt) ns)"
        case .unknownLease(let id):
            error.code = .leaseExpired
            error.message = "lease \(id) expired or was released; lock the device again"
        case .neverIssued(let id):
            error.code = .notFound
            error.message = "agent \(agentID) never issued a lease '\(id)' (an earlier run's, or another agent's); lock the device to get one"
        case .notHolder(let lease):
            error.code = .leaseHeld
            error.lease = WireLeaseInfo(lease)
            error.message = "lease \(lease.id) belongs to '\(lease.holder)' on another connection; a lease is used only on the connection that took it"
        }
        return .error(error)
    }

    private func failure(_ code: WireErrorCode, device: String, _ message: String) -> WireEnvelope.OneOf_Body {
        .error(WireError(code, agent: agentID, device: device, message))
    }
}

/// An error reply, as a value a `Result` can carry.
struct WireErrorBody: Error {
    let body: WireEnvelope.OneOf_Body
    init(_ body: WireEnvelope.OneOf_Body) { self.body = body }
}
