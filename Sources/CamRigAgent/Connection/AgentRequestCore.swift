import CamRigWire
import CamRigWireModel

/// The rules for a ready connection's requests, with no I/O: which requests this client may send,
/// which this agent serves, whether a trigger is well formed, how deep a stream's queue may be and how
/// much of the spool one fetch pages through. The connection hands every request to `request(_:)` and
/// carries out the `Action` it returns (postgres-nio's `ConnectionStateMachine` pattern), so every rule
/// is tested without a socket.
///
/// Ping and clock probes never get here: the connection answers them on the event loop as they arrive,
/// stamping them as near the socket as it can.
public struct AgentRequestCore: Sendable {
    /// What this agent serves.
    public struct Configuration: Sendable {
        public var agentID: String
        public var software: String
        public var devices: Bool
        public var capture: Bool
        public var clockChannel: Bool

        public init(agentID: String, software: String = "camrig-agent \(CamRigVersion.string)", devices: Bool, capture: Bool, clockChannel: Bool) {
            self.agentID = agentID
            self.software = software
            self.devices = devices
            self.capture = capture
            self.clockChannel = clockChannel
        }
    }

    /// What the connection does with a request.
    public enum Action: Sendable, Equatable {
        /// Answer at once with this message.
        case reply(WireEnvelope.OneOf_Body)
        /// Hand the request to the device service (list, describe, leases, configure).
        case devices(WireEnvelope.OneOf_Body)
        /// Open a UDP clock channel for this connection.
        case openClockChannel
        /// Start streaming a device, queueing at most `maxQueued` frames for this client.
        case startStream(deviceID: String, maxQueued: Int, preview: PreviewOptions? = nil)
        /// Stop one of this connection's streams.
        case stopStream(streamID: String)
        /// Push events of these kinds (all when empty).
        case subscribe(kinds: [WireEventKind])
        /// Take a photo now.
        case capturePhoto(WireCapturePhoto)
        /// Prepare a device for photos with these settings (none: release it).
        case preparePhotoSettings(WirePreparePhotoSettings)
        /// Make deferred photos' finals now (all when empty).
        case finalizePhotos([String])
        /// Report how full the result spool is.
        case spoolStatus
        /// Schedule a validated trigger.
        case scheduleTrigger(WireScheduleTrigger)
        /// Send spooled results of `session`, at most `limit` (0: all), each put in an object store first
        /// when `upload` says so.
        case fetchResults(session: String, limit: Int, upload: ResultUpload?)
        /// Delete acknowledged results.
        case acknowledgeResults([String])
        /// Start, re-aim or end a device's phase lock, or report phase status.
        case phase(WireEnvelope.OneOf_Body)
        /// Check, start, stop or list on-host recordings, send one of their files, or delete acknowledged ones.
        case recording(WireEnvelope.OneOf_Body)
    }

    /// Frames a stream queues for a client that asks for no particular depth.
    public static let defaultQueuedFrames = 4
    /// The deepest stream queue a client may ask for.
    public static let maximumQueuedFrames = 64

    public let configuration: Configuration
    public let client: ServerConnectionStateMachine.Client

    public init(configuration: Configuration, client: ServerConnectionStateMachine.Client) {
        self.configuration = configuration
        self.client = client
    }

