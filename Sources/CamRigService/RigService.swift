import CamRigCapture
import CamRigClock
import CamRigCoordinator
import CamRigObjectStore
import CamRigSecurity
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
        /// Where captures go, as `--out` gives it: a captures folder's path, or `s3://BUCKET/PREFIX`, an
        /// S3-compatible store (with `storeSettings` over the AWS_* environment variables).
        public var out: String
        /// With an object store: this machine's folder for the catalog (`catalog.sqlite`, unless
        /// `catalogURL`) and the store's work files (capture locks, spilled frames).
        public var stateDirectory: URL?
        /// A rig file's `store:` settings, each over the environment's.
        public var storeSettings = ObjectStoreLocation.Settings()
        /// The capture catalog, `postgres://…` for one several rigs share; nil: `catalog.sqlite` in the
        /// captures directory (or in `stateDirectory` for an object store).
        public var catalogURL: String?
        /// The rig's name, recorded with its captures in the catalog.
        public var rigName = CaptureNaming.hostRig
        /// Phase-lock free-running cameras onto one frame grid, with this tolerance.
        public var phaseLock = true
        public var lockTolerance: Duration = .microseconds(100)
        /// How often the rig is looked at.
        public var supervisionInterval: Duration = .seconds(1)
        /// How often everything is read again from agents that push their state: the safety net under an
        /// event lost on the way.
        public var fullLookInterval: Duration = .seconds(60)
        /// How long after a failed session build the next is tried.
        public var rebuildBackoff: Duration = .seconds(5)
        /// Samples of clock history kept per agent (one per supervision pass).
        public var historyLength = 300

        /// Captures in `out` (a folder, or `s3://BUCKET/PREFIX` with `stateDirectory` for its local work).
        public init(out: String, stateDirectory: URL? = nil) {
            self.out = out
            self.stateDirectory = stateDirectory
        }

        /// Captures in the folder `capturesDirectory`.
        public init(capturesDirectory: URL) {
            self.init(out: capturesDirectory.path)
        }

        /// The captures folder `out` names (meaningless for an object store).
        public var capturesDirectory: URL { URL(fileURLWithPath: out) }

        /// Whether `out` is an object store rather than a folder.
        public var isObjectStore: Bool { ObjectStoreLocation.isObjectStoreURL(out) }

        /// The environment variable in which `camrig serve` hands the rig file's `store:` settings to the
        /// service, as JSON with the rig file's keys (not as arguments: they may hold a secret key).
        public static let storeSettingsVariable = "CAMRIG_STORE_SETTINGS"

        /// The `store:` settings `json` gives (the rig file's keys).
        public static func storeSettings(json: String) throws -> ObjectStoreLocation.Settings {
            do {
                return try JSONDecoder().decode(ObjectStoreLocation.Settings.self, from: Data(json.utf8))
            } catch {
                throw StorageError("\(storeSettingsVariable) does not hold the store: settings of a rig file as JSON: \(error)")
            }
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
    /// Where captures go: a captures folder (`CaptureStore`) or an object store (`ObjectCaptureStore`).
    public nonisolated let store: any CaptureStorage
    public nonisolated let configuration: Configuration
    public nonisolated let metrics: ServiceMetrics
    /// Where capture jobs run: a service of the group (`services`).
    public nonisolated let jobs: JobRunner
    /// Zero-touch enrollment, when the service was started with it (`camrig serve --enroll`): its
    /// members are part of the rig beside the rig file's agents.
    public nonisolated let enrollment: EnrollmentRegistrar?
    /// Where each enrolled agent in the pool is reached, by certificate name.
    private var memberEndpoints: [String: AgentEndpoint]
    let logger: Logger

    var supervisor: RigSupervisor
    var jobTable = JobTable()
    public private(set) var session: RigSession?
    public private(set) var sessionCommitted: Date?
    public private(set) var devices: [RigDevice] = []
    public private(set) var phases: [String: CameraPhase] = [:]
    public private(set) var history: [String: [ClockHistorySample]] = [:]
    /// Each agent's result spool as it last reported it.
    public private(set) var spools: [String: WireSpoolStatus] = [:]
    /// Agents that push their state (`state-events`): listened to, not asked, while connected.
    private var pushing: Set<String> = []
    /// Agents whose device lists must be read again (one came or went, a lease or configuration changed
    /// in a way its event did not carry, the agent connected or left).
    private var staleDevices: Set<String> = []
    /// Agents whose spool figures must be asked for (connected since the last answer).
    private var spoolUnknown: Set<String> = []
    /// Agents with a result spool (capability `capture`).
    private var spooling: Set<String> = []
    /// Bumped for an agent at every event that changes its cameras: a device list asked for before the
    /// event and answered after it is not taken (it may undo what the event said).
    private var heard: [String: UInt64] = [:]
    private var lastSpoolPoll = ContinuousClock.now - .seconds(60)
    /// The last time everything was read again, pushed or not: the safety net under lost events.
    private var lastFullLook = ContinuousClock.now
    /// Frames each camera dropped in the captures this service made.
    public internal(set) var droppedFrames: [String: Int] = [:]
    public nonisolated let started = Date()

    /// A service over `pool` whose captures go to `configuration`'s directory, listed in its own SQLite
    /// catalog (`configuration.catalogURL` and object stores are for `connect`).
    public init(
        pool: AgentPool, configuration: Configuration, metrics: ServiceMetrics = ServiceMetrics(), enrollment: EnrollmentRegistrar? = nil, logger: Logger
    ) throws {
        guard !configuration.isObjectStore else {
            throw StorageError("captures in an object store (\(configuration.out)) are opened by RigService.connect")
        }
        try self.init(
            pool: pool, configuration: configuration, store: try CaptureStore(root: configuration.capturesDirectory, rig: configuration.rigName), metrics: metrics,
            enrollment: enrollment, logger: logger)
    }

    /// A service whose captures go to `store` (a `CaptureStore`, or any other store).
    public init(
        pool: AgentPool, configuration: Configuration, store: any CaptureStorage, metrics: ServiceMetrics = ServiceMetrics(), enrollment: EnrollmentRegistrar? = nil,
        logger: Logger
    ) throws {
        self.pool = pool
        self.enrollment = enrollment
        let revoked = Set(Self.revokedMembers(of: enrollment).map(\.name))
        var memberEndpoints: [String: AgentEndpoint] = [:]
        for member in enrollment?.members ?? [] where !revoked.contains(member.name) {
            guard let endpoint = AgentEndpoint(member.endpoint) else { continue }
            pool.add(endpoint)
            memberEndpoints[member.name] = endpoint
        }
        self.memberEndpoints = memberEndpoints
        self.configuration = configuration
        self.metrics = metrics
        self.logger = logger
        self.events = EventHub()
        self.previews = PreviewHub(logger: logger)
        self.jobs = JobRunner()
        self.store = store
        supervisor = RigSupervisor(configuration: .init(rebuildBackoff: configuration.rebuildBackoff))
    }

    /// A service over `pool` with the store and catalog `configuration` names (connected, the catalog
    /// migrated as needed; an object store's bucket made if missing and writing under its prefix
    /// checked): its opener calls `disconnectCatalog()` once the service has stopped.
    public static func connect(
        pool: AgentPool, configuration: Configuration, metrics: ServiceMetrics = ServiceMetrics(), enrollment: EnrollmentRegistrar? = nil, logger: Logger
    ) async throws -> RigService {
        try CaptureNaming.checkRig(configuration.rigName, from: "--rig-name")
        guard let state = configuration.stateDirectory ?? (configuration.isObjectStore ? nil : configuration.capturesDirectory) else {
            throw StorageError("captures in an object store (\(configuration.out)) need a local state folder for the catalog and the store's work: give --state DIR")
        }
        let store = try await CaptureStorageOpener.open(
            configuration.out, catalogURL: configuration.catalogURL, state: state, rig: configuration.rigName, settings: configuration.storeSettings,
            logger: logger)
        do {
            return try RigService(pool: pool, configuration: configuration, store: store, metrics: metrics, enrollment: enrollment, logger: logger)
        } catch {
            await store.disconnect()
            throw error
        }
    }

    /// Closes the capture catalog and lets go of the store's connections (after the service has stopped:
    /// captures cannot be listed then).
    public nonisolated func disconnectCatalog() async {
        await store.disconnect()
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

    // MARK: Enrollment

    /// An agent enrolled (or renewed): it joins the rig, and the supervision connects to it.
    func admit(_ member: EnrollmentRegistrar.Member, renewal: Bool) async {
        guard let endpoint = AgentEndpoint(member.endpoint) else { return }
        let known = pool.agents.contains { $0.endpoint == endpoint }
        // An agent that joined again or renewed from another address or port: the old endpoint leaves the rig.
        if let previous = memberEndpoints[member.name], previous != endpoint, await pool.remove(previous) {
            logger.notice("agent moved", metadata: ["agent": "\(member.name)", "from": "\(previous)", "to": "\(endpoint)"])
        }
        memberEndpoints[member.name] = endpoint
        pool.add(endpoint)
        logger.notice(
            renewal ? "agent renewed its certificate" : "agent enrolled",
            metadata: ["agent": "\(member.name)", "endpoint": "\(member.endpoint)", "address": "\(member.address)", "new": "\(!known)"])
        events.publish(renewal ? .agentRenewed(agent: member.name, endpoint: member.endpoint) : .agentEnrolled(agent: member.name, endpoint: member.endpoint))
    }

    /// Enrolled agents that are no longer the rig's: `camrig certs revoke` moved the copy of their
    /// certificate out of the CA's folder, or the revocation list names it.
    nonisolated static func revokedMembers(of enrollment: EnrollmentRegistrar?) -> [EnrollmentRegistrar.Member] {
        guard let enrollment else { return [] }
        let directory = enrollment.directory
        guard let entries = try? directory.entries() else { return [] }
        let list = try? directory.revocationList(verifiedBy: directory.trustRoot())
        return enrollment.members.filter { member in
            guard let copy = entries.first(where: { $0.name == member.name }) else { return true }
            return list?.entry(for: copy.certificate.serialNumber) != nil
        }
    }

    /// Applies the CA's revocation list (changed since it was read) to the service's own connections:
    /// `tls` reads it again, so new connections to agents are judged by it; connected agents whose
    /// certificates it now names are disconnected; enrolled agents it revoked leave the rig (they are
    /// not listed or connected to again). Returns the names of the agents that left.
    @discardableResult
    public func applyRevocations(_ tls: MutualTLS) async -> [String] {
        let reloaded: MutualTLS.Reloaded
        do {
            reloaded = try tls.reload()
        } catch {
            logger.error("cannot apply the new revocation list to the connections to agents; the one read before stays in force: \(error)")
            return []
        }
        let refused = await pool.recheck(with: tls.verifier)
        var left: [String] = []
        for member in Self.revokedMembers(of: enrollment) {
            guard let endpoint = memberEndpoints[member.name] ?? AgentEndpoint(member.endpoint), await pool.remove(endpoint) else { continue }
            memberEndpoints[member.name] = nil
            left.append(member.name)
            events.publish(.agentRevoked(agent: member.name))
        }
        logger.notice(
            "revocation list applied to the connections to agents",
            metadata: [
                "crl_number": "\(reloaded.revocationListNumber)", "revoked": "\(reloaded.revokedCount)",
                "disconnected": "\(refused.map(\.agent.name).joined(separator: ","))", "removed": "\(left.joined(separator: ","))",
            ])
        return left
    }

    /// A refused enrolment or renewal, with its reason, for the log and the console.
    func refused(_ reason: String, address: String, what: String) {
        logger.warning("\(what) refused", metadata: ["address": "\(address)", "reason": "\(reason)"])
        events.publish(.enrollmentRefused(what: what, address: address, reason: reason))
    }

    // MARK: Supervision

    /// Looks after the rig until cancelled, then releases the session: listens to the agents' events
    /// (devices, leases, spools, phase locks) and looks at the rig once per supervision interval.
    public func run() async {
        let heard = pool.watch()
        pool.start()
        events.publish(.serviceStarted(agents: pool.agents.count))
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await event in heard { await self.hear(event) }
            }
            while !Task.isCancelled {
                await supervise()
                try? await Task.sleep(for: configuration.supervisionInterval)
            }
            group.cancelAll()
        }
        await shutdown()
    }

    /// What an agent told: its state is taken as it is pushed, or noted to be read at the next look.
    func hear(_ event: AgentPool.Event) async {
        switch event {
        case .connected(let agent, let capabilities):
            if capabilities.contains(WireProtocol.Capability.stateEvents) { pushing.insert(agent) } else { pushing.remove(agent) }
            if capabilities.contains(WireProtocol.Capability.capture) {
                spooling.insert(agent)
                spoolUnknown.insert(agent)
            } else {
                spooling.remove(agent)
                spoolUnknown.remove(agent)
            }
            camerasChanged(on: agent)
            forgetPhases(of: agent)
        case .disconnected(let agent), .unheard(let agent):
            pushing.remove(agent)
            camerasChanged(on: agent)
            forgetPhases(of: agent)
        case .event(let agent, let event):
            switch event.kind {
            case .deviceChanged:
                heard[agent, default: 0] += 1
                // The description as it is now: taken as it came, unless the device is not listed yet.
                if case .device(let description)? = event.detail,
                    let index = devices.firstIndex(where: { $0.agentID == agent && $0.deviceID == description.uniqueID })
                {
                    devices[index] = RigDevice(agent: devices[index].agent, agentID: agent, description: description)
                } else {
                    staleDevices.insert(agent)
                }
            case .deviceConnected, .deviceDisconnected, .leaseLost:
                camerasChanged(on: agent)
            case .spoolStatus, .spoolNearFull:
                spools[agent] = event.spool
                spoolUnknown.remove(agent)
            case .phaseStatus:
                if let phase = await session?.phase(reported: event.phase, by: agent) { phases[phase.camera] = phase }
            default:
                break
            }
        }
    }

    /// `agent`'s cameras are listed again at the next look, and a list asked for before now is not taken.
    private func camerasChanged(on agent: String) {
        heard[agent, default: 0] += 1
        staleDevices.insert(agent)
    }

    /// The phases of `agent`'s cameras are read again at the next look (it connected or left: what it
    /// last pushed may be stale).
    private func forgetPhases(of agent: String) {
        phases = phases.filter { $0.value.agentID != agent }
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
        if let enrollment {
            let connected = pool.agents.map(\.snapshot).filter { $0.status == .connected }.map(\.endpoint.description)
            try? await BlockingWork.run { enrollment.connected(Set(connected)) }
        }
        // Agents that push their state are asked only what they have not pushed; the others (agents
        // without `state-events`) are asked as before: devices every look, spools every 5 s.
        let connected = pool.agents.filter { $0.snapshot.status == .connected }
        let asked = Set(connected.map(\.name)).subtracting(pushing)
        if ContinuousClock.now - lastFullLook >= configuration.fullLookInterval {
            // The safety net: an event lost on the way (a watcher that fell far behind) is made good here.
            lastFullLook = ContinuousClock.now
            staleDevices.formUnion(connected.map(\.name))
            spoolUnknown.formUnion(spooling)
            phases = [:]
        }
        await refreshDevices(of: staleDevices.union(asked))
        var spoolsToAsk = spoolUnknown
        if ContinuousClock.now - lastSpoolPoll >= .seconds(5) {
            lastSpoolPoll = ContinuousClock.now
            spoolsToAsk.formUnion(asked)
        }
        await pollSpools(of: spoolsToAsk)
        await refreshPhases(asking: asked)
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

    /// The session's cameras' phase locks: as pushed by their agents; read from the agents in `asked`
    /// (which push nothing), and for cameras whose phase is not known or could not be read.
    private func refreshPhases(asking asked: Set<String>) async {
        guard let session else {
            phases = [:]
            return
        }
        let inputs = await session.inputs
        phases = phases.filter { name, _ in inputs.contains { $0.name == name } }
        let unknown = inputs.filter { asked.contains($0.agentID) || phases[$0.name] == nil || phases[$0.name]?.failure != nil }
        guard !unknown.isEmpty else { return }
        for phase in await session.phaseStatus(of: Set(unknown.map(\.name))) { phases[phase.camera] = phase }
    }

    /// Asks the connected agents among `names` how full their result spools are.
    private func pollSpools(of names: Set<String>) async {
        let agents = pool.agents.filter { $0.snapshot.status == .connected && names.contains($0.name) }
        guard !agents.isEmpty else { return }
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
        for (name, status) in statuses {
            // Figures pushed while the question was out are newer than its answer.
            guard !pushing.contains(name) || spoolUnknown.contains(name) else { continue }
            spools[name] = status
            if status != nil { spoolUnknown.remove(name) }
        }
    }

    /// Lists every connected agent's cameras.
    func refreshDevices() async {
        await refreshDevices(of: Set(pool.agents.map(\.name)))
    }

    /// Lists the cameras of the agents among `names` again, keeping the others' lists. An agent that is
    /// not connected has none. A connected agent that did not answer, or whose cameras changed while
    /// the question was out (`heard`), keeps the list it had and is asked again at the next look.
    private func refreshDevices(of names: Set<String>) async {
        guard !names.isEmpty else { return }
        let agents = pool.agents
        let asked = agents.filter { names.contains($0.name) }
        let before = heard
        staleDevices.subtract(names)
        let (fresh, failures) = await RigDiscovery.devices(of: asked)
        let failed = Set(failures.map(\.agent))
        var kept: Set<ObjectIdentifier> = []
        for agent in asked where failed.contains(agent.name) || heard[agent.name] != before[agent.name] {
            guard agent.snapshot.status == .connected else { continue }
            kept.insert(ObjectIdentifier(agent))
            staleDevices.insert(agent.name)
        }
        devices = agents.flatMap { agent in
            let listed = names.contains(agent.name) && !kept.contains(ObjectIdentifier(agent)) ? fresh : devices
            return listed.filter { $0.agent === agent }
        }
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
            // The new session's cameras are read once; their agents push the rest.
            phases = [:]
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
/// Watches the CA's revocation list (`crl.pem`) where the service reads its certificates, and applies a
/// new one to the service's connections to agents (`RigService.applyRevocations`) within `interval`: a
/// host revoked with `camrig certs revoke` is cut off from the rig at once, without a restart.
public struct RevocationWatch: Service {
    let service: RigService
    let tls: MutualTLS
    let path: String
    let interval: Duration

    public init(service: RigService, tls: MutualTLS, directory: TLSDirectory, interval: Duration = .seconds(1)) {
        self.service = service
        self.tls = tls
        self.path = directory.revocationListPath
        self.interval = interval
    }

    public func run() async throws {
        let (service, tls, path, interval) = (service, tls, path, interval)
        await cancelWhenGracefulShutdown {
            var seen = ReloadingVerifier.modified(path)
            while (try? await Task.sleep(for: interval)) != nil {
                let modified = ReloadingVerifier.modified(path)
                guard modified != seen else { continue }
                seen = modified
                await service.applyRevocations(tls)
            }
        }
    }
}

public struct RigServiceRunner: Service {
    let service: RigService

    public init(_ service: RigService) { self.service = service }

    public func run() async throws {
        await cancelWhenGracefulShutdown { await service.run() }
    }
}

extension CaptureStorage {
    /// Free bytes where a captures folder is, read off the request's thread; nil for an object store.
    func availableCapacity() async -> Int? {
        guard let root = (self as? CaptureStore)?.root else { return nil }
        return try? await BlockingWork.run { try root.resourceValues(forKeys: [.volumeAvailableCapacityKey]).volumeAvailableCapacity }
    }
}
