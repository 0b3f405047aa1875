import CamRigClock
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
public final class AgentCapture: Sendable {
    let streams: AgentStreams
    let phaseLocks: AgentPhaseLocks
    public let spool: ResultSpool
    /// Where photos are written (the spool's one thread, shared with fetching and acknowledging).
    private let spoolThread: NIOThreadPool
    let agentID: String
    var clock: HostClock { streams.devices.clock }
    /// How long before a trigger's instant its cameras are started.
    static let prepareNanoseconds: Int64 = 100_000_000
    /// How long before a trigger's instant the scheduler stops sleeping and spins.
    static let spinNanoseconds: Int64 = 300_000
    private let scheduler: TriggerScheduler<PendingTrigger>
    /// Captures between firing and being stored.
    private let inFlight = NIOLockedValueBox(0)
    /// When each device's latest photo was requested (agent clock), for fast capture prioritization.
    private let lastRequested = NIOLockedValueBox<[String: Int64]>([:])
    /// Devices prepared for photos (`PreparePhotoSettings`), by device id.
    private let prepared = NIOLockedValueBox<[String: PreparedDevice]>([:])

    /// A device prepared for photos: the settings it was prepared with, and the sink that keeps its
    /// camera streaming with the newest frame at hand.
    struct PreparedDevice: Sendable {
        let settings: [WirePhotoSettings]
        let sink: NewestFrameSink
    }
    private let logger: Logger

    /// A trigger between being scheduled and firing; the frames it waits for are found when it is prepared.
    final class PendingTrigger: Sendable {
        let trigger: WireScheduleTrigger
        let requestID: UInt64
        let connection: AgentRequestRouter.Connection
        let reply: @Sendable (WireEnvelope.OneOf_Body) -> Void
        let frames = NIOLockedValueBox<[PendingPhoto]>([])

        init(
            trigger: WireScheduleTrigger,
            requestID: UInt64,
            connection: AgentRequestRouter.Connection,
            reply: @escaping @Sendable (WireEnvelope.OneOf_Body) -> Void
        ) {
            self.trigger = trigger
            self.requestID = requestID
            self.connection = connection
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
        // The scheduler's callbacks reach this object (weakly: the scheduler is part of it) once it
        // exists; they run on the scheduler's thread.
        let owner = NIOLockedValueBox(WeakReference<AgentCapture>())
        scheduler = TriggerScheduler(
            clock: streams.devices.clock,
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
            prepare: { pending in owner.withLockedValue { $0.value }?.prepare(pending) },
            fire: { pending, firedAt in owner.withLockedValue { $0.value }?.fire(pending, firedAt: firedAt) }
        )
        owner.withLockedValue { $0.value = self }
    }

    /// Starts the trigger scheduler's thread (when the agent starts serving).
    func start() {
        scheduler.start()
    }

    /// Runs `store` in a task, counted in flight from now so that `drain()` waits for it.
    private func storeInTask(_ reply: @escaping @Sendable (WireEnvelope.OneOf_Body) -> Void, _ store: @escaping @Sendable () async -> WireEnvelope.OneOf_Body) {
        inFlight.withLockedValue { $0 += 1 }
        Task {
            reply(await store())
            self.inFlight.withLockedValue { $0 -= 1 }
        }
    }

    /// Answers a photo taken now.
    func capturePhoto(_ capture: WireCapturePhoto, requestID: UInt64, reply: @escaping @Sendable (WireEnvelope.OneOf_Body) -> Void) {
        let now = clock.now()
        let frames = prepare([capture.deviceID], at: now, settings: capture.settings)
        storeInTask(reply) {
            await self.store(triggerID: "photo-\(requestID)", frames: frames, session: capture.sessionID, settings: capture.settings, fireAt: now, firedAt: now)
        }
    }

