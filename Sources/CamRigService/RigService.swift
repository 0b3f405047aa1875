import CamRigCapture
import CamRigClock
import CamRigCoordinator
import CamRigSecurity
import CamRigDevices
import CamRigStorage
import CamRigViews
import CamRigWire
import CamRigWireModel
import Foundation
import Logging
import NIOConcurrencyHelpers
import ServiceLifecycle

/// The coordinator kept running: the rig's agents stay connected and their clocks measured, every camera
/// stays in one committed, phase-locked session, and captures, settings and previews are served from it.
///
/// `RigSupervisor` decides (when to rebuild the session, relock, what to publish, what may run now);
/// this actor looks at the rig once a second (`run`), hands the supervisor what it saw, and carries
/// out its actions on the session. Captures run as jobs of `jobs`, a service of the same group;
/// their records are kept in a `JobTable`.
public actor RigService {
    public struct Configuration: Sendable {
        public var capturesDirectory: URL
        /// Phase-lock free-running cameras onto one frame grid, with this tolerance.
        public var phaseLock = true
        public var lockTolerance: Duration = .microseconds(100)
        /// How often the rig is looked at.
        public var supervisionInterval: Duration = .seconds(1)
        /// How long after a failed session build the next is tried.
        public var rebuildBackoff: Duration = .seconds(5)
        /// Samples of clock history kept per agent (one per supervision pass).
        public var historyLength = 300

        public init(capturesDirectory: URL) {
            self.capturesDirectory = capturesDirectory
        }
    }

    /// What the routes and metrics read of the service, taken at one moment.
    public struct State: Sendable {
        public var session: RigSession?
        public var sessionError: String?
        public var sessionCommitted: Date?
        public var devices: [RigDevice]
        public var phases: [String: CameraPhase]
        public var spools: [String: WireSpoolStatus]
        public var droppedFrames: [String: Int]
        public var runningJob: String?
    }

    public nonisolated let pool: AgentPool
    public nonisolated let events: EventHub
    public nonisolated let previews: PreviewHub
    public nonisolated let store: CaptureStore
    public nonisolated let configuration: Configuration
    public nonisolated let metrics: ServiceMetrics
    /// Where capture jobs run: a service of the group (`services`).
    public nonisolated let jobs: JobRunner
    private let logger: Logger

    private var supervisor: RigSupervisor
    private var jobTable = JobTable()
    public private(set) var session: RigSession?
    public private(set) var sessionCommitted: Date?
    public private(set) var devices: [RigDevice] = []
    public private(set) var phases: [String: CameraPhase] = [:]
    public private(set) var history: [String: [ClockHistorySample]] = [:]
    /// Each agent's result spool as it last reported it.
    public private(set) var spools: [String: WireSpoolStatus] = [:]
    private var lastSpoolPoll = ContinuousClock.now - .seconds(60)
    private var spoolsAsked: Set<String> = []
    /// Frames each camera dropped in the captures this service made.
    public private(set) var droppedFrames: [String: Int] = [:]
    public nonisolated let started = Date()

    public init(pool: AgentPool, configuration: Configuration, metrics: ServiceMetrics = ServiceMetrics(), logger: Logger) throws {
        self.pool = pool
        self.configuration = configuration
        self.metrics = metrics
        self.logger = logger
        self.events = EventHub()
        self.previews = PreviewHub(logger: logger)
        self.jobs = JobRunner()
        self.store = try CaptureStore(root: configuration.capturesDirectory)
        supervisor = RigSupervisor(configuration: .init(rebuildBackoff: configuration.rebuildBackoff))
    }

    /// The service's parts for a `ServiceGroup`, in start order (shutdown runs the other way: previews and
    /// jobs end, awaited, before the supervision releases the session).
    public nonisolated var services: [any Service] { [RigServiceRunner(self), jobs, previews] }

    public var sessionError: String? { supervisor.sessionError }
    public var jobList: [CaptureJob] { jobTable.jobs }
    public func job(_ id: String) -> CaptureJob? { jobTable.job(id) }

    public func state() -> State {
        State(
            session: session, sessionError: supervisor.sessionError, sessionCommitted: sessionCommitted, devices: devices, phases: phases,
            spools: spools, droppedFrames: droppedFrames, runningJob: jobTable.running?.id)
    }

    // MARK: Supervision

    /// Looks after the rig until cancelled, then releases the session.
    public func run() async {
        pool.start()
        events.publish(.serviceStarted(agents: pool.agents.count))
        while !Task.isCancelled {
            await supervise()
            try? await Task.sleep(for: configuration.supervisionInterval)
        }
        await shutdown()
    }

    /// Releases every lease and stops watching; agents keep their cameras' configuration.
    public func shutdown() async {
        previews.stopAll()
        if let session { await session.stop() }
        session = nil
        supervisor.sessionStopped()
        events.publish(.serviceStopped)
        events.finishAll()
        await pool.stop()
    }

    /// One look at the rig.
    func supervise() async {
        let now = Date().timeIntervalSince1970
        var agents: [RigSupervisor.AgentObservation] = []
        for agent in pool.agents {
            let snapshot = agent.snapshot
            var reason: String?
            if case .down(let why, _) = snapshot.status { reason = why }
            agents.append(
                .init(
                    name: snapshot.name, endpoint: snapshot.endpoint.description, status: snapshot.status.name, reason: reason,
                    connectedSince: snapshot.connectedSince))
            var sample = ClockHistorySample(time: now)
            if let clock = snapshot.clock {
                sample.offsetUs = clock.offsetNanoseconds / 1000
                sample.errorBoundUs = clock.errorBoundNanoseconds / 1000
                sample.driftPpm = clock.driftPPM
            }
            // The latest probe's round trip, else the estimate's lowest.
            sample.roundTripUs = (snapshot.recentRoundTrips.last ?? snapshot.clock?.minimumRoundTrip).map { Double($0) / 1000 }
            history[snapshot.name, default: []].append(sample)
            if let count = history[snapshot.name]?.count, count > configuration.historyLength { history[snapshot.name]?.removeFirst() }
        }
        await refreshDevices()
        // An agent just connected is asked at once, the others every 5 s.
        let unknownSpool = pool.agents.contains { $0.snapshot.status == .connected && !spoolsAsked.contains($0.name) }
        if unknownSpool || ContinuousClock.now - lastSpoolPoll >= .seconds(5) {
            lastSpoolPoll = ContinuousClock.now
            await pollSpools()
        }
        await refreshPhases()
        let observed = devices.map { device in
            RigSupervisor.DeviceObservation(
                name: device.name, agent: device.agentID, localizedName: device.description.localizedName, connected: device.description.connected,
                lease: device.description.hasLease ? device.description.lease.holder : nil, phase: phases[device.name]?.stateName ?? "unlocked")
        }
        let actions = supervisor.observe(.init(agents: agents, devices: observed, now: .now))
        await perform(actions)
    }

    private func perform(_ actions: [RigSupervisor.Action]) async {
        for action in actions {
            switch action {
            case .emit(let event):
                events.publish(event)
            case .rebuildSession(let cameras):
                let outcome = await rebuildSession(over: cameras)
                await perform(outcome)
            case .relock:
                if let session { await relock(session) }
                supervisor.end(.relocking)
            }
        }
    }

    private func refreshPhases() async {
        guard let session else {
            phases = [:]
            return
        }
        var byName: [String: CameraPhase] = [:]
        for phase in await session.phaseStatus() { byName[phase.camera] = phase }
        phases = byName
    }

    /// Asks every connected agent how full its result spool is.
    private func pollSpools() async {
        let agents = pool.agents.filter { $0.snapshot.status == .connected }
        let statuses = await withTaskGroup(of: (String, WireSpoolStatus?).self) { group in
            for agent in agents {
                group.addTask {
                    guard let client = try? agent.client(),
                        case .spoolStatus(let status)? = try? await client.request(.getSpoolStatus(WireGetSpoolStatus()), timeout: .seconds(2)).frame.envelope.body
                    else { return (agent.name, nil) }
                    return (agent.name, status)
                }
            }
            var statuses: [(String, WireSpoolStatus?)] = []
            for await status in group { statuses.append(status) }
            return statuses
        }
        for (name, status) in statuses { spools[name] = status }
        spoolsAsked = Set(agents.map(\.name))
    }

    /// Lists every connected agent's cameras.
    func refreshDevices() async {
        devices = await RigDiscovery.devices(in: pool).devices
    }

    /// Builds the session anew over `cameras`; returns what the supervisor makes of the outcome.
    private func rebuildSession(over cameras: Set<String>) async -> [RigSupervisor.Action] {
        if let old = session {
            // Nothing may start on a session being stopped.
            session = nil
            await old.stop()
        }
        var connectedSince: [String: Date] = [:]
        for agent in pool.agents {
            let snapshot = agent.snapshot
            if snapshot.status == .connected, let since = snapshot.connectedSince { connectedSince[snapshot.name] = since }
        }
        do {
            let session = RigSession(pool: pool, logger: logger)
            var added: [String] = []
            var skipped: [String] = []
            for device in devices where cameras.contains(device.name) {
                let availability = await session.canAddInput(device)
                if let reason = availability.reason {
                    skipped.append("\(device.name): \(reason)")
                    continue
                }
                try await session.addInput(device)
                added.append(device.name)
            }
            guard !added.isEmpty else {
                throw ServiceError(.conflict, "no camera can join the session: " + skipped.joined(separator: "; "))
            }
            await session.addPhotoOutput()
            await session.addFrameOutput()
            await session.beginConfiguration()
            await session.setPreset(.inputPriority)
            try await session.commitConfiguration()
            if configuration.phaseLock {
                do {
                    _ = try await session.lockPhase(tolerance: configuration.lockTolerance)
                } catch {
                    logger.warning("phase lock not possible; captures take each camera's first frame from T on", metadata: ["reason": "\(error)"])
                }
            }
            self.session = session
            sessionCommitted = Date()
            let agents = connectedSince.filter { name, _ in added.contains { $0.hasPrefix(name + "/") } }
            await refreshDevices()
            return supervisor.sessionCommitted(id: session.id, added: added, skipped: skipped, agents: agents)
        } catch {
            let reason = Self.message(error)
            logger.warning("session could not be committed", metadata: ["error": "\(reason)"])
            return supervisor.sessionFailed(reason: reason, now: .now)
        }
    }

    // MARK: Queries

    public func device(named name: String) throws -> RigDevice {
        guard let device = RigDiscovery.find(name, in: devices) else {
            throw ServiceError(.notFound, device: name, "no camera '\(name)' on the rig's connected agents (GET /api/v1/devices lists them)")
        }
        return device
    }

    // MARK: Settings

    /// Applies `key=value` settings (as `camrig device set` takes them) to a camera of the session, under
    /// the session's lease on it; returns the camera's state after.
    public func apply(settings: [String], to name: String, by access: Access) async throws -> RigDevice {
        let device = try device(named: name)
        guard let session, await session.inputs.contains(where: { $0.name == device.name }) else {
            throw ServiceError(
                .conflict, agent: device.agentID, device: device.name,
                "camera \(device.name) is not in the service's session" + (supervisor.sessionError.map { " (\($0))" } ?? "")
                    + "; it joins when it is connected and not locked by another client")
        }
        let change: WireConfigure
        do {
            change = try DeviceSettingsParser.parse(settings, photoOutput: device.description.state.photoOutput)
        } catch {
            throw ServiceError(.badRequest, agent: device.agentID, device: device.name, "\(error)")
        }
        let activity = RigActivity.changingSettings(device: device.name)
        if let refusal = supervisor.begin(activity) {
            throw ServiceError(.conflict, agent: device.agentID, device: device.name, "\(refusal); change settings when it has finished")
        }
        defer { supervisor.end(activity) }
        do {
            try await reconfigure(session, quiesce: change.hasFormatID || change.hasMinFrameDuration) {
                await session.beginConfiguration()
                await session.setControls(of: device.name, change)
                try await session.commitConfiguration()
            }
        } catch {
            throw ServiceError(.conflict, agent: device.agentID, device: device.name, Self.message(error))
        }
        await refreshDevices()
        events.publish(.deviceSettings(agent: device.agentID, device: device.name, settings: settings.joined(separator: " "), by: access.name))
        return try self.device(named: name)
    }

    /// Runs a configuration change; with `quiesce` (a format or rate change), the cameras are first
    /// released from the phase lock and the previews paused (a camera cannot change format while it
    /// streams), and locked again after.
    private func reconfigure(_ session: RigSession, quiesce: Bool, _ change: () async throws -> Void) async throws {
        guard quiesce else { return try await change() }
        let locked = await session.phaseGrid != nil
        if locked { await session.unlockPhase() }
        await previews.pause()
        var failure: (any Error)?
        do { try await change() } catch { failure = error }
        previews.resume()
        if locked, configuration.phaseLock { await relock(session) }
        if let failure { throw failure }
    }

    /// Puts the cameras back on the frame grid; the supervisor says what a failure means (an event, the
    /// session's error, another try in 10 s).
    private func relock(_ session: RigSession) async {
        let outcome: [RigSupervisor.Action]
        do {
            _ = try await session.lockPhase(tolerance: configuration.lockTolerance)
            outcome = supervisor.relocked()
        } catch {
            outcome = supervisor.relockFailed(reason: Self.message(error), now: .now)
        }
        for case .emit(let event) in outcome { events.publish(event) }
    }

    // MARK: Captures

    /// Starts a synchronized photo of every camera of the session; its progress is the returned job.
    public func startPhoto(_ request: PhotoRequest, by access: Access) throws -> CaptureJob {
        let settings = try Self.photoSettings(request)
        let session = try sessionForCapture()
        let job = try begin(.photo, access: access)
        let store = self.store
        let previews = self.previews
        submit(job) { service in
            // Previews pause for the photo: a camera that can be triggered exposes at the instant only
            // when it is not already streaming for someone's preview.
            await previews.pause()
            defer { previews.resume() }
            await service.progress(job.id, 0.1, "firing every camera at one instant")
            return try await session.capturePhoto(into: store, settings: settings)
        }
        return job
    }

    /// The photo settings `request` asks for, or why they cannot be had.
    static func photoSettings(_ request: PhotoRequest) throws -> WirePhotoSettings {
        var settings = WirePhotoSettings()
        switch request.quality ?? "balanced" {
        case "speed": settings.qualityPrioritization = .speed
        case "balanced": settings.qualityPrioritization = .balanced
        case "quality": settings.qualityPrioritization = .quality
        case let other: throw ServiceError(.badRequest, "quality '\(other)' is not one of speed, balanced, quality")
        }
        switch request.output ?? "frame" {
        case "frame": settings.outputType = .frame
        case "jpeg": settings.outputType = .jpeg
        case "dng": settings.outputType = .dng
        case let other: throw ServiceError(.badRequest, "output '\(other)' is not one of frame, jpeg, dng")
        }
        if let bracket = request.bracket {
            guard bracket.count <= 16, bracket.allSatisfy({ (-8...8).contains($0) }) else {
                throw ServiceError(.badRequest, "bracket takes at most 16 biases within -8…8 EV")
            }
            settings.bracketExposureBiases = bracket
        }
        settings.uniqueID = UInt64.random(in: 1...UInt64.max)
        return settings
    }

    /// What a recording request asks for, or why it cannot be had.
    static func recording(_ request: RecordRequest) throws -> (rate: FrameDuration?, dimensions: Dimensions?) {
        guard request.duration > 0, request.duration <= 600 else { throw ServiceError(.badRequest, "duration must be within (0, 600] seconds") }
        var rate: FrameDuration?
        if let fps = request.fps {
            guard fps >= 1, fps <= 240, fps == fps.rounded() else { throw ServiceError(.badRequest, "fps must be a whole number within 1…240") }
            rate = FrameDuration(framesPerSecond: UInt32(fps))
        }
        var dimensions: Dimensions?
        if let size = request.size {
            let parts = size.lowercased().split(separator: "x", omittingEmptySubsequences: false)
            guard parts.count == 2, let width = DeviceSettingsParser.positive(parts[0]), let height = DeviceSettingsParser.positive(parts[1]) else {
                throw ServiceError(.badRequest, "size '\(size)' is not WxH, e.g. 640x480")
            }
            dimensions = Dimensions(width: width, height: height)
        }
        return (rate, dimensions)
    }

    /// Starts a synchronized recording of every camera of the session (at `fps` and `size` when given).
    public func startRecording(_ request: RecordRequest, by access: Access) async throws -> CaptureJob {
        let (rate, dimensions) = try Self.recording(request)
        let session = try sessionForCapture()
        if let dimensions {
            // A size a camera has no format of would fail the recording once started: refused now.
            let lacking = await session.inputs.filter { input in !input.formats.contains { $0.dimensions == dimensions } }
            if let first = lacking.first {
                let sizes = Set(first.formats.map { "\($0.dimensions.width)x\($0.dimensions.height)" }).sorted()
                throw ServiceError(
                    .conflict, agent: first.agentID, device: first.name,
                    "size \(dimensions.width)x\(dimensions.height) is not a format of " + lacking.map(\.name).joined(separator: ", ")
                        + " (\(first.name) has \(sizes.joined(separator: ", ")))")
            }
        }
        let job = try begin(.recording, access: access)
        let store = self.store
        let duration = Duration.milliseconds(Int64(request.duration * 1000))
        let lockPhase = configuration.phaseLock
        let previews = self.previews
        submit(job) { service in
            if rate != nil || dimensions != nil {
                await service.progress(job.id, 0.02, "configuring every camera")
                try await service.reconfigure(session, quiesce: true) {
                    await session.beginConfiguration()
                    // A size asked for picks each camera's format; a rate alone keeps their formats.
                    await session.setPreset(dimensions == nil ? .inputPriority : .high)
                    await session.setFrameRate(.init(dimensions: dimensions, frameDuration: rate))
                    try await session.commitConfiguration()
                }
                if lockPhase { _ = await session.waitForPhaseLock(timeout: .seconds(5)) }
            }
            // Previews pause until the recording's streams run (its first progress): cameras then
            // start on the trigger's instant, and previews join those streams.
            await previews.pause()
            let resumed = NIOLockedValueBox(false)
            let resume: @Sendable () -> Void = { if resumed.withLockedValue({ value in defer { value = true }; return !value }) { previews.resume() } }
            defer { resume() }
            // Progress reaches the job table in the order the recording reports it: one consumer, the
            // newest report waiting at most.
            let (reports, reporter) = AsyncStream.makeStream(of: (Double, String).self, bufferingPolicy: .bufferingNewest(1))
            async let reported: Void = {
                for await (fraction, message) in reports { await service.progress(job.id, fraction, message) }
            }()
            defer { reporter.finish() }
            let report = try await session.record(duration: duration, into: store) { progress in
                if progress.elapsed > .zero { resume() }
                let (seconds, total) = (progress.elapsed.seconds, progress.duration.seconds)
                let fraction = total > 0 ? min(1, seconds / total) : 0
                reporter.yield((0.05 + 0.9 * fraction, String(format: "recording %.1f of %.1f s, %d sets", seconds, total, progress.sets)))
            }
            reporter.finish()
            await reported
            return report
        }
        return job
    }

    private func sessionForCapture() throws -> RigSession {
        if let activity = supervisor.activity { throw ServiceError(.conflict, "\(activity) is under way; start the capture when it has finished") }
        guard let session else {
            throw ServiceError(.unavailable, "no session: " + (supervisor.sessionError ?? "no camera is connected yet"))
        }
        return session
    }

    private func begin(_ kind: JobKind, access: Access) throws -> CaptureJob {
        let id = "job-" + String(UInt64.random(in: 0...UInt64.max), radix: 36)
        if let refusal = supervisor.begin(.capturing(job: id, kind: kind)) {
            throw ServiceError(.conflict, "\(refusal); start the capture when it has finished")
        }
        let (job, event) = jobTable.start(id: id, kind: kind, by: access.name, at: Date())
        events.publish(event)
        return job
    }

    /// Runs `capture` as a job of `jobs`, and records its end.
    private func submit(_ job: CaptureJob, _ capture: @escaping @Sendable (RigService) async throws -> CaptureReport) {
        let submitted = jobs.submit { [self] in
            let start = ContinuousClock.now
            do {
                let report = try await capture(self)
                await self.finish(job.id, report: report, elapsed: ContinuousClock.now - start)
            } catch {
                await self.fail(job.id, error: error, elapsed: ContinuousClock.now - start)
            }
        }
        if !submitted { fail(job.id, error: ServiceError(.unavailable, "the service is stopping"), elapsed: .zero) }
    }

    private func progress(_ id: String, _ fraction: Double, _ message: String) {
        if let event = jobTable.progress(id, fraction: fraction, message: message) { events.publish(event) }
    }

    private func finish(_ id: String, report: CaptureReport, elapsed: Duration) {
        guard let job = jobTable.job(id) else { return }
        let summary = CaptureOutput(report.manifest, directory: report.directory.path)
        supervisor.end(.capturing(job: id, kind: job.kind))
        for camera in summary.cameras { droppedFrames[camera.camera, default: 0] += camera.droppedFrames }
        metrics.captureEnded(job.kind, finished: true, seconds: elapsed.seconds)
        if let event = jobTable.finish(id, summary: summary, contactSheet: report.manifest.contactSheet, at: Date()) { events.publish(event) }
    }

    private func fail(_ id: String, error: any Error, elapsed: Duration) {
        guard let job = jobTable.job(id) else { return }
        supervisor.end(.capturing(job: id, kind: job.kind))
        metrics.captureEnded(job.kind, finished: false, seconds: elapsed.seconds)
        if let event = jobTable.fail(id, reason: Self.message(error), at: Date()) { events.publish(event) }
    }

    /// An error as one line for a person.
    static func message(_ error: any Error) -> String {
        switch error {
        case let error as CustomStringConvertible: error.description
        default: "\(error)"
        }
    }
}

/// Runs `RigService`'s supervision under swift-service-lifecycle: it stops, releasing its cameras, on
/// graceful shutdown.
public struct RigServiceRunner: Service {
    let service: RigService

    public init(_ service: RigService) { self.service = service }

    public func run() async throws {
        await cancelWhenGracefulShutdown { await service.run() }
    }
}

extension CaptureStore {
    /// Free bytes where the captures are stored, read off the request's thread.
    func availableCapacity() async -> Int? {
        let root = self.root
        return try? await BlockingWork.run { try root.resourceValues(forKeys: [.volumeAvailableCapacityKey]).volumeAvailableCapacity }
    }
}
