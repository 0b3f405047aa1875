import CamRigDeviceModel
import Foundation

/// A camera's streaming life, drawn after libcamera's own camera states, and the same for every backend
/// (V4L2, libcamera, synthetic):
///
/// ```
///             configure            start              stop               thread ended
///   Acquired ───────────▶ Configured ──────▶ Running ──────▶ Stopping ───────────────▶ Configured
///                          ▲    │ configure                                     (any state) ──▶ Disconnected
///                          └────┘
/// ```
///
/// libcamera's Available (before `acquire`) is the time before a backend has opened its camera; a backend
/// exists only once it holds it, so the machine starts in Acquired. A stream's thread runs while the state is
/// `.running` of its own run; asking it to stop only moves to `.stopping`, and a new configuration or stream
/// waits until the thread has said it ended (libcamera refuses `configure` and `start` in Stopping too).
///
/// Pure: it decides, `CameraStream` keeps it and carries the decisions out.
public struct CameraStreamMachine: Sendable, Hashable {
    public enum State: Sendable, Hashable {
        /// Opened and held by this process; no format set yet.
        case acquired
        /// A format is set; a stream may start.
        case configured
        /// Stream `run` delivers frames from its thread.
        case running(run: UInt64)
        /// Stream `run` was asked to stop; its thread is winding down.
        case stopping(run: UInt64)
        /// The camera went away (unplugged, or no longer listed): every call fails.
        case disconnected
    }

    /// Why a call cannot go on.
    public enum Refusal: Sendable, Hashable {
        case streaming
        case notConfigured
        case disconnected
    }

    /// What a call that needs the camera idle (configure, start) may do now.
    public enum Gate: Sendable, Hashable {
        case proceed
        /// A stream is stopping: wait for its end, then ask again.
        case waitForStop
        case refuse(Refusal)
    }

    public private(set) var state: State = .acquired
    private var lastRun: UInt64 = 0

    public init() {}

    /// Whether a new format or frame rate may be set now.
    public func mayConfigure() -> Gate {
        switch state {
        case .acquired, .configured: .proceed
        case .running: .refuse(.streaming)
        case .stopping: .waitForStop
        case .disconnected: .refuse(.disconnected)
        }
    }

    /// A format was set.
    public mutating func configured() {
        if case .acquired = state { state = .configured }
    }

    /// Starts a stream when the camera is configured and idle: `.proceed` moves to `.running` of a new run,
    /// whose number `run` then gives.
    public mutating func start() -> Gate {
        switch state {
        case .configured:
            lastRun += 1
            state = .running(run: lastRun)
            return .proceed
        case .acquired: return .refuse(.notConfigured)
        case .running: return .refuse(.streaming)
        case .stopping: return .waitForStop
        case .disconnected: return .refuse(.disconnected)
        }
    }

    /// The stream running now, if any.
    public var run: UInt64? {
        if case .running(let run) = state { return run }
        return nil
    }

    /// Starting stream `run` failed before its thread began: the camera is configured and idle again.
    public mutating func startFailed(run: UInt64) {
        if state == .running(run: run) { state = .configured }
    }

    /// Asks the running stream to stop; returns its run (whose thread the backend then wakes), or nil when
    /// none runs.
    public mutating func stop() -> UInt64? {
        guard case .running(let run) = state else { return nil }
        state = .stopping(run: run)
        return run
    }

    /// Whether stream `run`'s thread goes on delivering.
    public func isRunning(_ run: UInt64) -> Bool { state == .running(run: run) }

    /// Stream `run`'s thread has ended (stopped, failed, or the camera went away): the camera is idle.
    /// Returns false for a run that is not the current one (nothing changes).
    @discardableResult
    public mutating func ended(run: UInt64) -> Bool {
        switch state {
        case .running(run: run), .stopping(run: run):
            state = .configured
            return true
        default:
            return false
        }
    }

    /// The camera went away; returns the run of a stream that must now end, if one ran.
    public mutating func disconnect() -> UInt64? {
        defer { state = .disconnected }
        if case .running(let run) = state { return run }
        return nil
    }

    public var isDisconnected: Bool { state == .disconnected }
}

/// The one owner of a camera's `CameraStreamMachine`: backends ask it before they configure or start, their
/// streaming threads ask it whether to go on, and a call that finds a stream stopping waits here (up to
/// `stopWait`) for the thread to end instead of failing or polling.
public final class CameraStream: @unchecked Sendable {
    // `machine` is read and changed only with `condition` locked.
    private let condition = NSCondition()
    private var machine = CameraStreamMachine()
    /// The camera's unique id, for errors.
    public let device: String
    /// How long a call waits for a stream that is stopping.
    public let stopWait: TimeInterval