    /// Prepares a device for photos with `request.settings`, or releases it when there are none; on the
    /// device queue. The camera streams from now on, so matching captures pay no start.
    func prepare(_ request: WirePreparePhotoSettings) -> WireEnvelope.OneOf_Body {
        let deviceID = request.deviceID
        guard streams.devices.discovery.device(uniqueID: deviceID) != nil else {
            return .error(WireError(.deviceNotFound, agent: agentID, device: deviceID, "agent \(agentID) has no device '\(deviceID)' to prepare"))
        }
        let previous = prepared.withLockedValue { $0[deviceID] }
        if request.settings.isEmpty {
            if let previous {
                prepared.withLockedValue { _ = $0.removeValue(forKey: deviceID) }
                streams.stop(streamID: previous.sink.streamID, reason: .stopped)
            }
            return .ok(WireOk())
        }
        if let previous {
            prepared.withLockedValue { $0[deviceID] = PreparedDevice(settings: request.settings, sink: previous.sink) }
            return .ok(WireOk())
        }
        let sink = NewestFrameSink { [weak self] ended in
            // The device vanished or failed, or the agent stops: the preparation ends with its stream.
            self?.prepared.withLockedValue { if $0[deviceID]?.sink === ended { $0.removeValue(forKey: deviceID) } }
        }
        if case .failed(let error) = streams.start(deviceID: deviceID, subscriber: sink) { return .error(error) }
        prepared.withLockedValue { $0[deviceID] = PreparedDevice(settings: request.settings, sink: sink) }
        return .ok(WireOk())
    }

    /// A camera's frame period in nanoseconds: as measured on its frames, or else its fastest configured rate's.
    static func framePeriod(_ frame: CapturedFrame?, _ device: CaptureDevice?) -> Double {
        if let measured = frame?.measuredFramePeriod, measured > 0 { return measured }
        return Double(device?.activeMinFrameDuration.nanoseconds ?? 0)
    }

    /// Whether a capture with `settings` matches settings a device was prepared with: the same quality
    /// prioritization, output type and size (a capture's unique id is always its own).
    static func matches(_ settings: WirePhotoSettings, _ prepared: WirePhotoSettings) -> Bool {
        settings.qualityPrioritization == prepared.qualityPrioritization && settings.outputType == prepared.outputType
            && settings.maxPhotoDimensions == prepared.maxPhotoDimensions
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
        let pending = PendingTrigger(trigger: trigger, requestID: requestID, connection: connection, reply: reply)
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
        let frames = prepare(pending.trigger.deviceIds, at: pending.trigger.fireAtNs, settings: pending.trigger.photoSettings)
        pending.frames.withLockedValue { $0 = frames }
    }

    /// At T, on the scheduler's thread: hands the trigger's work to a task or the device queue.
    private func fire(_ pending: PendingTrigger, firedAt: Int64) {
        let trigger = pending.trigger
        if trigger.action == .startStream {
            startStream(trigger, requestID: pending.requestID, connection: pending.connection, fireAt: trigger.fireAtNs, firedAt: firedAt, reply: pending.reply)
            return
        }
        let frames = pending.frames.withLockedValue { $0 }
        storeInTask(pending.reply) {
            await self.store(triggerID: trigger.triggerID, frames: frames, session: trigger.sessionID, settings: trigger.photoSettings, fireAt: trigger.fireAtNs, firedAt: firedAt)
        }
    }

    /// Stops the scheduler; triggers that never fired are answered with `SHUTTING_DOWN`.
    func shutdown() {
        for pending in scheduler.shutdown() {
            pending.reply(.error(WireError(.shuttingDown, agent: agentID, "agent \(agentID) shut down before trigger \(pending.trigger.triggerID) fired")))
        }
    }

    /// A device's part of a photo between being prepared and being stored.
    struct PendingPhoto: Sendable {
        let deviceID: String
        let plan: PhotoPlan
        /// Whether the device was prepared with matching settings.
        let prepared: Bool
        let frames: Task<[CapturedFrame], any Error>
    }

    /// Starts waiting for each device's frames for a photo at instant `t` (starting its stream if
    /// needed), as the photo's quality prioritization says: the frame exposed nearest `t` (speed), the
    /// first exposed from `t` on (balanced), or several from `t` on (quality). For a free-running camera
    /// held on a grid, "from `t` on" starts half a grid period before `t`.
    private func prepare(_ devices: [String], at t: Int64, settings: WirePhotoSettings) -> [PendingPhoto] {
        devices.map { deviceID in
            let device = streams.devices.discovery.device(uniqueID: deviceID)
            var plan = PhotoPlan(
                requested: PhotoQualityPrioritization(settings.qualityPrioritization), output: PhotoOutputType(settings.outputType),
                maxDimensions: settings.maxPhotoDimensions.dimensions, format: device?.activeFormat)
            let previous = lastRequested.withLockedValue { last in
                defer { last[deviceID] = t }
                return last[deviceID]
            }
            if settings.fastCapturePrioritization, plan.level == .quality, let previous {
                let stage = Double(PhotoProcessing.qualityFrames) * Self.framePeriod(nil, device)
                if Double(t - previous) < stage { plan.stepDown(since: t - previous) }
            }
            let preparation = prepared.withLockedValue { $0[deviceID] }
            let selection: FrameSelection =
                plan.level == .speed
                ? .nearest(t, newest: preparation?.sink.newest, period: Self.framePeriod(preparation?.sink.newest, device))
                : .from(firstExposure(deviceID: deviceID, at: t), count: plan.frames)
            // Five seconds for the camera to start, plus the frames' own time at its slowest rate.
            let framesTime = Double(plan.frames) * (device?.activeMaxFrameDuration.seconds ?? 0)
            let timeout = Duration.seconds(5) + .milliseconds(Int64(framesTime * 1000))
            return PendingPhoto(
                deviceID: deviceID, plan: plan, prepared: preparation?.settings.contains { Self.matches(settings, $0) } ?? false, frames: Task { try await self.streams.frames(deviceID: deviceID, selection: selection, timeout: timeout) })
        }
    }