    /// What to do with `request`.
    public func request(_ request: WireEnvelope.OneOf_Body) -> Action {
        let agentID = configuration.agentID
        guard client.role.mayRequest(request) else {
            return .reply(.error(WireError(
                .permissionDenied,
                agent: agentID,
                "'\(client.name)' has a \(client.role.roleName) certificate, which may not send \(request.messageName) to agent \(agentID); use a coordinator certificate"
            )))
        }
        switch request {
        case .openClockChannel:
            guard configuration.clockChannel else {
                return .reply(.error(WireError(.unsupported, agent: agentID, "agent \(agentID) has no UDP clock channel (see its log); probe over this connection instead")))
            }
            return .openClockChannel
        case .listDevices, .discoveryQuery, .describeDevice, .lock, .renewLease, .unlock, .configure:
            guard configuration.devices else { return unimplemented(request) }
            return .devices(request)
        case .startStream(let start):
            guard configuration.devices else { return unimplemented(request) }
            guard start.maxQueuedFrames <= Self.maximumQueuedFrames else {
                return .reply(.error(WireError(
                    .invalidArgument, agent: agentID, device: start.deviceID,
                    "max_queued_frames \(start.maxQueuedFrames) is above the agent's limit of \(Self.maximumQueuedFrames); ask for at most \(Self.maximumQueuedFrames) (0: the default of \(Self.defaultQueuedFrames))")))
            }
            let depth = start.maxQueuedFrames == 0 ? Self.defaultQueuedFrames : Int(start.maxQueuedFrames)
            if start.hasPreview {
                switch PreviewSubscriber.Options.from(start.preview) {
                case .success(let options): return .startStream(deviceID: start.deviceID, maxQueued: 1, preview: options)
                case .failure(let refusal):
                    return .reply(.error(WireError(.invalidArgument, agent: agentID, device: start.deviceID, "\(refusal.description) (StartStream.preview)")))
                }
            }
            return .startStream(deviceID: start.deviceID, maxQueued: depth)
        case .stopStream(let stop):
            guard configuration.devices else { return unimplemented(request) }
            return .stopStream(streamID: stop.streamID)
        case .subscribe(let subscribe):
            guard configuration.devices else { return unimplemented(request) }
            return .subscribe(kinds: subscribe.kinds)
        case .capturePhoto(let capture):
            guard configuration.capture else { return unimplemented(request) }
            return .capturePhoto(capture)
        case .preparePhotoSettings(let prepare):
            guard configuration.capture else { return unimplemented(request) }
            return .preparePhotoSettings(prepare)
        case .finalizePhotos(let finalize):
            guard configuration.capture else { return unimplemented(request) }
            return .finalizePhotos(finalize.photoIds)
        case .scheduleTrigger(let trigger):
            guard configuration.capture else { return unimplemented(request) }
            if let refusal = Self.validate(trigger, agentID: agentID) { return .reply(.error(refusal)) }
            return .scheduleTrigger(trigger)
        case .fetchResults(let fetch):
            guard configuration.capture else { return unimplemented(request) }
            // 0 asks for every result; the rest of a smaller page is reported as remaining.
            switch ResultUpload.from(fetch, agentID: agentID) {
            case .none: return .fetchResults(session: fetch.sessionID, limit: Int(fetch.maxResults), upload: nil)
            case .upload(let upload): return .fetchResults(session: fetch.sessionID, limit: Int(fetch.maxResults), upload: upload)
            case .refused(let refusal): return .reply(.error(refusal))
            }
        case .getSpoolStatus:
            guard configuration.capture else { return unimplemented(request) }
            return .spoolStatus
        case .acknowledgeResults(let acknowledge):
            guard configuration.capture else { return unimplemented(request) }
            return .acknowledgeResults(acknowledge.resultIds)
        case .lockPhase(let lock):
            guard configuration.devices else { return unimplemented(request) }
            guard lock.gridPeriodNs.isFinite, lock.gridPeriodNs > 0 else {
                return .reply(.error(WireError(.invalidArgument, agent: agentID, device: lock.deviceID, "lock_phase needs a positive grid_period_ns")))
            }
            return .phase(request)
        case .unlockPhase, .getPhaseStatus:
            guard configuration.devices else { return unimplemented(request) }
            return .phase(request)
        case .checkRecording, .startRecording, .stopRecording, .listRecordings, .fetchRecordingFile, .acknowledgeRecording, .uploadRecordingFile:
            guard configuration.capture, configuration.devices else { return unimplemented(request) }
            return .recording(request)
        default:
            return unimplemented(request)
        }
    }

    /// Why a trigger cannot be scheduled, if it cannot. Its timing is judged by the scheduler.
    static func validate(_ trigger: WireScheduleTrigger, agentID: String) -> WireError? {
        guard trigger.action == .capturePhoto || trigger.action == .startStream else {
            return WireError(.invalidArgument, agent: agentID, "trigger \(trigger.triggerID) has no action; use CAPTURE_PHOTO or START_STREAM")
        }
        guard !trigger.deviceIds.isEmpty else {
            return WireError(.invalidArgument, agent: agentID, "trigger \(trigger.triggerID) names no devices")
        }
        if trigger.action == .startStream && trigger.deviceIds.count != 1 {
            return WireError(.invalidArgument, agent: agentID, "a START_STREAM trigger names exactly one device (one trigger per device); got \(trigger.deviceIds.count)")
        }
        return nil
    }

    private func unimplemented(_ request: WireEnvelope.OneOf_Body) -> Action {
        .reply(.error(WireError(.unimplemented, agent: configuration.agentID, "agent \(configuration.agentID) (\(configuration.software)) does not serve \(request.messageName) yet")))
    }
}
