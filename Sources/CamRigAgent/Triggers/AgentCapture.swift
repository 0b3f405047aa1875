import CamRigClock
import CamRigDeviceModel
import CamRigDevices
import CamRigWire
import CamRigWireModel
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// Photos and scheduled triggers.
///
/// Every pending trigger waits in one `TriggerScheduler`: its thread sleeps to the earliest instant,
/// prepares each trigger `prepareNanoseconds` ahead (cameras started, so the frame exposed at T exists)
/// and spins the last stretch to T. It records when it actually fired; each device then contributes its
/// first frame exposed at or after T, stored in the spool before it is reported.
///
/// A photo passes three parts, each in a file of its own: the capture stage (`AgentCapture+CaptureStage`:
/// which frames, taken when the device's `DevicePhotoPipeline` lets it begin), processing
/// (`PhotoProcessor`, pure) and storing (`AgentCapture+Store`, on the spool's thread). Deferred photos'
/// finals are made by `DeferredPhotoWorker` while the agent is idle, or at once by `FinalizePhotos`
/// (`PhotoFinalizer`).
///
/// What this object itself changes is one `State` under one lock; continuations and callbacks are run
/// after the lock is released.
public final class AgentCapture: Sendable {
    let streams: AgentStreams
    let phaseLocks: AgentPhaseLocks
    public let spool: ResultSpool
    /// Where photos are written (the spool's one thread, shared with fetching and acknowledging).
    let spoolThread: NIOThreadPool
    let agentID: String
    var clock: HostClock { streams.devices.clock }
    /// How long before a trigger's instant its cameras are started.
    static let prepareNanoseconds: Int64 = 100_000_000
    /// How long before a trigger's instant the scheduler stops sleeping and spins.
    static let spinNanoseconds: Int64 = 300_000
    private let scheduler: TriggerScheduler<PendingTrigger>
    /// Deferred photos waiting for their final.
    let deferred: DeferredPhotoStore
    private let finalizer: PhotoFinalizer
    private let worker: DeferredPhotoWorker
    let logger: Logger

    /// What the agent's photo side keeps between requests.
    struct State {
        /// Captures between firing and being stored.
        var inFlight = 0
        /// When each device's latest photo was requested (agent clock), for fast capture prioritization.
        var lastRequested: [String: Int64] = [:]
        /// Devices prepared for photos (`PreparePhotoSettings`), by device id.
        var prepared: [String: PreparedDevice] = [:]
        /// Each device's photos in flight, by device id.
        var pipelines: [String: DevicePhotoPipeline] = [:]
        /// When a photo last began or ended a stage (agent clock).
        var lastActivity: Int64 = 0
        /// Triggers prepared and not fired yet: the photos they wait for.
        var preparedTriggers: [ObjectIdentifier: [PendingPhoto]] = [:]
        /// The deferred-photo worker's task, from `start()` to `shutdown()`.
        var worker: Task<Void, Never>?
        /// Who waits in `drain()` for the captures in flight to be stored.
        var drainWaiters: [UUID: CheckedContinuation<Void, Never>] = [:]

        /// A capture was stored: the waiters to resume when it was the last in flight.
        mutating func stored() -> [CheckedContinuation<Void, Never>] {
            inFlight -= 1
            guard inFlight == 0 else { return [] }
            defer { drainWaiters = [:] }
            return Array(drainWaiters.values)
        }

        /// A photo of `deviceID` requested at `t`: the previous request's instant, and the device's preparation.
        mutating func requested(deviceID: String, at t: Int64) -> (previous: Int64?, preparation: PreparedDevice?) {
            defer { lastRequested[deviceID] = t }
            return (lastRequested[deviceID], prepared[deviceID])
        }

        /// What the deferred-photo worker sees of the agent.
        var activity: DeferredPhotoWorker.Activity {
            DeferredPhotoWorker.Activity(busy: inFlight > 0 || !pipelines.values.allSatisfy(\.isIdle), lastActivity: lastActivity)
        }
    }

