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
    /// Each device's photos in flight, by device id.
    private let pipelines = NIOLockedValueBox<[String: DevicePhotoPipeline]>([:])
    /// Deferred photos waiting for their final.
    let deferred: DeferredPhotoStore
    /// When a photo last began or ended a stage (agent clock): deferred photos are made once the agent
    /// has been idle for `idleBeforeDeferred`.
    private let lastActivity = NIOLockedValueBox<Int64>(0)
    static let idleBeforeDeferred: Int64 = 1_000_000_000
    private let deferredWorker = NIOLockedValueBox<Task<Void, Never>?>(nil)
    /// How often making each deferred photo's final has failed.
    private let finalFailures = NIOLockedValueBox<[String: Int]>([:])

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
        self.deferred = DeferredPhotoStore(spoolDirectory: spool.directory)
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
        // Finals of deferred photos (also those left by an earlier run) are made while the agent is idle.
        let worker = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(200))
                guard let self, self.isIdle, let next = self.deferred.ids.first else { continue }
                do {
                    try await self.makeFinal(next)
                } catch {
                    // The others are made first; after three failures the photo's proxy becomes its final.
                    let failures = self.finalFailures.withLockedValue { $0[next, default: 0] += 1; return $0[next]! }
                    self.logger.error("cannot make a deferred photo's final", metadata: ["photo": "\(next)", "attempt": "\(failures)", "error": "\(error)"])
                    self.deferred.moveToBack(next)
                    if failures >= 3 {
                        let spool = self.spool
                        let deferred = self.deferred
                        _ = try? await self.spoolThread.runIfActive {
                            deferred.setAside(next)
                            _ = try Self.deliverProxyAsFinal(next, why: "its final could not be made (\(error))", spool: spool)
                        }
                    }
                    try? await Task.sleep(for: .seconds(1))
                }
            }
        }
        deferredWorker.withLockedValue { $0 = worker }
    }

    /// No capture stored or in a stage now, nor lately.
    private var isIdle: Bool {
        guard inFlight.withLockedValue({ $0 }) == 0, clock.now() - lastActivity.withLockedValue({ $0 }) >= Self.idleBeforeDeferred else { return false }
        return pipelines.withLockedValue { $0.values.allSatisfy(\.isIdle) }
    }

    private func touch() {
        let now = clock.now()
        lastActivity.withLockedValue { $0 = now }
    }

    /// The photo pipeline of `deviceID`.
    func pipeline(for deviceID: String) -> DevicePhotoPipeline {
        pipelines.withLockedValue { pipelines in
            if let existing = pipelines[deviceID] { return existing }
            let events = streams.devices.events
            let made = DevicePhotoPipeline { readiness in
                let (wire, text): (WireCaptureReadiness, String) =
                    switch readiness {
                    case .ready: (.ready, "ready")
                    case .waitingForCapture: (.notReadyWaitingForCapture, "not ready: a capture stage runs")
                    case .waitingForProcessing: (.notReadyWaitingForProcessing, "not ready: the previous photo is processed")
                    }
                events.publish(.captureReadiness, device: deviceID, message: "\(deviceID) capture readiness: \(text)") { $0.captureReadiness = wire }
            }
            pipelines[deviceID] = made
            return made
        }
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
        let triggerID = "photo-\(requestID)"
        guard streams.devices.discovery.device(uniqueID: capture.deviceID) != nil else {
            reply(.error(WireError(.deviceNotFound, agent: agentID, device: capture.deviceID, "agent \(agentID) has no device '\(capture.deviceID)'")))
            return
        }
        let frames = prepare([capture.deviceID], at: now, settings: capture.settings, triggerID: triggerID, reply: reply)
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
        if pending.trigger.action == .startStream {
            // Waiting for the first frame from T on keeps the camera running until the stream's own
            // subscriber joins at T. No photo: the photo pipeline is not involved.
            for deviceID in pending.trigger.deviceIds {
                let from = firstExposure(deviceID: deviceID, at: pending.trigger.fireAtNs)
                Task { _ = try? await self.streams.frames(deviceID: deviceID, selection: .from(from, count: 1), timeout: .seconds(5)) }
            }
            return
        }
        let frames = prepare(
            pending.trigger.deviceIds, at: pending.trigger.fireAtNs, settings: pending.trigger.photoSettings, triggerID: pending.trigger.triggerID,
            reply: pending.reply)
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
            await self.store(
                triggerID: trigger.triggerID, frames: frames, session: trigger.sessionID, settings: trigger.photoSettings, fireAt: trigger.fireAtNs,
                firedAt: firedAt, reply: pending.reply)
        }
    }

    /// Stops the scheduler; triggers that never fired are answered with `SHUTTING_DOWN`.
    func shutdown() {
        deferredWorker.withLockedValue { $0?.cancel() }
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
        /// Delivered as a proxy now, made in full later.
        let deferred: Bool
        let photoID: String
        /// An exposure bracket's biases (EV), one image each; empty for a single photo.
        let bracket: [Float]
        let pipeline: DevicePhotoPipeline
        let frames: Task<Captured, any Error>
    }

    /// A photo's capture stage's outcome: its frames (the reference first) and how long it waited to begin.
    struct Captured: Sendable {
        var frames: [CapturedFrame]
        var waited: Int64
        /// How a bracket moved the exposure (`nil` when not bracketed).
        var bracketMethod: CaptureDevice.BracketMethod?
    }

    /// Starts each device's capture stage for a photo at instant `t`: it waits for the device's previous
    /// capture (`DevicePhotoPipeline`), then takes the frames the photo's quality prioritization says
    /// (starting the camera if needed): the frame exposed nearest `t` (speed), the first exposed from `t`
    /// on (balanced), or several (quality): on a prepared camera the frame nearest `t` and those the
    /// camera exposed just before it (zero shutter lag), otherwise frames from `t` on. For a free-running
    /// camera held on a grid, "from `t` on" starts half a grid period before `t`.
    private func prepare(
        _ devices: [String], at t: Int64, settings: WirePhotoSettings, triggerID: String, reply: @escaping @Sendable (WireEnvelope.OneOf_Body) -> Void
    ) -> [PendingPhoto] {
        devices.map { deviceID in
            let device = streams.devices.discovery.device(uniqueID: deviceID)
            let output = device?.photoOutput ?? PhotoOutputSettings()
            var plan = PhotoPlan(
                requested: PhotoQualityPrioritization(settings.qualityPrioritization), output: PhotoOutputType(settings.outputType),
                maxDimensions: settings.maxPhotoDimensions.dimensions, format: device?.activeFormat, output: output)
            let previous = lastRequested.withLockedValue { last in
                defer { last[deviceID] = t }
                return last[deviceID]
            }
            if settings.fastCapturePrioritization, plan.level == .quality, let previous {
                let stage = Double(PhotoProcessing.qualityFrames) * Self.framePeriod(nil, device)
                if Double(t - previous) < stage { plan.stepDown(since: t - previous) }
            }
            let bracket = Array(settings.bracketExposureBiases.prefix(Self.maxBracket))
            if !bracket.isEmpty { plan.bracket(count: bracket.count) }
            let preparation = prepared.withLockedValue { $0[deviceID] }
            let pipeline = pipeline(for: deviceID)
            let deferred = output.deferredDelivery && plan.level == .quality
            let photoID = "\(agentID)-\(UUID().uuidString.lowercased())"
            let stages = StageReporter(
                enabled: settings.stageEvents, triggerID: triggerID, deviceID: deviceID, settingsID: settings.uniqueID, photoID: photoID, clock: clock,
                reply: reply)
            // Five seconds for the camera to start, plus the frames' own time at its slowest rate.
            let framesTime = Double(plan.frames) * (device?.activeMaxFrameDuration.seconds ?? 0)
            let timeout = Duration.seconds(5) + .milliseconds(Int64(framesTime * 1000))
            let announced = WireResolvedPhotoSettings(plan: plan, dimensions: plan.dimensions)
            let estimate = pipeline.estimate(level: plan.level)
            let task = Task { [plan] () throws -> Captured in
                stages.send(.willBeginCapture) {
                    $0.resolved = announced
                    $0.processingEstimateMinNs = estimate.min
                    $0.processingEstimateMaxNs = estimate.max
                }
                await pipeline.beginCapture(responsive: output.responsiveCapture)
                self.touch()
                let began = self.clock.now()
                // A capture that could not begin until after its instant takes its frames from when it began.
                let waited = began > t + 1_000_000 ? began - t : 0
                let instant = t + waited
                stages.send(.willCapture)
                do {
                    var method: CaptureDevice.BracketMethod?
                    let frames: [CapturedFrame]
                    if let device, !bracket.isEmpty {
                        (frames, method) = try await self.takeBracket(
                            deviceID: deviceID, device: device, biases: bracket, at: instant, after: pipeline.lastReference, timeout: timeout)
                    } else {
                        frames = try await self.takeFrames(
                            deviceID: deviceID, device: device, plan: plan, at: instant, after: pipeline.lastReference, preparation: preparation,
                            timeout: timeout)
                    }
                    pipeline.setLastReference(frames.map(\.exposureStart).max() ?? .min)
                    stages.send(.didCapture)
                    pipeline.endCapture(processing: !deferred)
                    self.touch()
                    stages.send(.didFinishCapture)
                    return Captured(frames: frames, waited: waited, bracketMethod: method)
                } catch {
                    pipeline.endCapture(processing: false)
                    throw error
                }
            }
            return PendingPhoto(
                deviceID: deviceID, plan: plan, prepared: preparation?.settings.contains { Self.matches(settings, $0) } ?? false, deferred: deferred,
                photoID: photoID, bracket: bracket, pipeline: pipeline, frames: task)
        }
    }

    /// The most images an exposure bracket takes.
    static let maxBracket = 16

    /// An exposure bracket's frames, one per bias: each the first frame exposed a frame period after its
    /// bias was applied (so the camera exposed it with that bias), the device's own exposure restored
    /// afterwards.
    private func takeBracket(
        deviceID: String, device: CaptureDevice, biases: [Float], at instant: Int64, after: Int64, timeout: Duration
    ) async throws -> ([CapturedFrame], CaptureDevice.BracketMethod) {
        var frames: [CapturedFrame] = []
        var method = CaptureDevice.BracketMethod.none
        var previous = max(after, instant - 1)
        // The camera streams for the whole bracket: a camera started again would expose with its own settings.
        let keepAlive = NewestFrameSink { _ in }
        if case .failed(let error) = streams.start(deviceID: deviceID, subscriber: keepAlive) { throw WireProtocolError(error.code, error.message) }
        defer { streams.stop(streamID: keepAlive.streamID, reason: .stopped) }
        do {
            for bias in biases {
                method = try device.applyExposureBracket(bias: bias)
                let applied = clock.now()
                let period = Int64(Self.framePeriod(frames.last, device))
                let frame = try await streams.frames(deviceID: deviceID, selection: .from(max(applied + period, previous + 1), count: 1), timeout: timeout)[0]
                frames.append(frame)
                previous = frame.exposureStart
            }
        } catch let error as DeviceError {
            try? device.endExposureBracket()
            throw WireProtocolError(.internal, "\(deviceID) could not take its exposure bracket: \(error)")
        } catch {
            try? device.endExposureBracket()
            throw error
        }
        try? device.endExposureBracket()
        return (frames, method)
    }

    /// The frames a photo at `instant` is made from, the reference first. The reference is always exposed
    /// after the previous photo's (`after`): photos asked for faster than the camera's frame rate take
    /// successive frames rather than the same one twice.
    private func takeFrames(
        deviceID: String, device: CaptureDevice?, plan: PhotoPlan, at instant: Int64, after: Int64, preparation: PreparedDevice?, timeout: Duration
    ) async throws -> [CapturedFrame] {
        let newest = preparation?.sink.newest
        let period = Self.framePeriod(newest, device)
        func nearest() async throws -> CapturedFrame {
            let candidate = try await streams.frames(deviceID: deviceID, selection: .nearest(instant, newest: newest, period: period), timeout: timeout)[0]
            guard candidate.exposureStart <= after else { return candidate }
            return try await streams.frames(deviceID: deviceID, selection: .from(after + 1, count: 1), timeout: timeout)[0]
        }
        switch plan.level {
        case .speed:
            return [try await nearest()]
        case .quality where preparation != nil:
            let reference = try await nearest()
            var frames = [reference] + preparation!.sink.recent(before: reference, count: plan.frames - 1)
            if frames.count < plan.frames {
                // A camera prepared moments ago has not exposed enough yet: the rest are its next frames.
                frames += try await streams.frames(
                    deviceID: deviceID, selection: .from(reference.exposureStart + 1, count: plan.frames - frames.count), timeout: timeout)
            }
            return frames
        case .balanced, .quality:
            let from = max(firstExposure(deviceID: deviceID, at: instant), after == .min ? .min : after + 1)
            return try await streams.frames(deviceID: deviceID, selection: .from(from, count: plan.frames), timeout: timeout)
        }
    }

    /// The earliest exposure start a capture at `t` takes from `deviceID`: `t` itself, or half a grid
    /// period before it when a phase lock holds the camera on a grid (its frame for `t` starts within
    /// the lock's error of `t`, possibly just before it).
    func firstExposure(deviceID: String, at t: Int64) -> Int64 {
        guard let grid = phaseLocks.heldGrid(deviceID: deviceID) else { return t }
        return t - Int64((grid.period / 2).rounded())
    }

    /// Stores the photo each device's capture stage delivers (or, deferred, its proxy), and reports the firing.
    private func store(
        triggerID: String, frames: [PendingPhoto], session: String, settings: WirePhotoSettings, fireAt: Int64, firedAt: Int64,
        reply: @escaping @Sendable (WireEnvelope.OneOf_Body) -> Void
    ) async -> WireEnvelope.OneOf_Body {
        var fired = WireTriggerFired(triggerID: triggerID, fireAt: fireAt, firedAt: firedAt)
        var failure: WireError?
        for pending in frames {
            let deviceID = pending.deviceID
            let stages = StageReporter(
                enabled: settings.stageEvents, triggerID: triggerID, deviceID: deviceID, settingsID: settings.uniqueID, photoID: pending.photoID,
                clock: clock, reply: reply)
            var processing = !pending.deferred
            do {
                let captured: Captured
                do {
                    captured = try await pending.frames.value
                } catch {
                    // The capture stage failed and closed itself: no processing stage follows.
                    processing = false
                    throw error
                }
                let agentID = self.agentID
                let spool = self.spool
                let deferred = self.deferred
                // Made, written and flushed on the spool's thread (the agent's processing stage, one photo at
                // a time): merging frames or an fsync held on one of the few cooperative threads would stall
                // every frame delivery and request of this process behind it.
                let made = try await spoolThread.runIfActive { () throws -> ([WirePhotoResult], Int64) in
                    let started = HostClock.monotonicNow()
                    var template = WirePhotoResult(
                        captured.frames[0], resultID: pending.photoID, sessionID: session, triggerID: triggerID, photoSettingsID: settings.uniqueID)
                    template.photoID = pending.photoID
                    template.resolved.prepared = pending.prepared
                    template.resolved.waitedNs = captured.waited
                    template.resolved.captureDurationNs = (captured.frames.map(\.exposureStart).max() ?? fireAt) - fireAt
                    if !pending.bracket.isEmpty {
                        // One image per bias, each its own photo and result.
                        var results: [WirePhotoResult] = []
                        for (index, (frame, bias)) in zip(captured.frames, pending.bracket).enumerated() {
                            var image = WirePhotoResult(
                                frame, resultID: "\(pending.photoID)-\(index + 1)", sessionID: session, triggerID: triggerID, photoSettingsID: settings.uniqueID)
                            image.photoID = image.resultID
                            image.resolved = template.resolved
                            image.resolved.captureDurationNs = frame.exposureStart - fireAt
                            var (final, file) = try Self.makeFinal(template: image, frames: [frame], plan: pending.plan, started: HostClock.monotonicNow())
                            final.resolved.bracketIndex = UInt32(index + 1)
                            final.resolved.exposureBias = bias
                            if let method = captured.bracketMethod {
                                let how = method == .none
                                    ? "this camera cannot bracket its automatic exposure (no target bias): the image is exposed as the others; set a custom exposure to bracket its duration"
                                    : "exposure bracket \(index + 1) of \(pending.bracket.count): \(String(format: "%+.1f", bias)) EV by its \(method.rawValue)"
                                final.resolved.note = final.resolved.note.isEmpty ? how : final.resolved.note + "; " + how
                            }
                            try spool.store(final, image: file)
                            results.append(final)
                        }
                        return (results, results.map(\.resolved.processingDurationNs).reduce(0, +))
                    }
                    if pending.deferred {
                        // The frames are kept for the final first: a crash from here on still makes it.
                        try deferred.save(DeferredPhotoStore.Job(template: template, frames: captured.frames, plan: pending.plan))
                        let proxy = try Self.proxy(template: template, reference: captured.frames[0], plan: pending.plan, started: started)
                        try spool.store(proxy.result, image: proxy.image)
                        return ([proxy.result], 0)
                    }
                    let final = try Self.makeFinal(template: template, frames: captured.frames, plan: pending.plan, started: started)
                    try spool.store(final.result, image: final.image)
                    return ([final.result], final.result.resolved.processingDurationNs)
                }
                for result in made.0 {
                    stages.send(.didFinishProcessing) { $0.resultID = result.resultID }
                    fired.resultIds.append(result.resultID)
                }
                if processing {
                    processing = false
                    pending.pipeline.endProcessing(level: pending.plan.level, duration: made.1)
                }
                touch()
                let used = spool.usedBytes
                if used * 10 >= spool.capacityBytes * 9 {
                    streams.devices.events.publish(.spoolNearFull, message: "result spool is \(used * 100 / max(spool.capacityBytes, 1))% full") {
                        $0.spool.usedBytes = used
                        $0.spool.capacityBytes = self.spool.capacityBytes
                        $0.spool.results = UInt32(self.spool.count)
                    }
                }
            } catch {
                // Every other device's photo is still stored (and its processing stage closed) before the
                // trigger is answered with the first failure; stored photos stay in the spool.
                if processing { pending.pipeline.endProcessing(level: pending.plan.level, duration: nil) }
                if failure == nil {
                    let code = (error as? WireProtocolError)?.code ?? .internal
                    let message = (error as? WireProtocolError)?.message ?? "\(error)"
                    failure = WireError(code, agent: agentID, device: deviceID, "trigger \(triggerID) on \(deviceID): \(message)")
                }
            }
        }
        if let failure { return .error(failure) }
        return .triggerFired(fired)
    }

    /// A photo made from its frames by its plan (the processing stage): merged, sized and encoded, with its
    /// resolved settings. `template` says what it is of; its result id becomes the photo id.
    static func makeFinal(template: WirePhotoResult, frames: [CapturedFrame], plan: PhotoPlan, started: Int64) throws -> (result: WirePhotoResult, image: ByteBuffer) {
        let merged = plan.level == .quality ? PhotoProcessing.merge(frames) : nil
        var photo = merged?.frame ?? frames[0]
        if plan.dimensions != photo.format.dimensions, let binned = PhotoProcessing.bin(photo) { photo = binned }
        let (file, pixelFormat) = try PhotoEncoder.encode(photo, as: plan.output, model: photo.deviceID)
        var result = template
        result.resultID = template.photoID
        let kept = template.resolved
        result.resolved = WireResolvedPhotoSettings(
            plan: plan, photo: photo, framesMerged: merged?.frames ?? 1, captureDuration: kept.captureDurationNs,
            processingDuration: HostClock.monotonicNow() - started)
        result.resolved.prepared = kept.prepared
        result.resolved.waitedNs = kept.waitedNs
        result.dimensions = WireDimensions(photo.format.dimensions)
        result.bytesPerLine = photo.format.bytesPerLine
        result.pixelFormat = pixelFormat.rawValue
        if pixelFormat != photo.format.pixelFormat { result.bytesPerLine = 0 }
        return (result, file)
    }

    /// A deferred photo's proxy: its reference frame, binned to half size where the format allows,
    /// delivered as the plan's output, under the photo id with ".proxy" appended.
    static func proxy(template: WirePhotoResult, reference: CapturedFrame, plan: PhotoPlan, started: Int64) throws -> (result: WirePhotoResult, image: ByteBuffer) {
        let photo = PhotoProcessing.bin(reference) ?? reference
        let (file, pixelFormat) = try PhotoEncoder.encode(photo, as: plan.output, model: photo.deviceID)
        var result = template
        result.resultID = template.photoID + ".proxy"
        var resolved = WireResolvedPhotoSettings(
            plan: plan, photo: photo, framesMerged: 1, captureDuration: template.resolved.captureDurationNs,
            processingDuration: HostClock.monotonicNow() - started)
        resolved.prepared = template.resolved.prepared
        resolved.waitedNs = template.resolved.waitedNs
        resolved.deferredProxy = true
        let why = "deferred: a proxy of the reference frame; the final (\(plan.level), \(plan.dimensions)) comes later under photo id \(template.photoID)"
        resolved.note = resolved.note.isEmpty ? why : resolved.note + "; " + why
        result.resolved = resolved
        result.dimensions = WireDimensions(photo.format.dimensions)
        result.bytesPerLine = pixelFormat == photo.format.pixelFormat ? photo.format.bytesPerLine : 0
        result.pixelFormat = pixelFormat.rawValue
        return (result, file)
    }

    /// Makes a deferred photo's final now, on the spool's thread, unless it is made already.
    func makeFinal(_ photoID: String) async throws {
        let deferred = self.deferred
        let spool = self.spool
        let made: (PhotoQualityPrioritization, Int64)? = try await spoolThread.runIfActive {
            guard deferred.contains(photoID) else { return nil }
            if spool.contains(photoID) {
                // Made before a crash that came before its frames were deleted.
                deferred.remove(photoID)
                return nil
            }
            let job: DeferredPhotoStore.Job
            do {
                job = try deferred.load(photoID)
            } catch {
                deferred.setAside(photoID)
                let why = "the saved frames of deferred photo \(photoID) cannot be read (\(error)); set aside"
                // Its final is its proxy, when the spool still holds that: the capture gets a photo either way.
                if (try? Self.deliverProxyAsFinal(photoID, why: why, spool: spool)) == true { return nil }
                throw WireProtocolError(.internal, why + "; its proxy, fetched already, stays the photo")
            }
            let final = try Self.makeFinal(template: job.template, frames: job.frames, plan: job.plan, started: HostClock.monotonicNow())
            try spool.store(final.result, image: final.image)
            deferred.remove(photoID)
            return (job.plan.level, final.result.resolved.processingDurationNs)
        }
        if let (level, duration) = made, let deviceID = spool.pending(session: "").first(where: { $0.resultID == photoID })?.deviceID {
            pipeline(for: deviceID).record(level: level, duration: duration)
        }
    }

    /// Stores a deferred photo's proxy again as its final (under the photo id), saying why, when the final
    /// cannot be made; `false` when the spool no longer holds the proxy.
    static func deliverProxyAsFinal(_ photoID: String, why: String, spool: ResultSpool) throws -> Bool {
        guard let proxy = spool.pending(session: "").first(where: { $0.resultID == photoID + ".proxy" }) else { return false }
        let image = try spool.image(of: proxy)
        var final = proxy
        final.resultID = photoID
        final.resolved.deferredProxy = false
        let note = why + "; delivered as its proxy"
        final.resolved.note = final.resolved.note.isEmpty ? note : final.resolved.note + "; " + note
        try spool.store(final, image: image)
        return true
    }

    /// `FinalizePhotos`: makes the named deferred photos' finals now (every deferred photo when none is named).
    func finalize(_ ids: [String]) async -> WireEnvelope.OneOf_Body {
        let wanted = ids.isEmpty ? deferred.ids : ids
        var unknown: [String] = []
        for id in wanted {
            guard deferred.contains(id) else {
                if !spool.contains(id) { unknown.append(id) }
                continue
            }
            do {
                try await makeFinal(id)
            } catch {
                return .error(WireError(.internal, agent: agentID, "cannot make deferred photo \(id): \(error)"))
            }
        }
        guard unknown.isEmpty else {
            let named = unknown.prefix(8).map { "'\($0)'" }.joined(separator: ", ")
            return .error(WireError(.notFound, agent: agentID, "agent \(agentID) defers no photo \(named) and holds no final of it (made and acknowledged already, or never taken here)"))
        }
        return .ok(WireOk())
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

/// Sends a photo's stage events on its capture's request, when the capture asked for them.
struct StageReporter: Sendable {
    let enabled: Bool
    let triggerID: String
    let deviceID: String
    let settingsID: UInt64
    let photoID: String
    let clock: HostClock
    let reply: @Sendable (WireEnvelope.OneOf_Body) -> Void

    func send(_ stage: WirePhotoStage, _ fill: (inout WirePhotoStageEvent) -> Void = { _ in }) {
        guard enabled else { return }
        var event = WirePhotoStageEvent()
        event.triggerID = triggerID
        event.deviceID = deviceID
        event.stage = stage
        event.timeNs = clock.now()
        event.photoSettingsID = settingsID
        event.photoID = photoID
        fill(&event)
        reply(.photoStage(event))
    }
}
