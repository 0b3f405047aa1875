import CamRigClock
import CamRigDevices
import CamRigWire
import Logging
import Testing

@testable import CamRigAgent

/// Lease expiry in the device service, with time given rather than waited for.
@Suite("Device service leases", .timeLimit(.minutes(1)))
struct DeviceServiceLeaseTests {
    let coordinator = ServerConnectionStateMachine.Client(role: .coordinator, name: "coordinator")
    let device = "synthetic:SYN0001"

    /// The clock leases run on: moved by hand.
    let clock = ManualClock()

    func service() -> AgentDevices {
        AgentDevices(
            discovery: DeviceDiscovery(providers: [SyntheticDeviceProvider(count: 1)]),
            agentID: "host-1",
            leaseClock: clock,
            logger: Logger(label: "test")
        )
    }

    /// Answers `request` on the service's queue, as a connection's request is.
    func answer(_ devices: AgentDevices, _ request: WireEnvelope.OneOf_Body, connection: UInt64 = 1) -> WireEnvelope.OneOf_Body {
        devices.queue.sync { devices.answer(request, client: coordinator, connection: connection) }
    }

    func lock(_ devices: AgentDevices, ms: UInt32) throws -> WireLeaseInfo {
        var lock = WireLock()
        lock.deviceID = device
        lock.durationMs = ms
        guard case .lease(let lease) = answer(devices, .lock(lock)) else {
            Issue.record("lock was refused")
            throw CancellationError()
        }
        return lease.lease
    }

    @Test("a lease not renewed by its expiry ends: its id is refused and the device is free to lock again")
    func expiry() throws {
        let devices = service()
        let lease = try lock(devices, ms: 1_000)
        // Just before its expiry nothing happens.
        devices.expireLeases(now: lease.expiresAtNs - 1)
        var renew = WireRenewLease()
        renew.leaseID = lease.leaseID
        guard case .lease(let renewed) = answer(devices, .renewLease(renew)) else {
            Issue.record("a live lease renews")
            return
        }
        devices.expireLeases(now: renewed.lease.expiresAtNs)
        guard case .error(let error) = answer(devices, .renewLease(renew)) else {
            Issue.record("an expired lease must not renew")
            return
        }
        #expect(error.code == .leaseExpired)
        #expect(error.agentID == "host-1")
        let again = try lock(devices, ms: 1_000)
        #expect(again.leaseID != lease.leaseID)
    }

    @Test("a connection's close ends its leases; another client's lock then succeeds")
    func connectionClosed() throws {
        let devices = service()
        _ = try lock(devices, ms: 10_000)
        var other = WireLock()
        other.deviceID = device
        guard case .error(let held) = answer(devices, .lock(other), connection: 2) else {
            Issue.record("a held device is refused to another connection")
            return
        }
        #expect(held.code == .leaseHeld)
        devices.connectionClosed(1)
        guard case .lease = answer(devices, .lock(other), connection: 2) else {
            Issue.record("the device is free once its holder's connection closed")
            return
        }
    }

    @Test("a lease works only on the connection that took it: the same certificate on another connection cannot configure, renew or unlock with its id")
    func leaseBoundToConnection() throws {
        let devices = service()
        let lease = try lock(devices, ms: 10_000)
        var configure = WireConfigure()
        configure.deviceID = device
        configure.leaseID = lease.leaseID
        configure.zoom.factor = 2
        var renew = WireRenewLease()
        renew.leaseID = lease.leaseID
        var unlock = WireUnlock()
        unlock.leaseID = lease.leaseID
        for request in [WireEnvelope.OneOf_Body.configure(configure), .renewLease(renew), .unlock(unlock)] {
            guard case .error(let error) = answer(devices, request, connection: 2) else {
                Issue.record("\(request.messageName) from a second connection was accepted")
                continue
            }
            #expect(error.code == .leaseHeld)
            #expect(error.message.contains("another connection"), "\(error.message)")
        }
        // The lease still works where it was taken.
        guard case .deviceState = answer(devices, .configure(configure), connection: 1) else {
            Issue.record("the holder's own connection was refused")
            return
        }
    }

    @Test("the holder configuring without its lease id is told to name it (LEASE_REQUIRED), not that the device is leased")
    func holderWithoutLeaseID() throws {
        let devices = service()
        let lease = try lock(devices, ms: 10_000)
        var configure = WireConfigure()
        configure.deviceID = device
        configure.zoom.factor = 2
        guard case .error(let mine) = answer(devices, .configure(configure), connection: 1) else {
            Issue.record("a change without a lease id was accepted")
            return
        }
        #expect(mine.code == .leaseRequired)
        #expect(mine.message.contains(lease.leaseID))
        guard case .error(let theirs) = answer(devices, .configure(configure), connection: 2) else {
            Issue.record("a change without a lease id was accepted")
            return
        }
        #expect(theirs.code == .leaseHeld)
    }