    let state: NIOLockedValueBox<State>

    /// A device prepared for photos: the settings it was prepared with, and the sink that keeps its
    /// camera streaming with the newest frame at hand.
    struct PreparedDevice: Sendable {
        let settings: [WirePhotoSettings]
        let sink: NewestFrameSink
    }

    /// A trigger between being scheduled and firing; the frames it waits for are found when it is prepared.
    final class PendingTrigger: Sendable {
        let trigger: WireScheduleTrigger
        let requestID: UInt64
        let connection: AgentRequestRouter.Connection
        /// Who prepares and fires it (held only while the trigger is pending).
        let capture: AgentCapture
        let reply: @Sendable (WireEnvelope.OneOf_Body) -> Void

        init(
            trigger: WireScheduleTrigger,
            requestID: UInt64,
            connection: AgentRequestRouter.Connection,
            capture: AgentCapture,
            reply: @escaping @Sendable (WireEnvelope.OneOf_Body) -> Void
        ) {
            self.trigger = trigger
            self.requestID = requestID
            self.connection = connection
            self.capture = capture
            self.reply = reply
        }
    }

    init(
        streams: AgentStreams, phaseLocks: AgentPhaseLocks, spool: ResultSpool, spoolThread: NIOThreadPool, agentID: String,
        maxPendingTriggers: Int = 64, realtime: Bool = false, logger: Logger
    ) {
        self.streams = streams
        self.phaseLocks = phaseLocks
        self.spool = spool
        self.spoolThread = spoolThread
        self.agentID = agentID
        self.logger = logger
        let deferred = DeferredPhotoStore(spoolDirectory: spool.directory)
        self.deferred = deferred
        let finalizer = PhotoFinalizer(deferred: deferred, spool: spool, spoolThread: spoolThread, agentID: agentID)
        self.finalizer = finalizer
        let clock = streams.devices.clock
        let state = NIOLockedValueBox(State())
        self.state = state
        worker = DeferredPhotoWorker(finalizer: finalizer, now: { clock.now() }, activity: { state.withLockedValue { $0.activity } }, logger: logger)
        // The scheduler's callbacks run on its thread and reach this object through the trigger itself.
        scheduler = TriggerScheduler(
            clock: clock,
            capacity: maxPendingTriggers,
            lead: Self.prepareNanoseconds,
            spinWindow: Self.spinNanoseconds,
            realtime: realtime,
            threadStarted: { outcome in
                guard let outcome else { return }
                switch outcome.priority {
                case .success(let priority):
                    logger.info("trigger thread runs with real-time priority", metadata: ["policy": "SCHED_FIFO", "priority": "\(priority)", "timer_slack_ns": "\(outcome.timerSlackNanoseconds)"])
                case .failure(let refusal):
                    logger.warning("trigger thread runs without real-time priority: triggers may fire late when the host is busy", metadata: ["reason": "\(refusal)", "timer_slack_ns": "\(outcome.timerSlackNanoseconds)"])
                }
            },
            prepare: { pending in pending.capture.prepare(pending) },
            fire: { pending, firedAt in pending.capture.fire(pending, firedAt: firedAt) }
        )
    }

    /// Starts the trigger scheduler's thread and the deferred-photo worker (when the agent starts serving).
    func start() {
        scheduler.start()
        // Finals of deferred photos (also those left by an earlier run) are made once the agent has been
        // idle for a while, from now on: a client that reconnects at once and asks for them is served first.
        let now = clock.now()
        state.withLockedValue { $0.lastActivity = now }
        let worker = self.worker
        let task = Task { [weak self] in
            await worker.run { made in self?.pipeline(for: made.deviceID).record(level: made.level, duration: made.duration) }
        }
        state.withLockedValue { $0.worker = task }
    }

