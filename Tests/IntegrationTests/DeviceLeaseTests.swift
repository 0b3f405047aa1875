import CamRigCoordinator
import CamRigSecurity
import CamRigTestSupport
import CamRigWire
import Foundation
import Testing

/// Device operations and configuration leases on a real agent process with synthetic cameras.
@Suite("Devices and leases over the wire", .timeLimit(.minutes(3)))
struct DeviceLeaseTests {
    func remoteError(_ body: () async throws -> Void) async -> AgentClientError? {
        do {
            try await body()
            return nil
        } catch let error as AgentClientError {
            return error
        } catch {
            return nil
        }
    }

    func lock(_ client: AgentClient, _ device: String, ms: UInt32 = 0) async throws -> WireLeaseInfo {
        var lock = WireLock()
        lock.deviceID = device
        lock.durationMs = ms
        guard case .lease(let lease) = try await client.request(.lock(lock)).frame.envelope.body else {
            throw AgentClientError(.protocolViolation, agent: "?", "no lease")
        }
        return lease.lease
    }

    func configure(_ client: AgentClient, _ device: String, lease: String, _ edit: (inout WireConfigure) -> Void) async throws -> WireDeviceState {
        var configure = WireConfigure()
        configure.deviceID = device
        configure.leaseID = lease
        edit(&configure)
        guard case .deviceState(let state) = try await client.request(.configure(configure)).frame.envelope.body else {
            throw AgentClientError(.protocolViolation, agent: "?", "no device state")
        }
        return state
    }

    @Test("list, discovery query and describe return the agent's devices with formats, ranges and controls")
    func describe() async throws {
        let (pki, agent) = try await AgentProcess.secured(["--synthetic", "2"])
        defer {
            agent.terminate()
            pki.remove()
        }
        let client = try await agent.connect(pki, as: "viewer-1")
        #expect(client.welcome.capabilities.contains("devices"))
        guard case .deviceList(let list) = try await client.request(.listDevices(.init())).frame.envelope.body else {
            Issue.record("no device list")
            return
        }
        #expect(list.devices.map(\.uniqueID) == ["synthetic:SYN0001", "synthetic:SYN0002"])
        let first = list.devices[0]
        #expect(first.agentID == "agent-1")
        #expect(first.formats.contains { $0.id == "YUYV-320x240" && $0.frameRateRanges.first?.minFrameDuration.denominator == 120 })
        #expect(first.controls.contains { $0.name == "Power Line Frequency" && $0.menu.count == 3 })
        #expect(first.state.activeFormatID == "YUYV-640x480")

        var query = WireDiscoveryQuery()
        query.deviceTypes = [.external, .synthetic]
        query.position = .back
        let answer = try await client.request(.discoveryQuery(query)).frame.envelope
        guard case .deviceList(let back) = answer.body else {
            Issue.record("expected a device list in reply to discovery_query, got \(answer.messageName)")
            return
        }
        #expect(back.devices.map(\.uniqueID) == ["synthetic:SYN0002"])

        var describe = WireDescribeDevice()
        describe.deviceID = "synthetic:NOPE"
        let missing = await remoteError { _ = try await client.request(.describeDevice(describe)) }
        #expect(missing?.code == .deviceNotFound)
        #expect(missing?.message.contains("synthetic:SYN0001, synthetic:SYN0002") == true)
        await client.close()
    }

    @Test("two clients contend for one lease: the second is told who holds it and until when; changes need the lease")
    func contention() async throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        try pki.directory.issue(name: "coordinator-2", role: .coordinator)
        let agent = try await AgentProcess.start(["--tls-dir", pki.path, "--synthetic", "1"])
        defer { agent.terminate() }
        let device = "synthetic:SYN0001"
        let first = try await agent.connect(pki, as: "coordinator")
        let second = try await agent.connect(pki, as: "coordinator-2")

        let lease = try await lock(first, device, ms: 30_000)
        #expect(lease.holder == "coordinator")
        let held = await remoteError { _ = try await lock(second, device) }
        #expect(held?.code == .leaseHeld)
        #expect(held?.message.contains("leased by 'coordinator'") == true)

        let state = try await configure(first, device, lease: lease.leaseID) {
            $0.formatID = "YUYV-1280x720"
            $0.minFrameDuration.numerator = 1
            $0.minFrameDuration.denominator = 15
        }
        #expect(state.activeFormatID == "YUYV-1280x720")
        #expect(state.activeMinFrameDuration.denominator == 15)

        let outOfRange = await remoteError {
            _ = try await configure(first, device, lease: lease.leaseID) {
                $0.minFrameDuration.numerator = 1
                $0.minFrameDuration.denominator = 25
            }
        }
        #expect(outOfRange?.code == .outOfRange)
        #expect(outOfRange?.message.contains("1/30 s (30 fps); 1/15 s (15 fps)") == true)

        let intruder = await remoteError { _ = try await configure(second, device, lease: "") { $0.formatID = "YUYV-640x480" } }
        #expect(intruder?.code == .leaseHeld)
        let stolen = await remoteError { _ = try await configure(second, device, lease: lease.leaseID) { $0.formatID = "YUYV-640x480" } }
        #expect(stolen?.code == .leaseHeld)

        // The holder disconnects: the lease ends and the other client gets the device.
        await first.close()
        var acquired: WireLeaseInfo?
        let freed = try await eventually(timeout: .seconds(5)) {
            acquired = try? await lock(second, device)
            return acquired != nil
        }
        #expect(freed, "the lease must end within 5 s of its holder disconnecting")
        #expect(acquired?.holder == "coordinator-2")
        await second.close()
    }

    @Test("a lease not renewed expires; a viewer may not lock")
    func expiryAndViewers() async throws {
        let (pki, agent) = try await AgentProcess.secured(["--synthetic", "1"])
        defer {
            agent.terminate()
            pki.remove()
        }
        let device = "synthetic:SYN0001"
        let coordinator = try await agent.connect(pki, as: "coordinator")
        let lease = try await lock(coordinator, device, ms: 1_000)
        var renew = WireRenewLease()
        renew.leaseID = lease.leaseID
        let answer = try await coordinator.request(.renewLease(renew)).frame.envelope
        guard case .lease(let renewed) = answer.body else {
            Issue.record("expected a lease in reply to renew_lease, got \(answer.messageName)")
            return
        }
        #expect(renewed.lease.expiresAtNs > lease.expiresAtNs)
        // The agent expires leases once a second: within two seconds of the renewed expiry the lease is gone.
        var expired: AgentClientError?
        let ended = try await eventually(timeout: .seconds(5), pollingEvery: .milliseconds(100)) {
            expired = await remoteError { _ = try await configure(coordinator, device, lease: lease.leaseID) { $0.formatID = "YUYV-1280x720" } }
            return expired != nil
        }
        #expect(ended, "a 1 s lease not renewed must expire within 5 s")
        #expect(expired?.code == .leaseExpired)
        // Expired means free: the same client can lock again.
        _ = try await lock(coordinator, device)

        let viewer = try await agent.connect(pki, as: "viewer-1")
        let denied = await remoteError { _ = try await lock(viewer, device) }
        #expect(denied?.code == .permissionDenied)
        await viewer.close()
        await coordinator.close()
        // The holder hears of the expiry before the agent logs it.
        #expect(try await eventually(timeout: .seconds(5), pollingEvery: .milliseconds(100)) { agent.log().contains("lease expired without renewal") })
    }
}