    @Test("a lease id this agent never issued is NOT_FOUND; one it issued that ended is LEASE_EXPIRED")
    func neverIssuedLease() throws {
        let devices = service()
        let lease = try lock(devices, ms: 1_000)
        var unlock = WireUnlock()
        unlock.leaseID = lease.leaseID
        _ = answer(devices, .unlock(unlock))
        var renew = WireRenewLease()
        renew.leaseID = lease.leaseID
        guard case .error(let ended) = answer(devices, .renewLease(renew)) else {
            Issue.record("a released lease renewed")
            return
        }
        #expect(ended.code == .leaseExpired)
        renew.leaseID = "made-up-7"
        guard case .error(let unknown) = answer(devices, .renewLease(renew)) else {
            Issue.record("a made-up lease renewed")
            return
        }
        #expect(unknown.code == .notFound)
        #expect(unknown.message.contains("never issued"))
    }

    @Test("validate_only answers the state the change would give, and changes nothing")
    func validateOnlyWouldBeState() throws {
        let devices = service()
        let lease = try lock(devices, ms: 10_000)
        var configure = WireConfigure()
        configure.deviceID = device
        configure.leaseID = lease.leaseID
        configure.zoom.factor = 3
        configure.validateOnly = true
        guard case .deviceState(let wouldBe) = answer(devices, .configure(configure)) else {
            Issue.record("validation failed")
            return
        }
        #expect(wouldBe.zoom.factor == 3)
        var describe = WireDescribeDevice()
        describe.deviceID = device
        guard case .deviceDescription(let now) = answer(devices, .describeDevice(describe)) else {
            Issue.record("describe failed")
            return
        }
        #expect(now.state.zoom.factor == 1, "validation must not apply the change")
    }

    /// Describes the device as a connection's request is handled: read-only requests are answered
    /// where they arrive, from the description kept per device.
    func handled(_ devices: AgentDevices, _ request: WireEnvelope.OneOf_Body) async -> WireEnvelope.OneOf_Body {
        await withCheckedContinuation { continuation in
            devices.handle(request, client: coordinator, connection: 1) { continuation.resume(returning: $0) }
        }
    }

    func describe(_ devices: AgentDevices) async throws -> WireDeviceDescription {
        var describe = WireDescribeDevice()
        describe.deviceID = device
        let body = await handled(devices, .describeDevice(describe))
        guard case .deviceDescription(let description) = body else {
            Issue.record("describe failed: \(body)")
            throw CancellationError()
        }
        return description
    }

    @Test("descriptions and renewals answered on arrival follow the device: its state, its lease, and a lease that expired")
    func descriptionsFollowTheDevice() async throws {
        let devices = service()
        let first = try await describe(devices)
        #expect(first.state.zoom.factor == 1)
        #expect(!first.hasLease)
        #expect(!first.formats.isEmpty)

        let lease = try lock(devices, ms: 10_000)
        var configure = WireConfigure()
        configure.deviceID = device
        configure.leaseID = lease.leaseID
        configure.zoom.factor = 2
        _ = answer(devices, .configure(configure))
        let configured = try await describe(devices)
        #expect(configured.state.zoom.factor == 2)
        #expect(configured.lease.leaseID == lease.leaseID)
        #expect(configured.formats == first.formats)
        #expect(configured.controls.map(\.id) == first.controls.map(\.id))

        // A renewal is answered on arrival too, and extends the lease from now.
        var renew = WireRenewLease()
        renew.leaseID = lease.leaseID
        guard case .lease(let renewed) = await handled(devices, .renewLease(renew)) else {
            Issue.record("a live lease did not renew")
            throw CancellationError()
        }
        #expect(renewed.lease.expiresAtNs >= lease.expiresAtNs)
        #expect((try await describe(devices)).lease.expiresAtNs == renewed.lease.expiresAtNs)

        var unlock = WireUnlock()
        unlock.leaseID = lease.leaseID
        _ = answer(devices, .unlock(unlock))
        #expect(!(try await describe(devices)).hasLease)
        guard case .error(let released) = await handled(devices, .renewLease(renew)) else {
            Issue.record("a released lease renewed")
            throw CancellationError()
        }
        #expect(released.code == .leaseExpired)

        // A lease past its expiry is ended before the description is made, not shown as held.
        _ = try lock(devices, ms: 1_000)  // the shortest lease there is
        #expect((try await describe(devices)).hasLease)
        clock.advance(by: .milliseconds(999))
        #expect((try await describe(devices)).hasLease, "a lease holds until its expiry")
        clock.advance(by: .milliseconds(1))
        #expect(!(try await describe(devices)).hasLease)
    }
}