    /// Stops the scheduler and the deferred-photo worker; triggers that never fired are answered with `SHUTTING_DOWN`.
    func shutdown() {
        let task = state.withLockedValue { state in
            state.preparedTriggers = [:]
            defer { state.worker = nil }
            return state.worker
        }
        task?.cancel()
        for pending in scheduler.shutdown() {
            pending.reply(.error(WireError(.shuttingDown, agent: agentID, "agent \(agentID) shut down before trigger \(pending.trigger.triggerID) fired")))
        }
    }

    /// A photo began or ended a stage now: the deferred-photo worker waits for the agent to be idle again.
    func touch() {
        let now = clock.now()
        state.withLockedValue { $0.lastActivity = now }
        worker.wakeUp()
    }

    /// The photo pipeline of `deviceID`.
    func pipeline(for deviceID: String) -> DevicePhotoPipeline {
        let events = streams.devices.events
        let worker = self.worker
        return state.withLockedValue { state in
            if let existing = state.pipelines[deviceID] { return existing }
            let made = DevicePhotoPipeline { readiness in
                let (wire, text): (WireCaptureReadiness, String) =
                    switch readiness {
                    case .ready: (.ready, "ready")
                    case .waitingForCapture: (.notReadyWaitingForCapture, "not ready: a capture stage runs")
                    case .waitingForProcessing: (.notReadyWaitingForProcessing, "not ready: the previous photo is processed")
                    }
                events.publish(.captureReadiness, device: deviceID, message: "\(deviceID) capture readiness: \(text)") { $0.captureReadiness = wire }
                worker.wakeUp()
            }
            state.pipelines[deviceID] = made
            return made
        }
    }

    /// Runs `store` in a task, counted in flight from now so that `drain()` waits for it.
    private func storeInTask(_ reply: @escaping @Sendable (WireEnvelope.OneOf_Body) -> Void, _ store: @escaping @Sendable () async -> WireEnvelope.OneOf_Body) {
        state.withLockedValue { $0.inFlight += 1 }
        Task {
            reply(await store())
            for waiter in self.state.withLockedValue({ $0.stored() }) { waiter.resume() }
            self.worker.wakeUp()
        }
    }

    /// Answers a photo taken now.
    func capturePhoto(_ capture: WireCapturePhoto, requestID: UInt64, reply: @escaping @Sendable (WireEnvelope.OneOf_Body) -> Void) {
        let now = clock.now()
        let triggerID = "photo-\(requestID)"
        guard streams.devices.discovery.device(uniqueID: capture.deviceID) != nil else {
            reply(.error(WireError(.deviceNotFound, agent: agentID, device: capture.deviceID, "agent \(agentID) has no device '\(capture.deviceID)'")))
            return
        }
        let frames = beginPhotos([capture.deviceID], at: now, settings: capture.settings, triggerID: triggerID, reply: reply)
        storeInTask(reply) {
            await self.store(triggerID: triggerID, frames: frames, session: capture.sessionID, settings: capture.settings, fireAt: now, firedAt: now, reply: reply)
        }
    }

    /// Prepares a device for photos with `request.settings`, or releases it when there are none; on the
    /// device queue. The camera streams from now on, so matching captures pay no start.
    func prepare(_ request: WirePreparePhotoSettings) -> WireEnvelope.OneOf_Body {
        let deviceID = request.deviceID
        guard streams.devices.discovery.device(uniqueID: deviceID) != nil else {
            return .error(WireError(.deviceNotFound, agent: agentID, device: deviceID, "agent \(agentID) has no device '\(deviceID)' to prepare"))
        }
        enum Change {
            case released(NewestFrameSink?)
            case updated
            case start
        }
        let change = state.withLockedValue { state -> Change in
            guard let previous = state.prepared[deviceID] else { return request.settings.isEmpty ? .released(nil) : .start }
            if request.settings.isEmpty {
                state.prepared[deviceID] = nil
                return .released(previous.sink)
            }
            state.prepared[deviceID] = PreparedDevice(settings: request.settings, sink: previous.sink)
            return .updated
        }
        switch change {
        case .released(let sink):
            if let sink { streams.stop(streamID: sink.streamID, reason: .stopped) }
            return .ok(WireOk())
        case .updated:
            return .ok(WireOk())
        case .start:
            break
        }
        let state = self.state
        let sink = NewestFrameSink { ended in
            // The device vanished or failed, or the agent stops: the preparation ends with its stream.
            state.withLockedValue { if $0.prepared[deviceID]?.sink === ended { $0.prepared[deviceID] = nil } }
        }
        if case .failed(let error) = streams.start(deviceID: deviceID, subscriber: sink) { return .error(error) }
        state.withLockedValue { $0.prepared[deviceID] = PreparedDevice(settings: request.settings, sink: sink) }
        return .ok(WireOk())
    }

