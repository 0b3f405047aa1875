@testable import CamRigAgent
import Testing

@Suite("Connection budgets", .timeLimit(.minutes(1)))
struct ConnectionBudgetTests {
    let limits = ConnectionBudget.Limits(pendingLimit: 4, pendingPerAddress: 2, clientLimit: 3, reservedForCoordinators: 1)

    @Test("a full unauthenticated budget makes room by closing its oldest connection, never by refusing a newcomer from a fresh address")
    func evictsOldest() {
        var budget = ConnectionBudget(limits: limits)
        for id in 1...4 as ClosedRange<UInt64> { #expect(budget.connect(id, address: "10.0.0.\(id)") == .admit) }
        #expect(budget.connect(5, address: "10.0.0.5") == .admitEvicting(1))
        #expect(budget.connect(6, address: "10.0.0.6") == .admitEvicting(2))
        #expect(budget.pendingCount == 4)
        #expect(budget.counts.evicted == 2)
        // A connection that authenticated in time is out of reach of the flood.
        #expect(budget.authenticate(3, isCoordinator: true) == nil)
        #expect(budget.connect(7, address: "10.0.0.7") == .admit)
        #expect(budget.connect(8, address: "10.0.0.8") == .admitEvicting(4))
        #expect(budget.clientCount == 1)
    }

    @Test("one address gets only its share of unauthenticated places; closing one frees it")
    func perAddressShare() {
        var budget = ConnectionBudget(limits: limits)
        #expect(budget.connect(1, address: "10.0.0.9") == .admit)
        #expect(budget.connect(2, address: "10.0.0.9") == .admit)
        guard case .refuse(let reason) = budget.connect(3, address: "10.0.0.9") else {
            Issue.record("a third connection from one address was admitted")
            return
        }
        #expect(reason.contains("10.0.0.9"))
        #expect(budget.counts.refusedPerAddress == 1)
        budget.disconnect(1)
        #expect(budget.connect(4, address: "10.0.0.9") == .admit)
        // Evicting a connection frees its address's share too.
        #expect(budget.connect(5, address: "10.0.0.1") == .admit)
        #expect(budget.connect(6, address: "10.0.0.2") == .admit)
        #expect(budget.connect(7, address: "10.0.0.3") == .admitEvicting(2))
        #expect(budget.connect(8, address: "10.0.0.9") == .admitEvicting(4))
    }

    @Test("viewers cannot take the places kept for coordinators; a coordinator can")
    func reservedForCoordinators() {
        var budget = ConnectionBudget(limits: limits)
        for id in 1...4 as ClosedRange<UInt64> { _ = budget.connect(id, address: "10.0.1.\(id)") }
        #expect(budget.authenticate(1, isCoordinator: false) == nil)
        #expect(budget.authenticate(2, isCoordinator: false) == nil)
        let refusal = budget.authenticate(3, isCoordinator: false)
        #expect(refusal?.contains("kept for coordinators") == true, "\(refusal ?? "admitted")")
        #expect(budget.authenticate(4, isCoordinator: true) == nil)
        #expect(budget.clientCount == 3)
        #expect(budget.pendingCount == 0, "a refused client leaves the unauthenticated budget too")
        _ = budget.connect(5, address: "10.0.1.5")
        #expect(budget.authenticate(5, isCoordinator: true) != nil, "the client budget is full")
        #expect(budget.counts.refusedClients == 2)
        budget.disconnect(1)
        _ = budget.connect(6, address: "10.0.1.6")
        #expect(budget.authenticate(6, isCoordinator: false) != nil, "the one place left is kept for coordinators")
        budget.disconnect(2)
        _ = budget.connect(7, address: "10.0.1.7")
        #expect(budget.authenticate(7, isCoordinator: false) == nil)
    }

    @Test("a flood of silent and trickling connections from a thousand addresses never closes a connection that is busy with its handshake")
    func activeHandshakeSurvivesFlood() {
        var budget = ConnectionBudget(limits: ConnectionBudget.Limits(pendingLimit: 8, pendingPerAddress: 3))
        var id: UInt64 = 0
        var now: Int64 = 0
        func next() -> UInt64 { id += 1; return id }
        for address in 0..<8 { _ = budget.connect(next(), address: "10.9.0.\(address)", now: now) }
        // The coordinator connects in the middle of the flood and exchanges handshake bytes every 200 µs...
        let coordinator = next()
        guard case .admitEvicting = budget.connect(coordinator, address: "10.0.0.1", now: now) else {
            Issue.record("the coordinator was not admitted")
            return
        }
        // ...while the flood opens a connection every 10 µs, each from another address; every fifth one
        // trickles a byte now and then, which is older than the coordinator's latest.
        var evicted: Set<UInt64> = []
        var trickling: [UInt64] = []
        for round in 0..<1000 {
            now += 10_000
            if round % 20 == 0 { budget.received(coordinator, now: now) }
            let flooder = next()
            if case .admitEvicting(let victim) = budget.connect(flooder, address: "10.\(round / 250).\(round % 250).1", now: now) { evicted.insert(victim) }
            if round % 5 == 0 { trickling.append(flooder) }
            if round % 50 == 0, let slow = trickling.last { budget.received(slow, now: now - 1_000_000) }
        }
        #expect(evicted.count > 900)
        #expect(!evicted.contains(coordinator))
        #expect(budget.authenticate(coordinator, isCoordinator: true) == nil)
    }
}
