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

    func service() -> AgentDevices {
        AgentDevices(
            discovery: DeviceDiscovery(providers: [SyntheticDeviceProvider(count: 1)]),
            agentID: "host-1",
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
}
