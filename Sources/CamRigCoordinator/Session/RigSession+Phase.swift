import CamRigCapture
import CamRigClock
import CamRigDeviceModel
import CamRigWire
import Foundation

/// One camera's phase lock as the coordinator sees it.
public struct CameraPhase: Sendable {
    /// `AGENT/DEVICE`, as the session names its input.
    public var camera: String
    /// The agent serving the camera.
    public var agentID: String
    /// The camera's unique id on its agent.
    public var deviceID: String
    /// The lock as its agent reports it (`GetPhaseStatus`); `UNLOCKED` when none is held.
    public var status: WirePhaseStatus
    /// Why the status could not be read, when it could not.
    public var failure: String?

    /// Whether there is nothing more to wait for: the camera is locked, unable to lock, or holds no lock
    /// at all (its agent restarted or the lease was lost), or its status could not be read.
    public var isSettled: Bool {
        failure != nil || status.state == .locked || status.state == .cannotLock || status.state == .unlocked
    }
}

extension CameraPhase {
    /// The lock state's name as the CLI and manifests print it.
    public var stateName: String { failure == nil ? Self.name(of: status.state) : "unknown" }

    /// The method's name as the CLI and manifests print it.
    public var methodName: String { Self.name(of: status.method) }

    /// Why the camera is not locked (empty reasons left out).
    public var reason: String? { failure ?? (status.reason.isEmpty ? nil : status.reason) }

    /// The lock as a capture's manifest records it.
    public var manifestEntry: CaptureManifest.PhaseLock {
        CaptureManifest.PhaseLock(
            state: stateName, method: methodName, phaseErrorNs: status.phaseErrorNs, errorBoundNs: status.errorBoundNs,
            reason: status.state == .locked && failure == nil ? nil : reason)
    }

    /// `locked`, `locking`, `cannot-lock`, `unlocked`, or `unknown` for a state this build does not know.
    public static func name(of state: WirePhaseLockState) -> String {
        switch state {
        case .unlocked: "unlocked"
        case .locking: "locking"
        case .locked: "locked"
        case .cannotLock: "cannot-lock"
        default: "unknown"
        }
    }

    /// `frame-duration`, `restart`, `triggered`, or `-` before the agent has chosen.
    public static func name(of method: WirePhaseLockMethod) -> String {
        switch method {
        case .triggered: "triggered"
        case .frameDuration: "frame-duration"
        case .restart: "restart"
        default: "-"
        }
    }
}

extension CaptureManifest {
    /// Records each camera's phase lock (`phases` in camera order, as `RigSession.phaseStatus()` gives them).
    mutating func record(phases: [CameraPhase]) {
        for (index, phase) in phases.enumerated() where cameras.indices.contains(index) {
            cameras[index].phaseLock = phase.manifestEntry
        }
    }
}

extension RigSession {
    /// How often each agent's lock is re-aimed at the grid as its clock estimate improves.
    static let phaseRefreshInterval: Duration = .seconds(1)

    /// Puts every input on one frame grid, `T₀ + k × frame duration` on the coordinator's clock, and
    /// keeps it there until `unlockPhase()` or `stop()`: each agent gets the grid in its own clock (its
    /// offset and drift as estimated) and holds its free-running cameras on it; the grid is re-sent every
    /// second as the estimates move. Needs a committed configuration (one frame duration) and the
    /// session's leases. Returns at once; `waitForPhaseLock` waits for the cameras. A camera whose agent
    /// refuses (its frame duration differs from the rig's, its agent predates phase lock) does not stop
    /// the others: `phaseStatus()` reports it with the agent's reason, and it is asked again every second.
    @discardableResult
    public func lockPhase(tolerance: Duration = .microseconds(100)) async throws -> PhaseGrid {
        guard let duration = activeFrameDuration else {
            throw CommitError(description: "phase lock needs one frame rate on every camera: commit the session's configuration first", failures: [], rollbackFailures: [])
        }
        let period = Double(duration.numerator) * 1e9 / Double(duration.denominator)
        let grid = phaseGrid ?? PhaseGrid(anchor: HostClock.monotonicNow(), period: period)
        phaseGrid = grid
        let toleranceNs = UInt64(tolerance.nanoseconds)
        phaseRefusals = await aimPhase(grid: grid, tolerance: toleranceNs)
        for (device, message) in phaseRefusals.sorted(by: { $0.key < $1.key }) {
            logger.warning("phase lock refused", metadata: ["camera": "\(device)", "reason": "\(message)"])
        }
        phaseRefresh?.cancel()
        phaseRefresh = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: Self.phaseRefreshInterval)
                guard !Task.isCancelled, let self else { return }
                await self.refreshPhase(grid: grid, tolerance: toleranceNs)
            }
        }
        return grid
    }

    private func refreshPhase(grid: PhaseGrid, tolerance: UInt64) async {
        guard phaseGrid == grid else { return }
        phaseRefusals = await aimPhase(grid: grid, tolerance: tolerance)
    }

    /// Sends every input's agent the grid in its clock; returns the devices that refused, with why.
    private func aimPhase(grid: PhaseGrid, tolerance: UInt64) async -> [String: String] {
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
            var failures: [String: String] = [:]
            for await (name, failure) in group {
                if let failure { failures[name] = failure }
            }
            return failures
        }
    }

    /// The phase lock of the input that `status` is of, as agent `agentID` pushed it (a `PHASE_STATUS`
    /// event); nil when no input is that camera.
    public func phase(reported status: WirePhaseStatus, by agentID: String) -> CameraPhase? {
        guard let device = inputs.first(where: { $0.agentID == agentID && $0.deviceID == status.deviceID }) else { return nil }
        var phase = CameraPhase(camera: device.name, agentID: agentID, deviceID: device.deviceID, status: status)
        if status.state == .unlocked, let refusal = phaseRefusals[device.name] {
            phase.failure = "its agent refused the phase lock: \(refusal)"
        }
        return phase
    }

    /// Every input's phase lock as its agent reports it (of the inputs named in `cameras`, when given).
    public func phaseStatus(of cameras: Set<String>? = nil) async -> [CameraPhase] {
        let refusals = phaseRefusals
        let asked = inputs.filter { cameras?.contains($0.name) ?? true }
        return await withTaskGroup(of: (Int, CameraPhase).self) { group in
            for (index, device) in asked.enumerated() {
                group.addTask {
                    var phase = CameraPhase(camera: device.name, agentID: device.agentID, deviceID: device.deviceID, status: WirePhaseStatus())
                    do {
                        var query = WireGetPhaseStatus()
                        query.deviceIds = [device.deviceID]
                        let reply = try await device.agent.client().request(.getPhaseStatus(query))
                        if case .phaseStatusList(let list) = reply.frame.envelope.body, let status = list.devices.first {
                            phase.status = status
                            if status.state == .unlocked, let refusal = refusals[device.name] {
                                phase.failure = "its agent refused the phase lock: \(refusal)"
                            }
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
        phaseRefusals = [:]
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
