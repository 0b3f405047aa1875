import CamRigClock
import CamRigDeviceModel
import CamRigDevices
import CamRigWire
import CamRigWireModel
import Logging
import NIOConcurrencyHelpers

/// Phase locks: free-running cameras held on the frame grids coordinators ask for (`LockPhase`).
///
/// A locked free-running camera keeps streaming (the lock is one of its stream's watchers); every frame's
/// exposure start goes through the camera's pure controller — `FrameDurationLoop` where the sensor has a
/// frame-duration control, `RestartAligner` where it has none — and the controller's answer is carried
/// out on the device at once. Cameras that start exposing on command (the synthetic camera) need no
/// hold: a trigger at a grid instant puts them on it. Requests arrive on the device service's queue.
///
/// A lock lives under its coordinator's lease, except while the agent records the camera: a coordinator
/// that lets go then (killed, disconnected, its lease expired, or unlocking) leaves the camera held on its
/// last grid until the recording ends (`PhaseLockTenure`), since the recording goes on without it.
public final class AgentPhaseLocks: Sendable {
    let streams: AgentStreams
    private let locks = NIOLockedValueBox<[String: DevicePhaseLock]>([:])
    private let logger: Logger

    /// Tolerance when a request names none.
    public static let defaultTolerance: UInt64 = 100_000

    init(streams: AgentStreams, logger: Logger) {
        self.streams = streams
        self.logger = logger
    }

    var clock: HostClock { streams.devices.clock }
    var agentID: String { streams.devices.agentID }

    /// Whether a recording of `deviceID` runs on this agent now: one of its stream's watchers records it
    /// on the grid (`KeepsPhaseLock`). A track's recorder watches from its start until the track closes.
    func isRecorded(deviceID: String) -> Bool {
        streams.isWatched(deviceID: deviceID) { $0 is any KeepsPhaseLock }
    }

    /// Starts (or re-aims) `device`'s lock on the request's grid; answers with its status.
    func lock(_ request: WireLockPhase, device: CaptureDevice) -> WireEnvelope.OneOf_Body {
        let period = request.gridPeriodNs
        let nominal = Double(device.activeMinFrameDuration.nanoseconds)
        guard period.isFinite, period > 0, abs(period / nominal - 1) <= 0.01 else {
            return .error(WireError(
                .invalidArgument, agent: agentID, device: device.uniqueID,
                "grid period \(period) ns is not within 1% of \(device.uniqueID)'s frame duration \(Int64(nominal)) ns; commit the rig's frame rate first"
            ))
        }
        let grid = PhaseGrid(anchor: request.gridAnchorNs, period: period)
        let tolerance = Double(request.toleranceNs == 0 ? Self.defaultTolerance : request.toleranceNs)
        // A lock held for a recording after its coordinator let go answers to the new coordinator's lease
        // from now on; looked up and taken back in one step, so a recording's end cannot release it between.
        let existing = locks.withLockedValue { locks -> DevicePhaseLock? in
            guard let existing = locks[device.uniqueID], !existing.hasEnded else { return nil }
            existing.relocked()
            return existing
        }
        if let existing {
            existing.aim(grid: grid, tolerance: tolerance)
            return .phaseStatus(existing.status())
        }
        let triggered = device.startsExposuresOnCommand
        let lock = DevicePhaseLock(device: device, grid: grid, tolerance: tolerance, triggered: triggered, owner: self, logger: logger)
        locks.withLockedValue { $0[device.uniqueID] = lock }
        if !triggered {
            if case .failed(let error) = streams.start(deviceID: device.uniqueID, subscriber: lock) {
                _ = locks.withLockedValue { $0.removeValue(forKey: device.uniqueID) }
                return .error(error)
            }
        }
        logger.info("phase lock started", metadata: ["device": "\(device.uniqueID)", "method": "\(lock.status().method)", "period_ns": "\(period)"])
        return .phaseStatus(lock.status())
    }

    /// The coordinator lets go of `deviceID`'s lock (`UnlockPhase`, or the end of its lease): the lock ends
    /// (its frame duration back to nominal, its hold on the stream released), unless a recording of the
    /// camera runs, which keeps the camera on its grid until the recording ends.
    func unlock(deviceID: String) {
        guard let lock = locks.withLockedValue({ $0[deviceID] }) else { return }
        let recording = isRecorded(deviceID: deviceID)
        switch lock.coordinatorLeft(recording: recording, now: clock.now()) {
        case .keep:
            logger.notice(
                "phase lock held for a recording after its coordinator let go",
                metadata: ["device": "\(deviceID)", "grid_anchor_ns": "\(lock.currentGrid.anchor)", "grid_period_ns": "\(lock.currentGrid.period)"])
        case .release:
            release(deviceID: deviceID, lock: lock, message: "phase lock released")
        }
    }

