import CamRigWire
import CamRigWireModel
import NIOCore

/// Carries out what `AgentRequestCore` decides, with the services that own the agent's state: the
/// device service (devices, leases, hot-plug), streams, the trigger scheduler and the result service.
struct AgentRequestRouter: Sendable {
    let agentID: String
    let devices: AgentDevices?
    let streams: AgentStreams?
    let capture: AgentCapture?
    let results: ResultService?
    let clockChannel: ClockChannelServer?
    let phaseLocks: AgentPhaseLocks?
    let recordings: AgentRecordings?

    init(
        agentID: String,
        devices: AgentDevices?,
        streams: AgentStreams? = nil,
        capture: AgentCapture? = nil,
        results: ResultService? = nil,
        clockChannel: ClockChannelServer? = nil,
        phaseLocks: AgentPhaseLocks? = nil,
        recordings: AgentRecordings? = nil
    ) {
        self.recordings = recordings
        self.phaseLocks = phaseLocks
        self.clockChannel = clockChannel
        self.agentID = agentID
        self.devices = devices
        self.streams = streams
        self.capture = capture
        self.results = results
    }

    /// What this router serves, for the connections' request cores.
    var configuration: AgentRequestCore.Configuration {
        AgentRequestCore.Configuration(
            agentID: agentID,
            devices: devices != nil && streams != nil && phaseLocks != nil,
            capture: capture != nil && results != nil && recordings != nil,
            clockChannel: clockChannel != nil
        )
    }

    /// Where a connection's answers go: its event loop and a way to write (with a completion promise).
    struct Connection: Sendable {
        var id: UInt64
        var eventLoop: any EventLoop
        /// The connection's requests that take a while (finalizing, fetching, acknowledging), carried out
        /// one after another in the order they came.
        var work: ConnectionWork
        /// The largest frame the client accepts (its `Hello.max_frame_length`, raised to the minimum): what
        /// the agent sends in pieces (recorded files) is cut to fit it.
        var maxFrameLength: UInt32 = WireProtocol.minimumMaxFrameLength
        var write: @Sendable (WireFrame, EventLoopPromise<Void>?) -> Void

        /// Writes `frame` and returns once it is on the socket (or failed to get there).
        func send(_ frame: WireFrame) async throws {
            let promise = eventLoop.makePromise(of: Void.self)
            write(frame, promise)
            try await promise.futureResult.get()
        }
    }

    /// Carries out `action` for request `requestID` from `client` on `connection`.
    func run(_ action: AgentRequestCore.Action, requestID: UInt64, client: ServerConnectionStateMachine.Client, connection: Connection) {
        let reply: @Sendable (WireEnvelope.OneOf_Body) -> Void = { connection.write(WireFrame(requestID: requestID, $0), nil) }
        switch action {
        case .reply(let body):
            reply(body)
        case .openClockChannel:
            if let channel = clockChannel?.open(connection: connection.id) {
                reply(.clockChannel(channel))
            } else {
                reply(.error(WireError(.unsupported, agent: agentID, "agent \(agentID)'s UDP clock channel is not running (see its log); probe over this connection instead")))
            }
        case .devices(let body):
            devices?.handle(body, client: client, connection: connection.id, reply: reply)
        case .startStream(let deviceID, let maxQueued, let preview):
            streams?.open(deviceID: deviceID, requestID: requestID, connection: connection, maxQueued: maxQueued, preview: preview, reply: reply)
        case .stopStream(let streamID):
            guard let streams, let devices else { return }
            devices.queue.async {
                guard streams.owner(of: streamID) == connection.id else {
                    reply(.error(WireError(.notFound, agent: agentID, "no stream '\(streamID)' on this connection")))
                    return
                }
                reply(.ok(WireOk()))
                streams.stop(streamID: streamID, reason: .stopped)
            }
        case .subscribe(let kinds):
            devices?.events.subscribe(connection: connection.id, requestID: requestID, kinds: kinds) { connection.write($0, nil) }
            reply(.ok(WireOk()))
        case .capturePhoto(let photo):
            capture?.capturePhoto(photo, requestID: requestID, reply: reply)
        case .preparePhotoSettings(let prepare):
            guard let capture, let devices else { return }
            devices.queue.async { reply(capture.prepare(prepare)) }
        case .finalizePhotos(let ids):
            guard let capture else { return }
            connection.work.enqueue { reply(await capture.finalize(ids)) }
        case .scheduleTrigger(let trigger):
            capture?.schedule(trigger, requestID: requestID, connection: connection, reply: reply)
        case .fetchResults(let session, let limit, let upload):
            guard let results else { return }
            if upload != nil {
                // Uploads take a while: beside the connection's other work, never in its way.
                Task { await results.fetch(session: session, limit: limit, upload: upload, requestID: requestID, connection: connection) }
            } else {
                connection.work.enqueue { await results.fetch(session: session, limit: limit, requestID: requestID, connection: connection) }
            }
        case .spoolStatus:
            guard let results else { return }
            var status = WireSpoolStatus()
            status.usedBytes = results.spool.usedBytes
            status.capacityBytes = results.spool.capacityBytes
            status.results = UInt32(clamping: results.spool.count)
            reply(.spoolStatus(status))
        case .acknowledgeResults(let ids):
            guard let results else { return }
            connection.work.enqueue { await results.acknowledge(ids, requestID: requestID, connection: connection) }
        case .recording(let body):
            guard let recordings else { return }
            switch body {
            case .checkRecording(let check):
                connection.work.enqueue { reply(await recordings.check(check.tracks, duration: check.durationNs)) }
            // Neither goes on the connection's work queue: a start answers only when its recording ends, and a
            // stop must reach its recording while that start, or work queued behind it, still waits. The
            // recordings actor orders them; each task lives as long as its answer.
            case .startRecording(let start):
                Task { await recordings.start(start, requestID: requestID, connection: connection) }
            case .stopRecording(let stop):
                // The moment it arrived is the stop's, however long the actor takes to get to it.
                let at = recordings.now()
                Task { reply(await recordings.stop(stop.recordingID, at: at)) }
            case .listRecordings(let list):
                connection.work.enqueue { reply(.recordingList(await recordings.list(session: list.sessionID))) }
            case .fetchRecordingFile(let fetch):
                // A file takes a while: its chunks are sent beside the connection's other work, never in its way.
                Task { await recordings.fetch(fetch, requestID: requestID, connection: connection) }
            case .acknowledgeRecording(let acknowledge):
                connection.work.enqueue { reply(await recordings.acknowledge(acknowledge)) }
            case .uploadRecordingFile(let upload):
                Task { reply(await recordings.upload(upload)) }
            default:
                reply(.error(WireError(.unexpectedMessage, agent: agentID, "\(body.messageName) is not a recording request")))
            }
        case .phase(let body):
            guard let devices, let phaseLocks else { return }
            devices.queue.async { reply(Self.phase(body, client: client, connection: connection.id, devices: devices, phaseLocks: phaseLocks)) }
        }
    }