    /// Schedules a validated trigger; answers `TriggerScheduled` at once and `TriggerFired` (or a stream) at T.
    func schedule(
        _ trigger: WireScheduleTrigger,
        requestID: UInt64,
        connection: AgentRequestRouter.Connection,
        reply: @escaping @Sendable (WireEnvelope.OneOf_Body) -> Void
    ) {
        // A device the agent does not have is refused now, as CapturePhoto refuses it, not when the trigger fires.
        let known = Set(streams.devices.discovery.devices.map(\.uniqueID))
        let unknown = trigger.deviceIds.filter { !known.contains($0) }
        guard unknown.isEmpty else {
            let list = known.sorted().joined(separator: ", ")
            reply(.error(WireError(
                .deviceNotFound, agent: agentID, device: unknown[0],
                "trigger \(trigger.triggerID) names \(unknown.map { "'\($0)'" }.joined(separator: ", ")), which agent \(agentID) does not have; it has: \(list.isEmpty ? "none" : list)")))
            return
        }
        let pending = PendingTrigger(trigger: trigger, requestID: requestID, connection: connection, capture: self, reply: reply)
        switch scheduler.schedule(pending, fireAt: trigger.fireAtNs) {
        case .failure(.late(let nanoseconds)):
            let late = Double(nanoseconds) / 1e6
            logger.notice("refused late trigger", metadata: ["trigger": "\(trigger.triggerID)", "late_ms": "\(late)"])
            streams.devices.events.publish(.triggerLate, message: "trigger \(trigger.triggerID) arrived \(String(format: "%.3f", late)) ms after its time") {
                $0.triggerID = trigger.triggerID
            }
            reply(.error(WireError(.triggerLate, agent: agentID, "trigger \(trigger.triggerID) was due \(String(format: "%.3f", late)) ms ago (agent time \(trigger.fireAtNs) ns, now \(clock.now()) ns); schedule with more lead time")))
        case .failure(.full(let capacity)):
            reply(.error(WireError(.queueFull, agent: agentID, "agent \(agentID) already has \(capacity) pending triggers; wait for some to fire")))
        case .failure(.stopped):
            reply(.error(WireError(.shuttingDown, agent: agentID, "agent \(agentID) is shutting down and takes no more triggers")))
        case .success:
            var scheduled = WireTriggerScheduled()
            scheduled.triggerID = trigger.triggerID
            scheduled.fireAtNs = trigger.fireAtNs
            reply(.triggerScheduled(scheduled))
        }
    }

    /// A lead before T, on the scheduler's thread: the cameras start, so a photo is the frame exposed
    /// from T on, and a stream's first frame is exposed at T, rather than whatever a camera manages after
    /// a late start (prepared capture). For a stream, waiting for that first frame only keeps the camera
    /// running until the stream's own subscriber has joined at T.