    public init(device: String, stopWait: TimeInterval = 2) {
        self.device = device
        self.stopWait = stopWait
    }

    public var state: CameraStreamMachine.State { locked { $0.state } }
    /// The stream running now, if any.
    public var run: UInt64? { locked { $0.run } }
    /// Whether a stream runs or is still stopping (its thread has not ended).
    public var isStreaming: Bool {
        switch state {
        case .running, .stopping: true
        default: false
        }
    }
    public var isDisconnected: Bool { locked { $0.isDisconnected } }

    /// Returns once the camera may be configured (a stopping stream waited for); throws while a stream runs,
    /// when the camera is gone, or when a stream is still stopping after `stopWait`.
    public func waitUntilIdle() throws(DeviceError) {
        try decide { $0.mayConfigure() }
    }

    /// A format was set.
    public func configured() {
        locked { $0.configured() }
    }

    /// Starts a stream (waiting for one that is stopping); returns its run, which the streaming thread
    /// checks with `isRunning` and ends with `ended`.
    public func start() throws(DeviceError) -> UInt64 {
        var started: UInt64 = 0
        try decide { machine in
            let gate = machine.start()
            if gate == .proceed { started = machine.run ?? 0 }
            return gate
        }
        return started
    }

    /// Starting `run` failed before its thread began.
    public func startFailed(_ run: UInt64) {
        locked { $0.startFailed(run: run) }
    }

    /// Asks the running stream to stop; true when one was running (the backend then wakes its thread).
    @discardableResult
    public func stop() -> Bool {
        condition.lock()
        let stopped = machine.stop() != nil
        condition.broadcast()
        condition.unlock()
        return stopped
    }

    /// Whether stream `run`'s thread goes on.
    public func isRunning(_ run: UInt64) -> Bool {
        locked { $0.isRunning(run) }
    }

    /// For a streaming thread pacing its frames: waits up to `nanoseconds` while stream `run` runs, woken at
    /// once by a stop or a disconnection; returns whether it still runs. The wait is timed on the wall clock
    /// (as condition variables are): pace the last millisecond or two with `HostClock.sleep`.
    public func wait(whileRunning run: UInt64, nanoseconds: Int64) -> Bool {
        let deadline = Date(timeIntervalSinceNow: Double(max(nanoseconds, 0)) / 1e9)
        condition.lock()
        defer { condition.unlock() }
        while machine.isRunning(run), condition.wait(until: deadline) {}
        return machine.isRunning(run)
    }

    /// Stream `run`'s thread has ended; calls waiting for it go on.
    public func ended(_ run: UInt64) {
        condition.lock()
        machine.ended(run: run)
        condition.broadcast()
        condition.unlock()
    }

    /// The camera went away: true when a stream was running (its thread sees it and ends).
    @discardableResult
    public func disconnect() -> Bool {
        condition.lock()
        let running = machine.disconnect() != nil
        condition.broadcast()
        condition.unlock()
        return running
    }

    /// The error a refusal is answered with.
    public func error(_ refusal: CameraStreamMachine.Refusal) -> DeviceError {
        switch refusal {
        case .streaming:
            DeviceError(.busy, device: device, "is streaming; stop its stream first")
        case .notConfigured:
            DeviceError(.invalidArgument, device: device, "has no active format; configure it first")
        case .disconnected:
            DeviceError(.disconnected, device: device, "is disconnected; check its cable and that it is listed by `camrig-agent --list-devices`")
        }
    }

    private func locked<T>(_ body: (inout CameraStreamMachine) -> T) -> T {
        condition.lock()
        defer { condition.unlock() }
        return body(&machine)
    }

    /// Runs `gate` until it proceeds or refuses, waiting for a stopping stream to end in between.
    private func decide(_ gate: (inout CameraStreamMachine) -> CameraStreamMachine.Gate) throws(DeviceError) {
        let deadline = Date(timeIntervalSinceNow: stopWait)
        condition.lock()
        defer { condition.unlock() }
        while true {
            switch gate(&machine) {
            case .proceed:
                return
            case .refuse(let refusal):
                throw error(refusal)
            case .waitForStop:
                guard Date() < deadline else {
                    throw DeviceError(
                        .busy, device: device,
                        "is still stopping its last stream after \(String(format: "%.0f", stopWait)) s; try again", errno: EBUSY)
                }
                _ = condition.wait(until: deadline)
            }
        }
    }
}