    /// A phase request, on the device queue: locking and unlocking take the device's lease.
    private static func phase(
        _ body: WireEnvelope.OneOf_Body,
        client: ServerConnectionStateMachine.Client,
        connection: UInt64,
        devices: AgentDevices,
        phaseLocks: AgentPhaseLocks
    ) -> WireEnvelope.OneOf_Body {
        switch body {
        case .lockPhase(let lock):
            switch devices.authorize(deviceID: lock.deviceID, leaseID: lock.leaseID, client: client, connection: connection, now: devices.clock.now()) {
            case .success(let (device, _)): return phaseLocks.lock(lock, device: device)
            case .failure(let refusal): return refusal.body
            }
        case .unlockPhase(let unlock):
            switch devices.authorize(deviceID: unlock.deviceID, leaseID: unlock.leaseID, client: client, connection: connection, now: devices.clock.now()) {
            case .success:
                phaseLocks.unlock(deviceID: unlock.deviceID)
                return .ok(WireOk())
            case .failure(let refusal): return refusal.body
            }
        case .getPhaseStatus(let query):
            return .phaseStatusList(phaseLocks.status(deviceIDs: query.deviceIds))
        default:
            return .error(WireError(.unexpectedMessage, agent: devices.agentID, "\(body.messageName) is not a phase request"))
        }
    }

    func connectionClosed(_ connection: UInt64) {
        clockChannel?.connectionClosed(connection)
        devices?.events.connectionClosed(connection)
        streams?.connectionClosed(connection)
        devices?.connectionClosed(connection)
    }
}

/// A connection's asynchronous work, carried out one item after another in the order it was enqueued,
/// by one task that lives as long as the connection: work is enqueued from the event loop and never
/// waited for there.
final class ConnectionWork: Sendable {
    typealias Item = @Sendable () async -> Void
    private let items: AsyncStream<Item>.Continuation

    init() {
        let (stream, items) = AsyncStream.makeStream(of: Item.self)
        self.items = items
        // The task holds the stream, not this object: it ends once this object is gone (or `finish()`
        // is called) and what was enqueued is done.
        Task {
            for await item in stream { await item() }
        }
    }

    deinit {
        items.finish()
    }

    /// Adds `work` after everything enqueued before it.
    func enqueue(_ work: @escaping Item) {
        items.yield(work)
    }

    /// Takes no more work; what was enqueued is still done.
    func finish() {
        items.finish()
    }
}
