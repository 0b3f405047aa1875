import CamRigDeviceModel
import CamRigWire
import CamRigWireModel
import Foundation
import Logging
import NIOCore

/// A capture session spanning devices on many agents (AVFoundation's `AVCaptureMultiCamSession`,
/// across a network).
///
/// Inputs are remote devices; outputs are photos and frame streams. Changes made between
/// `beginConfiguration()` and `commitConfiguration()` are applied atomically across agents by a
/// two-phase commit (`CommitStateMachine`): every device is leased and the change validated first,
/// then applied everywhere, or rolled back everywhere with the error naming the agent and device.
public actor RigSession {
    /// What the session configures when no explicit frame rate is asked for (`AVCaptureSession.Preset`).
    public enum Preset: String, Sendable, CaseIterable {
        /// The largest size every camera offers, at the highest rate common to all.
        case photo
        /// The largest common size at which every camera reaches 30 fps, at the highest common rate.
        case high
        /// Each camera keeps its own active format (`inputPriority`).
        case inputPriority = "input-priority"
    }

    /// Whether a device can join the session, and if not, why (`canAddInput`).
    public enum InputAvailability: Sendable, Equatable {
        case available
        /// Its agent is not connected or the device is unplugged.
        case absent(String)
        /// Another client holds its configuration lease.
        case leasedByAnother(holder: String)
        /// This coordinator's certificate may not configure it.
        case notAuthorized(String)
        /// Already an input of this session.
        case alreadyAdded

        public var reason: String? {
            switch self {
            case .available: nil
            case .absent(let why): why
            case .leasedByAnother(let holder): "its configuration lease is held by \(holder)"
            case .notAuthorized(let why): why
            case .alreadyAdded: "it is already an input of this session"
            }
        }
    }

    /// The change staged for the next commit.
    public struct FrameRateRequest: Sendable {
        public var dimensions: Dimensions?
        public var pixelFormat: PixelFormat?
        public var frameDuration: FrameDuration?

        public init(dimensions: Dimensions? = nil, pixelFormat: PixelFormat? = nil, frameDuration: FrameDuration? = nil) {
            self.dimensions = dimensions
            self.pixelFormat = pixelFormat
            self.frameDuration = frameDuration
        }
    }

    /// A commit failure: every device is as it was, and this says why, naming agents and devices.
    public struct CommitError: Error, Sendable, CustomStringConvertible {
        public var description: String
        public var failures: [(device: String, message: String)]
        public var rollbackFailures: [(device: String, message: String)]
    }

    public nonisolated let id: String
    public nonisolated let pool: AgentPool
    public private(set) var inputs: [RigDevice] = []
    public var preset: Preset = .high
    public private(set) var photoOutput = false
    public private(set) var frameOutput = false
    /// After a commit: the duration every camera runs at, and each input's format.
    public private(set) var activeFrameDuration: FrameDuration?
    public private(set) var activeFormats: [WireFormat] = []

    private let leaseDuration: UInt32
    let logger: Logger
    private var configuring = 0
    private var request = FrameRateRequest()
    private var controlChanges: [String: WireConfigure] = [:]
    /// What the next commit changes in every camera's photo output.
    private var photoOutputChange: (responsiveCapture: Bool?, deferredDelivery: Bool?) = (nil, nil)
    /// Lease id per input name, held from a successful commit until `stop()`.
    private var leases: [String: String] = [:]
    private var renewal: Task<Void, Never>?
    /// The frame grid the inputs are phase-locked to (coordinator clock), from `lockPhase` on.
    public internal(set) var phaseGrid: PhaseGrid?
    /// From the plan until every agent accepted the last photo's trigger (see `CapturePlan.lead`).
    var lastFanOut: Int64?
    /// Re-aims every agent's lock as its clock estimate moves.
    var phaseRefresh: Task<Void, Never>?
    /// Inputs whose agent refused the phase lock the last time it was sent, with the agent's reason.
    var phaseRefusals: [String: String] = [:]

    public init(pool: AgentPool, id: String = "s-" + String(UInt64.random(in: 0...UInt64.max), radix: 36), leaseDuration: Duration = .seconds(15), logger: Logger) {
        self.pool = pool
        self.id = id
        self.leaseDuration = UInt32(leaseDuration.components.seconds * 1000)
        self.logger = logger
    }

    // MARK: Inputs and outputs

    /// Whether `device` can join: its agent is connected, it is plugged in, not leased by another
    /// client, and this coordinator may configure it.
    public func canAddInput(_ device: RigDevice) -> InputAvailability {
        if inputs.contains(where: { $0.name == device.name }) { return .alreadyAdded }
        guard let client = try? device.agent.client() else {
            return .absent("agent \(device.agentID) is not connected")
        }
        guard device.description.connected else { return .absent("\(device.name) is unplugged") }
        guard client.welcome.clientRole == .coordinator else {
            return .notAuthorized("this certificate (\(client.welcome.clientName)) has the \(client.welcome.clientRole) role; configuring devices takes a coordinator certificate")
        }
        if device.description.hasLease, device.description.lease.holder != client.welcome.clientName, leases[device.name] == nil {
            return .leasedByAnother(holder: device.description.lease.holder)
        }
        return .available
    }

    /// Adds an input; throws with the reason `canAddInput` gives.
    public func addInput(_ device: RigDevice) throws {
        let availability = canAddInput(device)
        guard availability == .available else {
            throw CommitError(description: "cannot add \(device.name): \(availability.reason ?? "")", failures: [], rollbackFailures: [])
        }
        inputs.append(device)
    }

    /// Adds a photo output. Responsive capture and deferred delivery, when given, are set on every
    /// camera's photo output at the next commit, as part of the rig-wide configuration; the rest of each
    /// camera's photo output stays as it is.
    public func addPhotoOutput(responsiveCapture: Bool? = nil, deferredDelivery: Bool? = nil) {
        photoOutput = true
        photoOutputChange = (responsiveCapture, deferredDelivery)
    }
    public func addFrameOutput() { frameOutput = true }

    // MARK: Configuration

    public func beginConfiguration() { configuring += 1 }

    public func setPreset(_ preset: Preset) { self.preset = preset }

    /// Stages one frame rate for every camera (applied by `commitConfiguration`).
    public func setFrameRate(_ request: FrameRateRequest) { self.request = request }

    /// Stages a change of one input's controls (`device get/set`): only the fields set are changed.
    public func setControls(of device: String, _ change: WireConfigure) { controlChanges[device] = change }

    /// Plans the rig-wide format and rate without changing anything; throws, listing every device's
    /// supported ranges, when the request is impossible.
    public func plan() throws -> FrameRatePlanner.Plan? {
        let devices = inputs.map { FrameRatePlanner.Device(name: $0.name, formats: $0.formats) }
        let dimensions: Dimensions
        if let requested = request.dimensions {
            dimensions = requested
        } else {
            switch preset {
            case .inputPriority:
                guard request.frameDuration != nil else { return nil }
                guard let active = inputs.first?.activeFormat else { return nil }
                dimensions = active.dimensions.dimensions
            case .photo, .high:
                var common = Set(inputs.first?.formats.map(\.dimensions) ?? [])
                for input in inputs.dropFirst() { common.formIntersection(input.formats.map(\.dimensions)) }
                let ordered = common.sorted(by: >)
                let thirty = FrameDuration(framesPerSecond: 30)!
                let pick = preset == .photo
                    ? ordered.first
                    : ordered.first { size in inputs.allSatisfy { $0.formats.contains { $0.dimensions == size && $0.frameRateRanges.contains { $0.minFrameDuration <= thirty } } } }
                guard let size = pick ?? ordered.last else {
                    throw FrameRatePlanner.PlanError(description: "the cameras have no frame size in common")
                }
                dimensions = size
            }
        }
        return try FrameRatePlanner.plan(
            FrameRatePlanner.Request(dimensions: dimensions, pixelFormat: request.pixelFormat, frameDuration: request.frameDuration),
            devices: devices
        )
    }

    /// Applies what was staged on every agent, or on none.
    public func commitConfiguration() async throws {
        configuring = max(0, configuring - 1)
        guard configuring == 0 else { return }
        let plan = try plan()
        var changes: [WireConfigure] = inputs.indices.map { index in
            var change = controlChanges[inputs[index].name] ?? WireConfigure()
            change.deviceID = inputs[index].deviceID
            if photoOutputChange.responsiveCapture != nil || photoOutputChange.deferredDelivery != nil {
                var photoOutput = inputs[index].description.state.photoOutput
                if let responsive = photoOutputChange.responsiveCapture { photoOutput.responsiveCapture = responsive }
                if let deferred = photoOutputChange.deferredDelivery { photoOutput.deferredDelivery = deferred }
                if photoOutput != inputs[index].description.state.photoOutput { change.photoOutput = photoOutput }
            }
            if let plan {
                change.formatID = plan.formats[index].id
                change.minFrameDuration = WireRational(plan.frameDuration)
                change.maxFrameDuration = WireRational(plan.frameDuration)
            }
            return change
        }
        if changes.allSatisfy({ !$0.hasFormatID && !$0.hasMinFrameDuration && !$0.hasFocus && !$0.hasExposure && !$0.hasWhiteBalance && !$0.hasZoom && !$0.hasTorch && !$0.hasPhotoOutput && $0.rawControls.isEmpty }) {
            changes = changes.map { var change = $0; change.validateOnly = true; return change }
        }
        try await runCommit(changes)
        controlChanges.removeAll()
        photoOutputChange = (nil, nil)
        if let plan {
            activeFrameDuration = plan.frameDuration
            activeFormats = plan.formats.map(WireFormat.init)
        } else {
            activeFormats = inputs.compactMap(\.activeFormat)
            activeFrameDuration = inputs.first.flatMap { $0.description.state.activeMinFrameDuration.duration }
        }
        startRenewing()
    }

    private struct Prepared: Sendable {
        var leaseID: String?
        var previous: WireDeviceState?
        var failure: String?
    }

    /// Drives `CommitStateMachine` over the inputs' agents.
    private func runCommit(_ changes: [WireConfigure]) async throws {
        var machine = CommitStateMachine(deviceCount: inputs.count)
        var action = machine.start()
        var previous: [Int: WireDeviceState] = [:]
        var newLeases: [Int: String] = [:]
        let inputs = self.inputs
        let existing = inputs.map { leases[$0.name] }
        let duration = leaseDuration
        while true {
            switch action {
            case .prepare(let devices):
                let outcomes = await Self.each(devices) { index in
                    await Self.prepare(inputs[index], change: changes[index], existingLease: existing[index], leaseDuration: duration)
                }
                for (index, outcome) in outcomes {
                    if let state = outcome.previous { previous[index] = state }
                    if existing[index] == nil, let lease = outcome.leaseID { newLeases[index] = lease }
                    action = machine.prepared(index, leased: existing[index] == nil && outcome.leaseID != nil, failure: outcome.failure)
                }
            case .apply(let devices):
                let newLeases = newLeases
                let outcomes = await Self.each(devices) { index in
                    var change = changes[index]
                    change.leaseID = existing[index] ?? newLeases[index] ?? ""
                    return await Self.configure(inputs[index], change)
                }
                for (index, failure) in outcomes { action = machine.applied(index, failure: failure) }
            case .rollBack(let devices):
                let (newLeases, previous) = (newLeases, previous)
                let outcomes = await Self.each(devices) { index in
                    var restore = Self.restoring(changes[index], from: previous[index] ?? WireDeviceState())
                    restore.leaseID = existing[index] ?? newLeases[index] ?? ""
                    return await Self.configure(inputs[index], restore)
                }
                for (index, failure) in outcomes { action = machine.rolledBack(index, failure: failure) }
            case .release(let devices):
                let newLeases = newLeases
                _ = await Self.each(devices) { index -> String? in
                    guard let lease = newLeases[index] else { return nil }
                    return await Self.unlock(inputs[index], lease: lease)
                }
                for index in devices { action = machine.released(index) }
            case .finish(.committed):
                for (index, lease) in newLeases { leases[inputs[index].name] = lease }
                logger.info("session configuration committed", metadata: ["session": "\(id)", "devices": "\(inputs.count)"])
                return
            case .finish(.aborted(let failures, let rollbackFailures)):
                let named = failures.map { (device: inputs[$0.device].name, message: $0.message) }
                let unrestored = rollbackFailures.map { (device: inputs[$0.device].name, message: $0.message) }
                var text = "session configuration not committed; every device is as it was:\n"
                    + named.map { "  \($0.0): \($0.1)" }.joined(separator: "\n")
                if !unrestored.isEmpty {
                    text = "session configuration not committed, and these devices could NOT be restored (check them):\n"
                        + unrestored.map { "  \($0.0): \($0.1)" }.joined(separator: "\n")
                        + "\ncaused by:\n" + named.map { "  \($0.0): \($0.1)" }.joined(separator: "\n")
                }
                throw CommitError(description: text, failures: named, rollbackFailures: unrestored)
            case .wait:
                preconditionFailure("every outcome of a phase was reported, yet the commit waits")
            }
        }
    }

    /// Runs `body` for every index concurrently; returns the outcomes in index order.
    private static func each<T: Sendable>(_ indices: [Int], _ body: @escaping @Sendable (Int) async -> T) async -> [(Int, T)] {
        await withTaskGroup(of: (Int, T).self) { group in
            for index in indices { group.addTask { (index, await body(index)) } }
            var outcomes: [(Int, T)] = []
            for await outcome in group { outcomes.append(outcome) }
            return outcomes.sorted { $0.0 < $1.0 }
        }
    }

    /// Phase one on one device: lease (unless held), snapshot, validate.
    private static func prepare(_ device: RigDevice, change: WireConfigure, existingLease: String?, leaseDuration: UInt32) async -> Prepared {
        var prepared = Prepared()
        do {
            let client = try device.agent.client()
            if let existingLease {
                prepared.leaseID = existingLease
            } else {
                var lock = WireLock()
                lock.deviceID = device.deviceID
                lock.durationMs = leaseDuration
                guard case .lease(let lease) = try await client.request(.lock(lock)).frame.envelope.body else {
                    throw AgentClientError(.protocolViolation, agent: device.agentID, "answered Lock with something else")
                }
                prepared.leaseID = lease.lease.leaseID
            }
            var describe = WireDescribeDevice()
            describe.deviceID = device.deviceID
            guard case .deviceDescription(let description) = try await client.request(.describeDevice(describe)).frame.envelope.body else {
                throw AgentClientError(.protocolViolation, agent: device.agentID, "answered DescribeDevice with something else")
            }
            prepared.previous = description.state
            var validate = change
            validate.leaseID = prepared.leaseID ?? ""
            validate.validateOnly = true
            _ = try await client.request(.configure(validate))
        } catch {
            prepared.failure = Self.message(error)
        }
        return prepared
    }

    private static func configure(_ device: RigDevice, _ change: WireConfigure) async -> String? {
        do {
            _ = try await device.agent.client().request(.configure(change))
            return nil
        } catch {
            return message(error)
        }
    }

    private static func unlock(_ device: RigDevice, lease: String) async -> String? {
        do {
            var unlock = WireUnlock()
            unlock.leaseID = lease
            _ = try await device.agent.client().request(.unlock(unlock))
            return nil
        } catch {
            return message(error)
        }
    }

    /// The change that puts back what `change` altered, from the state before it.
    static func restoring(_ change: WireConfigure, from state: WireDeviceState) -> WireConfigure {
        var restore = WireConfigure()
        restore.deviceID = change.deviceID
        if change.hasFormatID { restore.formatID = state.activeFormatID }
        if change.hasMinFrameDuration || change.hasMaxFrameDuration {
            restore.minFrameDuration = state.activeMinFrameDuration
            restore.maxFrameDuration = state.activeMaxFrameDuration
        }
        if change.hasFocus { restore.focus = state.focus }
        if change.hasExposure { restore.exposure = state.exposure }
        if change.hasWhiteBalance { restore.whiteBalance = state.whiteBalance }
        if change.hasZoom { restore.zoom = state.zoom }
        if change.hasTorch { restore.torch = state.torch }
        if change.hasPhotoOutput { restore.photoOutput = state.photoOutput }
        let touched = Set(change.rawControls.map(\.id))
        restore.rawControls = state.rawControls.filter { touched.contains($0.id) }
        return restore
    }

    static func message(_ error: any Error) -> String {
        if let error = error as? AgentClientError { return error.message + (error.code.map { " [\($0.name)]" } ?? "") }
        return "\(error)"
    }

    /// Keeps the session's leases alive until `stop()`.
    private func startRenewing() {
        guard renewal == nil, !leases.isEmpty else { return }
        let interval = Duration.milliseconds(Int64(leaseDuration / 3))
        renewal = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                guard !Task.isCancelled, let self else { return }
                await self.renewLeases()
            }
        }
    }

    /// Renews every lease, all agents at once (one after the other, a thousand round trips would
    /// outlast the leases), each agent's devices in turn.
    private func renewLeases() async {
        let held = Dictionary(grouping: inputs.compactMap { device in leases[device.name].map { (device, $0) } }) {
            ObjectIdentifier($0.0.agent)
        }
        let logger = self.logger
        await withTaskGroup(of: Void.self) { group in
            for devices in held.values {
                group.addTask {
                    for (device, lease) in devices {
                        var renew = WireRenewLease()
                        renew.leaseID = lease
                        do {
                            _ = try await device.agent.client().request(.renewLease(renew))
                        } catch {
                            logger.warning(
                                "could not renew the configuration lease",
                                metadata: ["device": "\(device.name)", "error": "\(Self.message(error))"])
                        }
                    }
                }
            }
        }
    }

    /// Releases every lease; the devices keep their configuration.
    public func stop() async {
        await unlockPhase()
        renewal?.cancel()
        renewal = nil
        let held = leases
        leases.removeAll()
        for device in inputs {
            guard let lease = held[device.name] else { continue }
            _ = await Self.unlock(device, lease: lease)
        }
    }

    /// The lease this session holds on an input, if any.
    public func lease(of device: String) -> String? { leases[device] }
}
