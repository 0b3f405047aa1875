import CamRigClock
import CamRigDevices
import CamRigWire
import Foundation

/// One camera's phase lock as the coordinator sees it.
public struct CameraPhase: Sendable {
    public var camera: String
    public var agentID: String
    public var deviceID: String
    public var status: WirePhaseStatus
    /// Why the status could not be read, when it could not.
    public var failure: String?

    /// Whether the camera is done trying: locked, or unable to lock.
    public var isSettled: Bool { failure != nil || status.state == .locked || status.state == .cannotLock }
}

extension RigSession {
    /// How often each agent's lock is re-aimed at the grid as its clock estimate improves.
    static let phaseRefreshInterval: Duration = .seconds(1)

    /// Puts every input on one frame grid, `T₀ + k × frame duration` on the coordinator's clock, and
    /// keeps it there until `unlockPhase()` or `stop()`: each agent gets the grid in its own clock (its
    /// offset and drift as estimated) and holds its free-running cameras on it; the grid is re-sent every
    /// second as the estimates move. Needs a committed configuration (one frame duration) and the
    /// session's leases. Returns at once; `waitForPhaseLock` waits for the cameras.
    @discardableResult
    public func lockPhase(tolerance: Duration = .microseconds(100)) async throws -> PhaseGrid {
        guard let duration = activeFrameDuration else {
            throw CommitError(description: "phase lock needs one frame rate on every camera: commit the session's configuration first", failures: [], rollbackFailures: [])
        }
        let period = Double(duration.numerator) * 1e9 / Double(duration.denominator)
        let grid = phaseGrid ?? PhaseGrid(anchor: HostClock.monotonicNow(), period: period)
        phaseGrid = grid
        let toleranceNs = UInt64(tolerance.nanoseconds)
        let failures = await aimPhase(grid: grid, tolerance: toleranceNs)
        if !failures.isEmpty {
            throw CommitError(
                description: "phase lock could not start on " + failures.map { "\($0.device): \($0.message)" }.joined(separator: "; "),
                failures: failures, rollbackFailures: [])
        }
        phaseRefresh?.cancel()
        phaseRefresh = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: Self.phaseRefreshInterval)
                guard !Task.isCancelled, let self else { return }
                _ = await self.aimPhase(grid: grid, tolerance: toleranceNs)
            }
        }
        return grid
    }

    /// Sends every input's agent the grid in its clock; returns the devices that refused.
    private func aimPhase(grid: PhaseGrid, tolerance: UInt64) async -> [(device: String, message: String)] {
        let requests: [(RigDevice, WireLockPhase?, String?)] = inputs.map { device in
            guard let lease = lease(of: device.name) else { return (device, nil, "the session holds no lease on it") }
            do {
                let estimate = try device.agent.clockEstimate()
                // A grid instant near now, in the agent's clock, and the period as the agent's clock counts it.
                let now = HostClock.monotonicNow()
                let instant = grid.instant(grid.index(nearest: now))
                var request = WireLockPhase()
                request.deviceID = device.deviceID
                request.leaseID = lease
                request.gridAnchorNs = estimate.agentTime(atCoordinator: instant)
                request.gridPeriodNs = grid.period * (1 + estimate.driftPPM * 1e-6)
                request.toleranceNs = tolerance
                return (device, request, nil)
            } catch {
                return (device, nil, Self.message(error))
            }
        }
        return await withTaskGroup(of: (String, String?).self) { group in
            for (device, request, failure) in requests {
                group.addTask {
                    guard let request else { return (device.name, failure) }
                    do {
                        _ = try await device.agent.client().request(.lockPhase(request))
                        return (device.name, nil)
                    } catch {
                        return (device.name, Self.message(error))
                    }
                }
            }
            var failures: [(device: String, message: String)] = []
            for await (name, failure) in group {
                if let failure { failures.append((name, failure)) }
            }
            return failures.sorted { $0.device < $1.device }
        }
    }

    /// Every input's phase lock as its agent reports it.
    public func phaseStatus() async -> [CameraPhase] {
        await withTaskGroup(of: (Int, CameraPhase).self) { group in
            for (index, device) in inputs.enumerated() {
                group.addTask {
                    var phase = CameraPhase(camera: device.name, agentID: device.agentID, deviceID: device.deviceID, status: WirePhaseStatus())
                    do {
                        var query = WireGetPhaseStatus()
                        query.deviceIds = [device.deviceID]
                        let reply = try await device.agent.client().request(.getPhaseStatus(query))
                        if case .phaseStatusList(let list) = reply.frame.envelope.body, let status = list.devices.first {
                            phase.status = status
                        } else {
                            phase.failure = "agent \(device.agentID) answered GetPhaseStatus with \(reply.frame.envelope.messageName)"
                        }
                    } catch {
                        phase.failure = Self.message(error)
                    }
                    return (index, phase)
                }
            }
            var phases: [(Int, CameraPhase)] = []
            for await entry in group { phases.append(entry) }
            return phases.sorted { $0.0 < $1.0 }.map(\.1)
        }
    }

    /// Waits until every camera is locked or cannot lock, or `timeout` passes; returns the last status.
    public func waitForPhaseLock(timeout: Duration, pollingEvery interval: Duration = .milliseconds(100)) async -> [CameraPhase] {
        let deadline = ContinuousClock.now + timeout
        while true {
            let phases = await phaseStatus()
            if phases.allSatisfy(\.isSettled) || ContinuousClock.now >= deadline { return phases }
            try? await Task.sleep(for: interval)
        }
    }

    /// Stops holding the inputs' phase: their frame durations go back to nominal.
    public func unlockPhase() async {
        phaseRefresh?.cancel()
        phaseRefresh = nil
        guard phaseGrid != nil else { return }
        phaseGrid = nil
        await withTaskGroup(of: Void.self) { group in
            for device in inputs {
                guard let lease = lease(of: device.name) else { continue }
                group.addTask {
                    var unlock = WireUnlockPhase()
                    unlock.deviceID = device.deviceID
                    unlock.leaseID = lease
                    _ = try? await device.agent.client().request(.unlockPhase(unlock))
                }
            }
        }
    }
}