    /// Ends `lock`, while it is still `deviceID`'s.
    private func release(deviceID: String, lock: DevicePhaseLock, message: String) {
        let removed = locks.withLockedValue { locks -> Bool in
            guard locks[deviceID] === lock else { return false }
            locks.removeValue(forKey: deviceID)
            return true
        }
        guard removed else { return }
        lock.release()
        streams.stop(streamID: lock.streamID, reason: .stopped, message: message)
    }

    /// A lock held for a recording asks, from its frames, whether the recording still runs; once it has
    /// ended (or the lock's stream has), the lock is released. On the device service's queue, as the
    /// requests are.
    func askAboutRecording(_ lock: DevicePhaseLock) {
        let deviceID = lock.device.uniqueID
        streams.devices.queue.async { [self] in
            let recording = isRecorded(deviceID: deviceID)
            // Decided and removed in one step: a coordinator locking the camera meanwhile keeps it.
            let ended = locks.withLockedValue { locks -> Bool in
                guard locks[deviceID] === lock, lock.recordingAnswered(recording: recording) == .release else { return false }
                locks.removeValue(forKey: deviceID)
                return true
            }
            guard ended else { return }
            lock.release()
            streams.stop(streamID: lock.streamID, reason: .stopped, message: "phase lock released: the recording it was held for ended")
            logger.info("phase lock released: the recording it was held for ended", metadata: ["device": "\(deviceID)"])
        }
    }

    /// `deviceID` vanished from the host: its lock ends as cannot-lock with that reason and stays listed
    /// (rather than reading UNLOCKED), so a coordinator learns why the camera left its grid.
    func deviceVanished(deviceID: String) {
        guard let lock = locks.withLockedValue({ $0[deviceID] }) else { return }
        lock.markVanished()
        streams.stop(streamID: lock.streamID, reason: .deviceDisconnected, message: "\(deviceID) was disconnected")
    }

    /// Status of the named devices (every locked device when empty); devices without a lock read UNLOCKED.
    func status(deviceIDs: [String]) -> WirePhaseStatusList {
        let current = locks.withLockedValue { $0 }
        var list = WirePhaseStatusList()
        let ids = deviceIDs.isEmpty ? current.keys.sorted() : deviceIDs
        list.devices = ids.map { id in
            if let lock = current[id] { return lock.status() }
            var status = WirePhaseStatus()
            status.deviceID = id
            status.state = .unlocked
            return status
        }
        return list
    }

    /// The grid `deviceID` is held on, when it is a free-running camera under a lock: a capture at T then
    /// takes the frame exposed nearest T rather than the first one after it.
    func heldGrid(deviceID: String) -> PhaseGrid? {
        guard let lock = locks.withLockedValue({ $0[deviceID] }), lock.isHolding else { return nil }
        return lock.currentGrid
    }

    /// Whether `deviceID` may be restarted to move its phase: nobody but the lock watches its frames
    /// (previews may: a restart costs them a preview at most).
    func mayRestart(deviceID: String) -> Bool {
        streams.frameWatcherCount(deviceID: deviceID) <= 1
    }

    /// Ends every lock (agent shutdown), recordings or not.
    func stopAll() {
        for (deviceID, lock) in locks.withLockedValue({ $0 }) { release(deviceID: deviceID, lock: lock, message: "phase lock released") }
    }
}

/// One device's phase lock: a stream watcher that steers the camera frame by frame.
final class DevicePhaseLock: FrameSink {
    let device: CaptureDevice
    let connection: UInt64 = 0
    var streamID: String { state.withLockedValue { $0.streamID } }
    func assign(streamID: String) { state.withLockedValue { $0.streamID = streamID } }
    private weak let owner: AgentPhaseLocks?
    private let logger: Logger

    enum Controller {
        /// Free-running, its controls not read yet: they are, with its first frame (the stream applies the
        /// committed format and frame rate when it starts).
        case pending
        case triggered
        case frameDuration(FrameDurationLoop)
        case restart(RestartAligner)
    }

