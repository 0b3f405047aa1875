import CamRigDeviceModel
import CamRigDevices
import Testing

@Suite("Configuration leases", .timeLimit(.minutes(1)))
struct LeaseTableTests {
    let second: Int64 = 1_000_000_000

    @Test("a held device is refused to others with the holder and the expiry")
    func held() throws {
        var table = LeaseTable(idPrefix: "t")
        let lease = try table.acquire(deviceID: "cam", holder: "coordinator-a", connection: 1, requested: 5 * second, now: 0).get()
        #expect(lease.expiresAt == 5 * second)
        guard case .failure(.held(let holder)) = table.acquire(deviceID: "cam", holder: "coordinator-b", connection: 2, requested: 0, now: second) else {
            Issue.record("a second client must be refused")
            return
        }
        #expect(holder.holder == "coordinator-a")
        #expect(holder.expiresAt == 5 * second)
        // The same identity on another connection is another client too.
        guard case .failure(.held) = table.acquire(deviceID: "cam", holder: "coordinator-a", connection: 3, requested: 0, now: second) else {
            Issue.record("a lease belongs to its connection")
            return
        }
    }

    @Test("heartbeats extend a lease; without them it expires and the device is free")
    func renewAndExpire() throws {
        var table = LeaseTable(idPrefix: "t")
        let lease = try table.acquire(deviceID: "cam", holder: "a", connection: 1, requested: 2 * second, now: 0).get()
        let renewed = try table.renew(leaseID: lease.id, holder: "a", connection: 1, now: 1 * second).get()
        #expect(renewed.expiresAt == 3 * second)
        #expect(table.expire(now: 2 * second + 1).isEmpty)
        #expect(table.expire(now: 3 * second).map(\.id) == [lease.id])
        #expect(table.lease(onDevice: "cam", now: 3 * second) == nil)
        guard case .failure(.unknownLease) = table.renew(leaseID: lease.id, holder: "a", connection: 1, now: 3 * second) else {
            Issue.record("an expired lease cannot be renewed")
            return
        }
        #expect((try? table.acquire(deviceID: "cam", holder: "b", connection: 2, requested: 0, now: 3 * second).get()) != nil)
    }

    @Test("unlock and disconnect release; another client cannot release someone else's lease")
    func release() throws {
        var table = LeaseTable(idPrefix: "t")
        let a = try table.acquire(deviceID: "cam0", holder: "a", connection: 1, requested: 0, now: 0).get()
        _ = try table.acquire(deviceID: "cam1", holder: "a", connection: 1, requested: 0, now: 0).get()
        guard case .failure(.notHolder) = table.release(leaseID: a.id, holder: "b", connection: 2, now: 0) else {
            Issue.record("only the holder may unlock")
            return
        }
        #expect(try table.release(leaseID: a.id, holder: "a", connection: 1, now: 0).get().deviceID == "cam0")
        #expect(table.releaseAll(connection: 1).map(\.deviceID) == ["cam1"])
        #expect(table.lease(onDevice: "cam1", now: 0) == nil)
    }

    @Test("durations are clamped and lease ids are unique")
    func clamping() throws {
        var table = LeaseTable(idPrefix: "boot7")
        let short = try table.acquire(deviceID: "a", holder: "x", connection: 1, requested: 1, now: 0).get()
        let long = try table.acquire(deviceID: "b", holder: "x", connection: 1, requested: 10_000 * second, now: 0).get()
        let standard = try table.acquire(deviceID: "c", holder: "x", connection: 1, requested: 0, now: 0).get()
        #expect(short.duration == LeaseTable.minimumDuration)
        #expect(long.duration == LeaseTable.maximumDuration)
        #expect(standard.duration == LeaseTable.defaultDuration)
        #expect(Set([short.id, long.id, standard.id]).count == 3)
        #expect(short.id.hasPrefix("boot7-"))
    }

    @Test("a lease is used only on the connection that took it: the same certificate on a second connection can neither renew nor release it")
    func boundToConnection() throws {
        var table = LeaseTable(idPrefix: "t")
        let lease = try table.acquire(deviceID: "cam", holder: "coordinator", connection: 1, requested: 0, now: 0).get()
        guard case .failure(.notHolder(let held)) = table.renew(leaseID: lease.id, holder: "coordinator", connection: 2, now: second) else {
            Issue.record("a second connection renewed the lease")
            return
        }
        #expect(held.connection == 1)
        guard case .failure(.notHolder) = table.release(leaseID: lease.id, holder: "coordinator", connection: 2, now: second) else {
            Issue.record("a second connection released the lease")
            return
        }
        #expect(table.lease(onDevice: "cam", now: second)?.id == lease.id)
    }

    @Test("a lease id this table never issued is told apart from one that ended")
    func neverIssued() throws {
        var table = LeaseTable(idPrefix: "boot1")
        let lease = try table.acquire(deviceID: "cam", holder: "a", connection: 1, requested: 0, now: 0).get()
        _ = try table.release(leaseID: lease.id, holder: "a", connection: 1, now: 0).get()
        guard case .failure(.unknownLease) = table.check(leaseID: lease.id, holder: "a", connection: 1, now: 0) else {
            Issue.record("a released lease must read as ended")
            return
        }
        for made in ["boot1-2", "boot1-0", "boot0-1", "whatever", ""] {
            guard case .failure(.neverIssued) = table.check(leaseID: made, holder: "a", connection: 1, now: 0) else {
                Issue.record("'\(made)' was never issued")
                continue
            }
        }
    }
}