    private func prepare(_ pending: PendingTrigger) {
        // Cameras that can start exposing on a grid start on T, on every agent alike. The anchor reads T or
        // later on this host's clock, so the frame exposed at T passes the "from T on" filter. Set here,
        // just before the cameras start, so nothing else starts them in between.
        let anchor = clock.monotonic(atReading: pending.trigger.fireAtNs)
        for deviceID in pending.trigger.deviceIds {
            streams.devices.discovery.device(uniqueID: deviceID)?.alignNextStream(toMonotonic: anchor)
        }
        if pending.trigger.action == .startStream {
            // Waiting for the first frame from T on keeps the camera running until the stream's own
            // subscriber joins at T. No photo: the photo pipeline is not involved.
            for deviceID in pending.trigger.deviceIds {
                let from = firstExposure(deviceID: deviceID, at: pending.trigger.fireAtNs)
                Task { _ = try? await self.streams.frames(deviceID: deviceID, selection: .from(from, count: 1), timeout: .seconds(5)) }
            }
            return
        }
        let frames = beginPhotos(
            pending.trigger.deviceIds, at: pending.trigger.fireAtNs, settings: pending.trigger.photoSettings, triggerID: pending.trigger.triggerID,
            reply: pending.reply)
        state.withLockedValue { $0.preparedTriggers[ObjectIdentifier(pending)] = frames }
    }

    /// At T, on the scheduler's thread: hands the trigger's work to a task.
    private func fire(_ pending: PendingTrigger, firedAt: Int64) {
        let trigger = pending.trigger
        if trigger.action == .startStream {
            startStream(trigger, requestID: pending.requestID, connection: pending.connection, fireAt: trigger.fireAtNs, firedAt: firedAt, reply: pending.reply)
            return
        }
        let frames = state.withLockedValue { $0.preparedTriggers.removeValue(forKey: ObjectIdentifier(pending)) } ?? []
        storeInTask(pending.reply) {
            await self.store(
                triggerID: trigger.triggerID, frames: frames, session: trigger.sessionID, settings: trigger.photoSettings, fireAt: trigger.fireAtNs,
                firedAt: firedAt, reply: pending.reply)
        }
    }

    /// `FinalizePhotos`: makes the named deferred photos' finals now (every deferred photo when none is named).
    func finalize(_ ids: [String]) async -> WireEnvelope.OneOf_Body {
        await finalizer.finalize(ids) { made in pipeline(for: made.deviceID).record(level: made.level, duration: made.duration) }
    }

    /// At T: reports the firing, then streams the device's frames exposed from T on, on the trigger's
    /// request id (`StreamStarted`, `VideoFrame`…, `StreamEnded`).
    private func startStream(
        _ trigger: WireScheduleTrigger,
        requestID: UInt64,
        connection: AgentRequestRouter.Connection,
        fireAt: Int64,
        firedAt: Int64,
        reply: @escaping @Sendable (WireEnvelope.OneOf_Body) -> Void
    ) {
        reply(.triggerFired(WireTriggerFired(triggerID: trigger.triggerID, fireAt: fireAt, firedAt: firedAt)))
        let deviceID = trigger.deviceIds[0]
        streams.open(deviceID: deviceID, requestID: requestID, connection: connection, maxQueued: 8, notBefore: firstExposure(deviceID: deviceID, at: fireAt), reply: reply)
    }

    /// Waits (up to `timeout`) for captures already fired to be stored: a shutdown loses none of them.
    func drain(timeout: Duration = .seconds(10)) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.allStored() }
            group.addTask { try? await Task.sleep(for: timeout) }
            await group.next()
            group.cancelAll()
        }
    }

    /// Returns once no capture is in flight, or when the task is cancelled.
    private func allStored() async {
        let id = UUID()
        let state = self.state
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLockedValue { state -> Bool in
                    // Checked under the lock that the cancellation handler takes too: no wake-up is lost.
                    guard state.inFlight > 0, !Task.isCancelled else { return true }
                    state.drainWaiters[id] = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            state.withLockedValue { $0.drainWaiters.removeValue(forKey: id) }?.resume()
        }
    }

    /// The earliest exposure start a capture at `t` takes from `deviceID`: `t` itself, or half a grid
    /// period before it when a phase lock holds the camera on a grid (its frame for `t` starts within
    /// the lock's error of `t`, possibly just before it).
    func firstExposure(deviceID: String, at t: Int64) -> Int64 {
        guard let grid = phaseLocks.heldGrid(deviceID: deviceID) else { return t }
        return t - Int64((grid.period / 2).rounded())
    }
}