    struct State {
        var grid: PhaseGrid
        var tolerance: Double
        var controller: Controller
        var tracker: PhaseErrorTracker
        var period: Double = 0
        var uncertainty: Int64 = 0
        var lockedSince: Int64 = 0
        var restarts: UInt32 = 0
        var reason = ""
        var ended = false
        /// The id of the stream the lock watches.
        var streamID = ""
        /// Its coordinator's, or a recording's once the coordinator let go.
        var tenure = PhaseLockTenure()

        /// Whether the lock steers a free-running camera (or is about to, its controls not read yet).
        var steers: Bool {
            if ended { return false }
            if case .triggered = controller { return false }
            return true
        }
    }

    private let state: NIOLockedValueBox<State>

    init(device: CaptureDevice, grid: PhaseGrid, tolerance: Double, triggered: Bool, owner: AgentPhaseLocks, logger: Logger) {
        self.device = device
        self.owner = owner
        self.logger = logger
        let controller: Controller = triggered ? .triggered : .pending
        var initial = State(grid: grid, tolerance: tolerance, controller: controller, tracker: PhaseErrorTracker(tolerance: tolerance))
        if case .triggered = controller {
            initial.reason = "exposures start on command at each trigger's instant, which is on the grid"
        }
        state = NIOLockedValueBox(initial)
    }

    var hasEnded: Bool { state.withLockedValue { $0.ended } }
    var currentGrid: PhaseGrid { state.withLockedValue { $0.grid } }
    var isHolding: Bool {
        state.withLockedValue { state in
            if state.ended { return false }
            if case .triggered = state.controller { return false }
            return true
        }
    }

    /// The coordinator let go: whether the lock goes on, for a recording of the camera.
    func coordinatorLeft(recording: Bool, now: Int64) -> PhaseLockTenure.Action {
        state.withLockedValue { state in state.tenure.coordinatorLeft(recording: recording, steers: state.steers, now: now) }
    }

    /// A coordinator locked the camera again.
    func relocked() {
        state.withLockedValue { $0.tenure.relocked() }
    }

    /// Whether the recording the lock is held for still runs (`recording`): `.release` once it does not.
    func recordingAnswered(recording: Bool) -> PhaseLockTenure.Action {
        state.withLockedValue { state in state.tenure.recordingAnswered(recording: recording, steers: state.steers) }
    }

    /// A refreshed grid (the coordinator's clock estimate moved) or tolerance.
    func aim(grid: PhaseGrid, tolerance: Double) {
        state.withLockedValue { state in
            state.grid = grid
            state.tolerance = tolerance
            state.tracker.tolerance = tolerance
            switch state.controller {
            case .frameDuration(var loop):
                loop.setGrid(grid)
                state.controller = .frameDuration(loop)
            case .restart(var aligner):
                aligner.setGrid(grid)
                aligner.tolerance = tolerance
                state.controller = .restart(aligner)
            case .triggered, .pending:
                break
            }
        }
    }