    /// The earliest exposure start a capture at `t` takes from `deviceID`: `t` itself, or half a grid
    /// period before it when a phase lock holds the camera on a grid (its frame for `t` starts within
    /// the lock's error of `t`, possibly just before it).
    func firstExposure(deviceID: String, at t: Int64) -> Int64 {
        guard let grid = phaseLocks.heldGrid(deviceID: deviceID) else { return t }
        return t - Int64((grid.period / 2).rounded())
    }

    /// Stores the photo each device's frame task delivers, and reports the firing.
    private func store(triggerID: String, frames: [PendingPhoto], session: String, settings: WirePhotoSettings, fireAt: Int64, firedAt: Int64) async -> WireEnvelope.OneOf_Body {
        var fired = WireTriggerFired(triggerID: triggerID, fireAt: fireAt, firedAt: firedAt)
        for pending in frames {
            let deviceID = pending.deviceID
            do {
                let taken = try await pending.frames.value
                let agentID = self.agentID
                let spool = self.spool
                // Processed, written and flushed on the spool's thread (the agent's processing stage, one
                // photo at a time): merging frames or an fsync held on one of the few cooperative threads
                // would stall every frame delivery and request of this process behind it.
                let result = try await spoolThread.runIfActive {
                    let started = HostClock.monotonicNow()
                    var photo = pending.plan.level == .quality ? PhotoProcessing.merge(taken).frame : taken[0]
                    if pending.plan.dimensions != photo.format.dimensions, let binned = PhotoProcessing.bin(photo) {
                        photo = binned
                    }
                    let (file, pixelFormat) = try PhotoEncoder.encode(photo, as: pending.plan.output, model: photo.deviceID)
                    var result = WirePhotoResult(
                        photo,
                        resultID: "\(agentID)-\(UUID().uuidString.lowercased())",
                        sessionID: session,
                        triggerID: triggerID,
                        photoSettingsID: settings.uniqueID
                    )
                    result.resolved = WireResolvedPhotoSettings(
                        plan: pending.plan, photo: photo, framesMerged: taken.count,
                        captureDuration: (taken.last?.exposureStart ?? fireAt) - fireAt,
                        processingDuration: HostClock.monotonicNow() - started)
                    result.resolved.prepared = pending.prepared
                    if pixelFormat != photo.format.pixelFormat {
                        result.pixelFormat = pixelFormat.rawValue
                        result.bytesPerLine = 0
                    }
                    try spool.store(result, image: file)
                    return result
                }
                fired.resultIds.append(result.resultID)
                let used = spool.usedBytes
                if used * 10 >= spool.capacityBytes * 9 {
                    streams.devices.events.publish(.spoolNearFull, message: "result spool is \(used * 100 / max(spool.capacityBytes, 1))% full") {
                        $0.spool.usedBytes = used
                        $0.spool.capacityBytes = self.spool.capacityBytes
                        $0.spool.results = UInt32(self.spool.count)
                    }
                }
            } catch let failure as WireProtocolError {
                return .error(WireError(failure.code, agent: agentID, device: deviceID, "trigger \(triggerID) on \(deviceID): \(failure.message)"))
            } catch {
                return .error(WireError(.internal, agent: agentID, device: deviceID, "trigger \(triggerID) on \(deviceID): \(error)"))
            }
        }
        return .triggerFired(fired)
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
        let deadline = ContinuousClock.now + timeout
        while inFlight.withLockedValue({ $0 }) > 0 && ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(10))
        }
    }
}

/// A reference that does not keep its object alive.
struct WeakReference<Object: AnyObject & Sendable>: Sendable {
    weak var value: Object?
}
