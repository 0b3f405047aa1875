import CamRigCapture
import CamRigClock
import CamRigCoordinator
import CamRigDevices
import CamRigStorage
import CamRigWire
import CamRigWireModel
import Foundation
import Logging
import NIOConcurrencyHelpers

/// The coordinator kept running: the rig's agents stay connected and their clocks measured, every camera
/// stays in one committed, phase-locked session, and captures, settings and previews are served from it.
///
/// A supervision loop (`run`) looks at the rig once a second: it notices agents coming and going, cameras
/// plugged and unplugged, and rebuilds the session when its cameras changed or an agent restarted (an
/// agent that restarts forgets the session's leases). Everything it notices is published as an event.
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

    /// One sample of an agent's clock as the sync-health history keeps it.
    public struct ClockSample: Codable, Sendable {
        public var time: Double
        public var offsetUs: Double?
        public var errorBoundUs: Double?
        public var roundTripUs: Double?
        public var driftPpm: Double?
    }

    /// A capture the service runs: progress while it runs, the summary when done.
    public struct CaptureJob: Codable, Sendable {
        public var id: String
        /// `photo` or `recording`.
        public var kind: String
        /// `running`, `finished` or `failed`.
        public var state: String
        public var started: String
        public var finished: String?
        /// 0…1.
        public var progress: Double
        public var message: String
        public var captureId: String?
        public var summary: CaptureOutput?
        public var contactSheet: String?
        public var error: String?
        public var requestedBy: String
    }

    public nonisolated let pool: AgentPool
    public nonisolated let events: EventHub
    public nonisolated let previews: PreviewHub
    public nonisolated let store: CaptureStore
    public nonisolated let configuration: Configuration
    private let logger: Logger

    public private(set) var session: RigSession?
    /// The agents the session was built over, with when each connected: a change means a rebuild.
    private var sessionAgents: [String: Date] = [:]
    private var sessionInputs: Set<String> = []
    public private(set) var sessionError: String?
    public private(set) var sessionCommitted: Date?
    private var nextRebuild = ContinuousClock.now
    public private(set) var devices: [RigDevice] = []
    public private(set) var phases: [String: CameraPhase] = [:]
    public private(set) var history: [String: [ClockSample]] = [:]
    private var agentStatus: [String: String] = [:]
    private var deviceSeen: [String: (connected: Bool, lease: String?, phase: String)] = [:]
    public private(set) var jobs: [CaptureJob] = []
    /// What the service is doing that excludes the others (a capture, a settings change, a session
    /// rebuild); nil when idle. Set before the first suspension of the operation, so that an actor
    /// re-entered meanwhile sees it.
    private var busy: String?
    /// The phase lock was released for a change and could not be taken again: tried again by `supervise`.
    private var relockDue: ContinuousClock.Instant?
    /// Each agent's result spool as it last reported it.
    public private(set) var spools: [String: WireSpoolStatus] = [:]
    private var lastSpoolPoll = ContinuousClock.now - .seconds(60)
    private var spoolsAsked: Set<String> = []
    /// Frames each camera dropped in the captures this service made.
    public private(set) var droppedFrames: [String: Int] = [:]
    /// Counts for the metrics.
    public private(set) var capturesFinished: [String: Int] = [:]
    public private(set) var capturesFailed: [String: Int] = [:]
    public private(set) var captureSeconds: [String: Double] = [:]
    public let started = Date()

    public init(pool: AgentPool, configuration: Configuration, logger: Logger) throws {
        self.pool = pool
        self.configuration = configuration
        self.logger = logger
        self.events = EventHub()
        self.previews = PreviewHub(logger: logger)
        self.store = try CaptureStore(root: configuration.capturesDirectory)
    }

    // MARK: Supervision

    /// Looks after the rig until cancelled, then releases the session.
    public func run() async {
        pool.start()
        events.publish("service.started", "coordinator service started with \(pool.agents.count) agent(s)")
        let previews = self.previews
        let keepAlive = Task { await previews.keepAlive() }
        while !Task.isCancelled {
            await supervise()
            try? await Task.sleep(for: configuration.supervisionInterval)
        }
        keepAlive.cancel()
        await shutdown()
    }

    /// Releases every lease and stops watching; agents keep their cameras' configuration.
    public func shutdown() async {
        previews.stopAll()
        if let session { await session.stop() }
        session = nil
        events.publish("service.stopped", "coordinator service stopped")
        events.finishAll()
        await pool.stop()
    }

    /// One look at the rig.
    func supervise() async {
        let now = Date().timeIntervalSince1970
        var connectedSince: [String: Date] = [:]
        for agent in pool.agents {
            let snapshot = agent.snapshot
            let key = snapshot.endpoint.description
            let status = snapshot.status.name
            if agentStatus[key] != status {
                let previous = agentStatus[key]
                agentStatus[key] = status
                if status == "connected" {
                    events.publish("agent.up", agent: snapshot.name, "agent \(snapshot.name) connected (\(snapshot.endpoint))")
                } else if previous == "connected" || (previous == nil && status == "down") {
                    var reason = ""
                    if case .down(let why, _) = snapshot.status { reason = ": \(why)" }
                    events.publish("agent.down", agent: snapshot.name, "agent \(snapshot.name) is \(status)\(reason)")
                }
            }
            if snapshot.status == .connected, let since = snapshot.connectedSince { connectedSince[snapshot.name] = since }
            var sample = ClockSample(time: now)
            if let clock = snapshot.clock {
                sample.offsetUs = clock.offsetNanoseconds / 1000
                sample.errorBoundUs = clock.errorBoundNanoseconds / 1000
                sample.driftPpm = clock.driftPPM
            }
            // The latest probe's round trip, else the estimate's lowest.
            sample.roundTripUs = (snapshot.recentRoundTrips.last ?? snapshot.clock?.minimumRoundTrip).map { Double($0) / 1000 }
            history[snapshot.name, default: []].append(sample)
            if history[snapshot.name]!.count > configuration.historyLength { history[snapshot.name]!.removeFirst() }
        }
        await refreshDevices()
        // An agent just connected is asked at once, the others every 5 s.
        let unknownSpool = pool.agents.contains { $0.snapshot.status == .connected && !spoolsAsked.contains($0.name) }
        if unknownSpool || ContinuousClock.now - lastSpoolPoll >= .seconds(5) {
            lastSpoolPoll = ContinuousClock.now
            await pollSpools()
        }
        await maintainSession(connectedSince: connectedSince)
        if let due = relockDue, ContinuousClock.now >= due, busy == nil, let session {
            busy = "a phase lock"
            await relock(session)
            busy = nil
        }
        if let session {
            let phases = await session.phaseStatus()
            var byName: [String: CameraPhase] = [:]
            for phase in phases { byName[phase.camera] = phase }
            self.phases = byName
        } else {
            phases = [:]
        }
        publishDeviceChanges()
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

    private func publishDeviceChanges() {
        var seen: [String: (connected: Bool, lease: String?, phase: String)] = [:]
        for device in devices {
            let lease = device.description.hasLease ? device.description.lease.holder : nil
            let phase = phases[device.name]?.stateName ?? "unlocked"
            let now = (connected: device.description.connected, lease: lease, phase: phase)
            seen[device.name] = now
            guard let before = deviceSeen[device.name] else {
                events.publish("device.added", agent: device.agentID, device: device.name, "camera \(device.name) (\(device.description.localizedName)) is on the rig")
                continue
            }
            if before.connected != now.connected {
                events.publish(
                    now.connected ? "device.connected" : "device.disconnected", agent: device.agentID, device: device.name,
                    now.connected ? "camera \(device.name) was plugged in" : "camera \(device.name) was unplugged")
            }
            if before.lease != now.lease {
                events.publish(
                    "device.lease", agent: device.agentID, device: device.name,
                    now.lease.map { "camera \(device.name) is locked for configuration by \($0)" } ?? "camera \(device.name) is unlocked",
                    data: ["holder": now.lease ?? ""])
            }
            if before.phase != now.phase {
                events.publish(
                    "phase.state", agent: device.agentID, device: device.name, "camera \(device.name) phase lock: \(now.phase)",
                    data: ["state": now.phase])
            }
        }
        for name in deviceSeen.keys where seen[name] == nil {
            events.publish("device.removed", device: name, "camera \(name) is no longer on the rig (its agent is down or it was removed)")
        }
        deviceSeen = seen
    }

    /// Builds the session anew when the cameras it should hold changed or an agent reconnected.
    private func maintainSession(connectedSince: [String: Date]) async {
        let wanted = Set(devices.filter { $0.description.connected }.map(\.name))
        let agentsChanged = sessionAgents.contains { name, since in connectedSince[name] != since }
        let needed = session == nil ? !wanted.isEmpty : (wanted != sessionInputs || agentsChanged)
        guard needed, busy == nil, ContinuousClock.now >= nextRebuild else { return }
        busy = "a rebuild of the session"
        defer { busy = nil }
        relockDue = nil
        if let old = session {
            // Nothing may start on a session being stopped.
            session = nil
            await old.stop()
        }
        do {
            let session = RigSession(pool: pool, logger: logger)
            var added: [String] = []
            var skipped: [String] = []
            for device in devices where wanted.contains(device.name) {
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
            sessionInputs = Set(added)
            sessionAgents = connectedSince.filter { name, _ in added.contains { $0.hasPrefix(name + "/") } }
            sessionError = skipped.isEmpty ? nil : "left out: " + skipped.joined(separator: "; ")
            sessionCommitted = Date()
            events.publish(
                "session.committed", "session \(session.id) committed over \(added.count) camera(s)" + (skipped.isEmpty ? "" : "; left out: \(skipped.joined(separator: "; "))"),
                data: ["session": session.id, "cameras": "\(added.count)"])
            await refreshDevices()
        } catch {
            sessionError = Self.message(error)
            sessionInputs = []
            sessionAgents = [:]
            nextRebuild = ContinuousClock.now + configuration.rebuildBackoff
            events.publish("session.failed", "the session could not be committed: \(sessionError ?? "")")
            logger.warning("session could not be committed", metadata: ["error": "\(sessionError ?? "")"])
        }
    }

    // MARK: Queries

    public func device(named name: String) throws -> RigDevice {
        guard let device = RigDiscovery.find(name, in: devices) else {
            throw ServiceError(.notFound, device: name, "no camera '\(name)' on the rig's connected agents (GET /api/v1/devices lists them)")
        }
        return device
    }

    public func job(_ id: String) -> CaptureJob? { jobs.first { $0.id == id } }

    // MARK: Settings

    /// Applies `key=value` settings (as `camrig device set` takes them) to a camera of the session, under
    /// the session's lease on it; returns the camera's state after.
    public func apply(settings: [String], to name: String, by access: Access) async throws -> RigDevice {
        let device = try device(named: name)
        guard let session, sessionInputs.contains(device.name) else {
            throw ServiceError(
                .conflict, agent: device.agentID, device: device.name,
                "camera \(device.name) is not in the service's session" + (sessionError.map { " (\($0))" } ?? "") + "; it joins when it is connected and not locked by another client")
        }
        if let busy {
            throw ServiceError(.conflict, agent: device.agentID, device: device.name, "\(busy) is under way; change settings when it has finished")
        }
        let change: WireConfigure
        do {
            change = try DeviceSettingsParser.parse(settings, photoOutput: device.description.state.photoOutput)
        } catch {
            throw ServiceError(.badRequest, agent: device.agentID, device: device.name, "\(error)")
        }
        busy = "a settings change on \(device.name)"
        defer { busy = nil }
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
        events.publish(
            "device.settings", agent: device.agentID, device: device.name, "\(access.name) set \(settings.joined(separator: " ")) on \(device.name)",
            data: ["settings": settings.joined(separator: " "), "by": access.name])
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

    /// Puts the cameras back on the frame grid; when that fails, says so (event, session error) and
    /// tries again from `supervise` every 10 s: captures meanwhile are taken unlocked and their manifests say so.
    private func relock(_ session: RigSession) async {
        do {
            _ = try await session.lockPhase(tolerance: configuration.lockTolerance)
            if relockDue != nil { events.publish("phase.relocked", "the cameras are phase-locked again") }
            relockDue = nil
            if sessionError?.hasPrefix("phase lock lost") == true { sessionError = nil }
        } catch {
            if relockDue == nil {
                events.publish("phase.failed", "the cameras could not be phase-locked again after a change: \(Self.message(error)); retrying every 10 s")
            }
            sessionError = "phase lock lost after a change: \(Self.message(error))"
            relockDue = ContinuousClock.now + .seconds(10)
        }
    }

    // MARK: Captures

    public struct PhotoRequest: Codable, Sendable {
        public var quality: String?
        /// `frame`, `jpeg` or `dng`.
        public var output: String?
        public var bracket: [Float]?
        public init(quality: String? = nil, output: String? = nil, bracket: [Float]? = nil) {
            self.quality = quality
            self.output = output
            self.bracket = bracket
        }
    }

    public struct RecordRequest: Codable, Sendable {
        public var duration: Double
        public var fps: Double?
        /// WxH
        public var size: String?
        public init(duration: Double, fps: Double? = nil, size: String? = nil) {
            self.duration = duration
            self.fps = fps
            self.size = size
        }
    }

    /// Starts a synchronized photo of every camera of the session; its progress is the returned job.
    public func startPhoto(_ request: PhotoRequest, by access: Access) throws -> CaptureJob {
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
        let session = try sessionForCapture()
        let job = begin(kind: "photo", access: access)
        let store = self.store
        let previews = self.previews
        Task {
            let start = ContinuousClock.now
            // Previews pause for the photo: a camera that can be triggered exposes at the instant only
            // when it is not already streaming for someone's preview.
            await previews.pause()
            defer { previews.resume() }
            do {
                self.progress(job.id, 0.1, "firing every camera at one instant")
                let report = try await session.capturePhoto(into: store, settings: settings)
                self.finish(job.id, report: report, elapsed: ContinuousClock.now - start)
            } catch {
                self.fail(job.id, error: error, elapsed: ContinuousClock.now - start)
            }
        }
        return job
    }

    /// Starts a synchronized recording of every camera of the session (at `fps` and `size` when given).
    public func startRecording(_ request: RecordRequest, by access: Access) throws -> CaptureJob {
        guard request.duration > 0, request.duration <= 600 else { throw ServiceError(.badRequest, "duration must be within (0, 600] seconds") }
        var rate: FrameDuration?
        if let fps = request.fps {
            guard fps >= 1, fps <= 240, fps == fps.rounded() else { throw ServiceError(.badRequest, "fps must be a whole number within 1…240") }
            rate = FrameDuration(framesPerSecond: UInt32(fps))
        }
        var dimensions: Dimensions?
        if let size = request.size {
            let parts = size.lowercased().split(separator: "x").compactMap { UInt32($0) }
            guard parts.count == 2, parts[0] > 0, parts[1] > 0 else { throw ServiceError(.badRequest, "size '\(size)' is not WxH, e.g. 640x480") }
            dimensions = Dimensions(width: parts[0], height: parts[1])
        }
        let session = try sessionForCapture()
        let job = begin(kind: "recording", access: access)
        let store = self.store
        let duration = Duration.milliseconds(Int64(request.duration * 1000))
        let (lockPhase, tolerance) = (configuration.phaseLock, configuration.lockTolerance)
        let previews = self.previews
        Task {
            let start = ContinuousClock.now
            do {
                if rate != nil || dimensions != nil {
                    self.progress(job.id, 0.02, "configuring every camera")
                    try await self.reconfigure(session, quiesce: true) {
                        await session.beginConfiguration()
                        // A size asked for picks each camera's format; a rate alone keeps their formats.
                        await session.setPreset(dimensions == nil ? .inputPriority : .high)
                        await session.setFrameRate(.init(dimensions: dimensions, frameDuration: rate))
                        try await session.commitConfiguration()
                    }
                    if lockPhase { _ = await session.waitForPhaseLock(timeout: .seconds(5)) }
                }
                let id = job.id
                // Previews pause until the recording's streams run (its first progress): cameras then
                // start on the trigger's instant, and previews join those streams.
                await previews.pause()
                let resumed = NIOLockedValueBox(false)
                let resume: @Sendable () -> Void = { if resumed.withLockedValue({ value in defer { value = true }; return !value }) { previews.resume() } }
                defer { resume() }
                let report = try await session.record(duration: duration, into: store) { progress in
                    if progress.elapsed > .zero { resume() }
                    let (seconds, total) = (progress.elapsed.seconds, progress.duration.seconds)
                    let fraction = total > 0 ? min(1, seconds / total) : 0
                    Task { await self.progress(id, 0.05 + 0.9 * fraction, String(format: "recording %.1f of %.1f s, %d sets", seconds, total, progress.sets)) }
                }
                self.finish(job.id, report: report, elapsed: ContinuousClock.now - start)
            } catch {
                self.fail(job.id, error: error, elapsed: ContinuousClock.now - start)
            }
        }
        return job
    }

    private func sessionForCapture() throws -> RigSession {
        if let busy { throw ServiceError(.conflict, "\(busy) is under way; start the capture when it has finished") }
        guard let session else {
            throw ServiceError(.unavailable, "no session: " + (sessionError ?? "no camera is connected yet"))
        }
        return session
    }

    private func begin(kind: String, access: Access) -> CaptureJob {
        let job = CaptureJob(
            id: "job-" + String(UInt64.random(in: 0...UInt64.max), radix: 36), kind: kind, state: "running",
            started: ISO8601DateFormatter().string(from: Date()), progress: 0, message: "starting", requestedBy: access.name)
        jobs.append(job)
        if jobs.count > 100 { jobs.removeFirst(jobs.count - 100) }
        busy = "a \(kind) (\(job.id))"
        events.publish("capture.started", "\(access.name) started a \(kind)", data: ["job": job.id, "kind": kind])
        return job
    }

    private func progress(_ id: String, _ fraction: Double, _ message: String) {
        guard let index = jobs.firstIndex(where: { $0.id == id }), jobs[index].state == "running" else { return }
        jobs[index].progress = max(jobs[index].progress, fraction)
        jobs[index].message = message
        events.publish("capture.progress", message, data: ["job": id, "progress": String(format: "%.3f", jobs[index].progress)])
    }

    private func finish(_ id: String, report: CaptureReport, elapsed: Duration) {
        guard let index = jobs.firstIndex(where: { $0.id == id }) else { return }
        let summary = CaptureOutput(report.manifest, directory: report.directory.path)
        jobs[index].state = "finished"
        jobs[index].progress = 1
        jobs[index].finished = ISO8601DateFormatter().string(from: Date())
        jobs[index].captureId = report.manifest.id
        jobs[index].summary = summary
        jobs[index].contactSheet = report.manifest.contactSheet
        jobs[index].message = String(format: "%d set(s), skew max %.1f µs", summary.sets, summary.maxSkewUs)
        busy = nil
        let kind = jobs[index].kind
        for camera in summary.cameras { droppedFrames[camera.camera, default: 0] += camera.droppedFrames }
        capturesFinished[kind, default: 0] += 1
        captureSeconds[kind, default: 0] += elapsed.seconds
        events.publish(
            "capture.finished", "\(kind) \(report.manifest.id) finished: \(jobs[index].message)",
            data: ["job": id, "capture": report.manifest.id, "kind": kind, "contact_sheet": report.manifest.contactSheet ?? ""])
    }

    private func fail(_ id: String, error: any Error, elapsed: Duration) {
        guard let index = jobs.firstIndex(where: { $0.id == id }) else { return }
        jobs[index].state = "failed"
        jobs[index].finished = ISO8601DateFormatter().string(from: Date())
        jobs[index].error = Self.message(error)
        jobs[index].message = "failed"
        busy = nil
        let kind = jobs[index].kind
        capturesFailed[kind, default: 0] += 1
        captureSeconds[kind, default: 0] += elapsed.seconds
        events.publish("capture.failed", "\(kind) failed: \(Self.message(error))", data: ["job": id, "kind": kind])
    }

    /// An error as one line for a person.
    static func message(_ error: any Error) -> String {
        switch error {
        case let error as CustomStringConvertible: error.description
        default: "\(error)"
        }
    }
}