    func deliver(_ frame: CapturedFrame) {
        guard let owner else { return }
        if case .pending = state.withLockedValue({ $0.controller }) {
            let steering: PhaseSteering
            do {
                steering = try device.phaseSteering
            } catch {
                state.withLockedValue { $0.reason = "could not read its frame-duration control: \(error.message)" }
                return
            }
            state.withLockedValue { state in
                switch steering {
                case .frameDuration(let control): state.controller = .frameDuration(FrameDurationLoop(grid: state.grid, control: control))
                case .restart: state.controller = .restart(RestartAligner(grid: state.grid, tolerance: state.tolerance))
                case .triggered: state.controller = .triggered
                }
            }
        }
        let now = owner.clock.now()
        if state.withLockedValue({ $0.tenure.shouldAskAboutRecording(now: now) }) { owner.askAboutRecording(self) }
        let mayRestart = owner.mayRestart(deviceID: device.uniqueID)
        enum Step { case none, lines(Int64), restart(Int64) }
        let step: Step = state.withLockedValue { state in
            guard !state.ended else { return .none }
            let error = state.grid.error(of: frame.exposureStart)
            state.period = frame.measuredFramePeriod
            state.uncertainty = frame.exposureStartUncertainty
            switch state.controller {
            case .triggered, .pending:
                return .none
            case .frameDuration(var loop):
                state.tracker.observe(error)
                let lines = loop.observe(sequence: frame.sequence, exposureStart: frame.exposureStart, now: now, locked: state.tracker.isLocked)
                state.controller = .frameDuration(loop)
                if let lines { return .lines(lines) }
            case .restart(var aligner):
                let action = aligner.observe(exposureStart: frame.exposureStart, streamStart: frame.streamStart, now: now, mayRestart: mayRestart)
                state.controller = .restart(aligner)
                switch aligner.outcome {
                case .aligned: state.tracker.observe(error)
                case .measuring: state.tracker.reset()
                case .gaveUp(let remaining):
                    state.tracker.observe(error)
                    state.reason = "no frame-duration control; \(aligner.attempts) restarts left \(Int64(remaining / 1000)) µs of phase error (tolerance \(Int64(state.tolerance / 1000)) µs)"
                }
                if case .restart(let at)? = action {
                    state.restarts += 1
                    return .restart(at)
                }
            }
            return .none
        }
        state.withLockedValue { state in
            if state.tracker.isLocked {
                if state.lockedSince == 0 { state.lockedSince = now }
            } else {
                state.lockedSince = 0
            }
        }
        do throws(DeviceError) {
            switch step {
            case .none: break
            case .lines(let lines):
                try device.setFrameLines(lines)
                state.withLockedValue { state in
                    if case .frameDuration(var loop) = state.controller {
                        loop.didSet(lines: lines, at: owner.clock.now())
                        state.controller = .frameDuration(loop)
                    }
                }
            case .restart(let at):
                try device.restartStream(atMonotonic: owner.clock.monotonic(atReading: at))
            }
        } catch {
            logger.warning("phase lock could not steer the camera", metadata: ["device": "\(device.uniqueID)", "error": "\(error)"])
            if case .lines = step, error.code == .unsupported {
                // The camera's frame duration cannot be steered after all (a pipeline that ignores it).
                finish(because: "cannot steer its frame duration: \(error.message)", unlessEnded: true)
                return
            }
            state.withLockedValue { state in
                state.reason = "steering failed: \(error.message)"
                if case .restart(var aligner) = state.controller {
                    aligner.restartFailed()
                    state.controller = .restart(aligner)
                }
            }
        }
    }

    func end(reason: WireStreamEndReason, message: String) {
        finish(
            because: reason == .deviceDisconnected
                ? "\(device.uniqueID) was disconnected: \(message)" : "its stream ended (\(message.isEmpty ? "\(reason)" : message))",
            unlessEnded: true)
    }

    /// The device vanished: the lock is over, whatever ended its stream first.
    func markVanished() {
        finish(because: "\(device.uniqueID) was disconnected from its host", unlessEnded: false)
    }

    /// Ends the lock with `reason`; `unlessEnded` keeps the reason of a lock that had ended already.
    private func finish(because reason: String, unlessEnded: Bool) {
        state.withLockedValue { state in
            if unlessEnded && state.ended { return }
            state.ended = true
            state.tracker.reset()
            state.lockedSince = 0
            state.reason = reason
        }
    }

    /// Lock released: the frame duration goes back to nominal.
    func release() {
        let nominal: Int64? = state.withLockedValue { state in
            state.ended = true
            if case .frameDuration(let loop) = state.controller { return loop.control.lines }
            return nil
        }
        if let nominal { try? device.setFrameLines(nominal) }
    }

    func status() -> WirePhaseStatus {
        state.withLockedValue { state in
            var status = WirePhaseStatus()
            status.deviceID = device.uniqueID
            status.gridAnchorNs = state.grid.anchor
            status.gridPeriodNs = state.grid.period
            status.phaseErrorNs = Int64(state.tracker.lastError.rounded())
            status.errorBoundNs = UInt64(state.tracker.bound.rounded()) + UInt64(max(state.uncertainty, 0))
            status.measuredFramePeriodNs = state.period
            status.frames = state.tracker.frames
            status.restarts = state.restarts
            status.lockedSinceNs = state.lockedSince
            status.reason = state.reason
            switch state.controller {
            case .pending:
                status.state = state.ended ? .cannotLock : .locking
            case .triggered:
                status.method = .triggered
                status.state = state.ended ? .cannotLock : .locked
            case .frameDuration(let loop):
                status.method = .frameDuration
                status.rateErrorPpm = loop.rateErrorPPM
                status.state = state.ended ? .cannotLock : state.tracker.isLocked ? .locked : .locking
            case .restart(let aligner):
                status.method = .restart
                if state.ended {
                    status.state = .cannotLock
                } else if case .gaveUp = aligner.outcome, !state.tracker.isLocked {
                    status.state = .cannotLock
                } else {
                    status.state = state.tracker.isLocked ? .locked : .locking
                }
            }
            return status
        }
    }
}
