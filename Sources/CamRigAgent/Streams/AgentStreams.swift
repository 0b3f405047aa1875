import CamRigDeviceModel
import CamRigDevices
import CamRigWire
import CamRigWireModel
import Logging
import NIOConcurrencyHelpers
import NIOCore

/// Live streams: one device stream fans out to every client watching that device.
///
/// Each watcher gets frames through its own `StreamSubscriber`, which applies back-pressure per client.
/// Which devices stream and who watches them is one `State` under one lock; devices are started and
/// stopped, and watchers told, outside it.
public final class AgentStreams: Sendable {
    let devices: AgentDevices
    private let logger: Logger

    /// One device's stream and its watchers.
    struct Hub {
        /// Tells this stream from a later one of the same device.
        let id: UInt64
        var subscribers: [String: any FrameSink] = [:]
        /// Reads the device's frames and hands them to the subscribers.
        var task: Task<Void, Never>?
    }

    struct State {
        var hubs: [String: Hub] = [:]
        /// Streams whose last watcher left, by device, until their task has ended (and with it the
        /// device's stream): the device cannot stream again before.
        var stopping: [String: (hub: UInt64, task: Task<Void, Never>)] = [:]
        var nextStreamID: UInt64 = 1
        var nextHubID: UInt64 = 1

        /// Adds `subscriber` to `deviceID`'s stream; returns the hub's id and whether it is new (the device
        /// is to be started).
        mutating func add(_ subscriber: any FrameSink, streamID: String, deviceID: String) -> (hub: UInt64, isNew: Bool) {
            if hubs[deviceID] != nil {
                hubs[deviceID]!.subscribers[streamID] = subscriber
                return (hubs[deviceID]!.id, false)
            }
            let id = nextHubID
            nextHubID += 1
            hubs[deviceID] = Hub(id: id, subscribers: [streamID: subscriber])
            return (id, true)
        }

        /// The subscribers of hub `id` of `deviceID`, while it is current.
        func subscribers(deviceID: String, hub id: UInt64) -> [any FrameSink] {
            guard let hub = hubs[deviceID], hub.id == id else { return [] }
            return Array(hub.subscribers.values)
        }

        /// Removes stream `streamID`; returns its subscriber, and the task to cancel when it was the device's last.
        mutating func remove(streamID: String) -> (subscriber: any FrameSink, cancel: Task<Void, Never>?)? {
            guard let deviceID = hubs.first(where: { $0.value.subscribers[streamID] != nil })?.key,
                let subscriber = hubs[deviceID]!.subscribers.removeValue(forKey: streamID)
            else { return nil }
            guard hubs[deviceID]!.subscribers.isEmpty else { return (subscriber, nil) }
            let hub = hubs.removeValue(forKey: deviceID)!
            if let task = hub.task { stopping[deviceID] = (hub.id, task) }
            return (subscriber, hub.task)
        }

        /// Hub `id`'s task ended: its device may stream again.
        mutating func ended(deviceID: String, hub id: UInt64) {
            if stopping[deviceID]?.hub == id { stopping[deviceID] = nil }
        }

        func subscribers(where matches: (any FrameSink) -> Bool) -> [any FrameSink] {
            hubs.values.flatMap { $0.subscribers.values.filter(matches) }
        }
    }

    private let state = NIOLockedValueBox(State())

    init(devices: AgentDevices, logger: Logger) {
        self.devices = devices
        self.logger = logger
    }

    /// Starts delivering `deviceID`'s frames to `subscriber`; returns the stream id and the format, or an error.
    enum Start {
        case started(streamID: String, format: DeviceFormat)
        case failed(WireError)
    }

    /// `start(deviceID:subscriber:)` once the device's previous stream, stopped when its last watcher
    /// left, has wound down: a capture right after another would otherwise find the camera still busy.
    func startAfterPreviousStream(deviceID: String, subscriber: any FrameSink) async -> Start {
        if let previous = state.withLockedValue({ $0.stopping[deviceID]?.task }) { await previous.value }
        return start(deviceID: deviceID, subscriber: subscriber)
    }

    func start(deviceID: String, subscriber: any FrameSink) -> Start {
        guard let device = devices.discovery.device(uniqueID: deviceID) else {
            return .failed(WireError(.deviceNotFound, agent: devices.agentID, device: deviceID, "agent \(devices.agentID) has no device '\(deviceID)'"))
        }
        let agentID = devices.agentID
        let streamID = state.withLockedValue { state in
            defer { state.nextStreamID += 1 }
            return "\(agentID)-s\(state.nextStreamID)"
        }
        // Assigned before the subscriber can get its first frame.
        subscriber.assign(streamID: streamID)
        let (hubID, isNew) = state.withLockedValue { $0.add(subscriber, streamID: streamID, deviceID: deviceID) }
        if isNew {
            let frames: FrameStream
            do {
                frames = try device.frames(bufferLimit: 8)
            } catch {
                state.withLockedValue { if $0.hubs[deviceID]?.id == hubID { $0.hubs[deviceID] = nil } }
                return .failed(error.wire(agentID: devices.agentID))
            }
            let task = Task { await self.deliver(frames, deviceID: deviceID, hub: hubID) }
            let stopped = state.withLockedValue { state -> Bool in
                guard state.hubs[deviceID]?.id == hubID else { return true }
                state.hubs[deviceID]!.task = task
                return false
            }
            // Every watcher left before the task was kept: nobody else stops the device.
            if stopped { task.cancel() }
        }
        return .started(streamID: streamID, format: device.activeFormat)
    }

    /// Hands a device's frames to its stream's subscribers until the stream is stopped (the task is
    /// cancelled) or the device ends it, which ends every subscriber's stream, saying why.
    private func deliver(_ frames: FrameStream, deviceID: String, hub: UInt64) async {
        var ending: (WireStreamEndReason, String) = (.stopped, "")
        do {
            for try await frame in frames {
                for subscriber in state.withLockedValue({ $0.subscribers(deviceID: deviceID, hub: hub) }) { subscriber.deliver(frame) }
            }
        } catch let error as DeviceError {
            ending = (error.code == .disconnected ? .deviceDisconnected : .deviceError, error.description)
            logger.warning("stream ended by the device", metadata: ["device": "\(deviceID)", "error": "\(error)"])
        } catch {
            ending = (.deviceError, "\(error)")
        }
        let subscribers = state.withLockedValue { state -> [any FrameSink] in
            state.ended(deviceID: deviceID, hub: hub)
            // Stopped: whoever stopped it told the watchers.
            guard !Task.isCancelled, let current = state.hubs[deviceID], current.id == hub else { return [] }
            state.hubs[deviceID] = nil
            return Array(current.subscribers.values)
        }
        for subscriber in subscribers { subscriber.end(reason: ending.0, message: ending.1) }
    }

    /// Opens a client's stream of `deviceID` on `connection`, on request `requestID` (`StreamStarted`,
    /// `VideoFrame`…, `StreamEnded`), starting the device on the device service's queue; a device that
    /// cannot stream is answered through `reply` with its error.
    func open(
        deviceID: String,
        requestID: UInt64,
        connection: AgentRequestRouter.Connection,
        maxQueued: Int,
        notBefore: Int64 = .min,
        preview: PreviewSubscriber.Options? = nil,
        reply: @escaping @Sendable (WireEnvelope.OneOf_Body) -> Void
    ) {
        let subscriber = StreamSubscriber(
            requestID: requestID,
            connection: connection.id,
            maxQueued: maxQueued,
            notBefore: notBefore,
            eventLoop: connection.eventLoop,
            write: connection.write
        )
        subscriber.abandon = { [weak self] streamID in
            guard let streams = self else { return }
            streams.devices.queue.async { streams.stop(streamID: streamID, reason: .frameTooLarge) }
        }
        let sink: any FrameSink = preview.map { PreviewSubscriber(inner: subscriber, options: $0) } ?? subscriber
        devices.queue.async {
            switch self.start(deviceID: deviceID, subscriber: sink) {
            case .started(_, let format): subscriber.open(format: format)
            case .failed(let error): reply(.error(error))
            }
        }
    }

    /// Stops one stream; the device stops when its last watcher leaves. Returns the subscriber, if found.
    @discardableResult
    func stop(streamID: String, reason: WireStreamEndReason, message: String = "") -> (any FrameSink)? {
        guard let (subscriber, task) = state.withLockedValue({ $0.remove(streamID: streamID) }) else { return nil }
        task?.cancel()
        subscriber.end(reason: reason, message: message)
        return subscriber
    }

    /// How many watchers `deviceID`'s stream has (0 when it is not streaming).
    func watcherCount(deviceID: String) -> Int {
        state.withLockedValue { $0.hubs[deviceID]?.subscribers.count ?? 0 }
    }

    /// How many watch `deviceID`'s frames themselves: watchers a restart of the camera's stream would
    /// disturb. Preview watchers are left out: a restart costs them a preview at most.
    func frameWatcherCount(deviceID: String) -> Int {
        state.withLockedValue { $0.hubs[deviceID]?.subscribers.values.filter { !($0 is PreviewSubscriber) }.count ?? 0 }
    }

    /// Whether one of `deviceID`'s watchers is `matching` (a phase lock asks whether a recording watches).
    func isWatched(deviceID: String, by matching: (any FrameSink) -> Bool) -> Bool {
        state.withLockedValue { $0.hubs[deviceID]?.subscribers.values.contains(where: matching) ?? false }
    }

    /// The connection that opened a stream, if it exists.
    func owner(of streamID: String) -> UInt64? {
        state.withLockedValue { state in state.hubs.values.lazy.compactMap { $0.subscribers[streamID]?.connection }.first }
    }

    /// Whether a stream of `connection` still answers under `requestID` (its frames carry that id).
    func holds(requestID: UInt64, connection: UInt64) -> Bool {
        state.withLockedValue { state in
            !state.subscribers {
                (($0 as? StreamSubscriber) ?? ($0 as? PreviewSubscriber)?.inner).map { $0.connection == connection && $0.requestID == requestID } ?? false
            }.isEmpty
        }
    }

    /// Ends every stream of a closed connection.
    func connectionClosed(_ connection: UInt64) {
        let streams = state.withLockedValue { $0.subscribers { $0.connection == connection }.map(\.streamID) }
        for streamID in streams { stop(streamID: streamID, reason: .stopped, message: "client disconnected") }
    }

    /// Ends every stream (agent shutdown).
    func stopAll(message: String) {
        let streams = state.withLockedValue { $0.subscribers { _ in true }.map(\.streamID) }
        for streamID in streams { stop(streamID: streamID, reason: .shuttingDown, message: message) }
    }
}

/// Where a device stream's frames go.
protocol FrameSink: AnyObject, Sendable {
    /// The stream's id, assigned once by `AgentStreams.start` before the first frame.
    var streamID: String { get }
    func assign(streamID: String)
    var connection: UInt64 { get }
    func deliver(_ frame: CapturedFrame)
    func end(reason: WireStreamEndReason, message: String)
}

extension AgentStreams {
    /// The first frame of `deviceID` whose exposure started at or after `notBefore` (agent clock), from the device's
    /// stream (started for the purpose if nobody watches it).
    func nextFrame(deviceID: String, notBefore: Int64, timeout: Duration = .seconds(5)) async throws -> CapturedFrame {
        try await frames(deviceID: deviceID, selection: .from(notBefore, count: 1), timeout: timeout)[0]
    }

    /// The frames of `deviceID` that `selection` picks, from the device's stream (started for the purpose
    /// if nobody watches it).
    func frames(deviceID: String, selection: FrameSelection, timeout: Duration = .seconds(5)) async throws -> [CapturedFrame] {
        // Zero shutter lag: a streaming camera's newest frame, delivered once its exposure and readout
        // ended, is the most recent picture there is when the instant has already come (a photo taken
        // now). Exposed within two frame periods before the instant, it is the photo, at once.
        if case .nearest(let instant, let newest?, let period) = selection, period > 0, newest.exposureStart <= instant,
            Double(instant - newest.exposureStart) <= 2 * period
        {
            return [newest]
        }
        let sink = FramesSink(selection)
        if case .failed(let error) = await startAfterPreviousStream(deviceID: deviceID, subscriber: sink) {
            throw WireProtocolError(error.code, error.message)
        }
        let timer = Task {
            guard (try? await Task.sleep(for: timeout)) != nil else { return }
            sink.fail(WireProtocolError(.internal, "\(deviceID) delivered no frame within \(timeout)"))
        }
        defer { timer.cancel() }
        let frames: [CapturedFrame]
        do {
            frames = try await withCheckedThrowingContinuation { sink.wait($0) }
        } catch {
            stop(streamID: sink.streamID, reason: .stopped)
            throw error
        }
        stop(streamID: sink.streamID, reason: .stopped)
        return frames
    }
}

/// Which frames of a stream a capture takes.
enum FrameSelection: Sendable {
    /// `count` consecutive frames, the first exposed at or after the instant (agent clock).
    case from(Int64, count: Int)
    /// The one frame whose exposure started nearest the instant, before or after it (zero shutter lag:
    /// the frame before the instant is already there when the instant comes). `newest` is a frame the
    /// stream delivered before the capture began (a prepared camera's), a candidate if exposed before it;
    /// `period` is the camera's frame period in nanoseconds.
    case nearest(Int64, newest: CapturedFrame? = nil, period: Double = 0)
}

/// Takes the frames a capture needs from a stream.
final class FramesSink: FrameSink {
    private struct State {
        var streamID = ""
        /// Frames taken so far (for `.from`), or the latest frame before the instant (for `.nearest`).
        var taken: [CapturedFrame] = []
        /// Who waits for the frames.
        var continuation: CheckedContinuation<[CapturedFrame], any Error>?
        /// How it ended, once it did (kept for a waiter that comes later).
        var outcome: Result<[CapturedFrame], any Error>?

        /// Ends with `outcome`, once: returns the waiter to resume, if one waits.
        mutating func finish(_ outcome: Result<[CapturedFrame], any Error>) -> CheckedContinuation<[CapturedFrame], any Error>? {
            guard self.outcome == nil else { return nil }
            self.outcome = outcome
            defer { continuation = nil }
            return continuation
        }
    }

    private let state = NIOLockedValueBox(State())
    var streamID: String { state.withLockedValue { $0.streamID } }
    func assign(streamID: String) { state.withLockedValue { $0.streamID = streamID } }
    let connection: UInt64 = 0
    let selection: FrameSelection

    init(_ selection: FrameSelection) {
        self.selection = selection
        if case .nearest(let instant, let newest?, _) = selection, newest.exposureStart < instant { state.withLockedValue { $0.taken = [newest] } }
    }

    /// Resumes `continuation` with the frames, or the failure, once there are (at once if there are already).
    func wait(_ continuation: CheckedContinuation<[CapturedFrame], any Error>) {
        let outcome = state.withLockedValue { state -> Result<[CapturedFrame], any Error>? in
            if state.outcome == nil { state.continuation = continuation }
            return state.outcome
        }
        if let outcome { continuation.resume(with: outcome) }
    }

    func deliver(_ frame: CapturedFrame) {
        let (complete, waiter) = state.withLockedValue { state -> ([CapturedFrame]?, CheckedContinuation<[CapturedFrame], any Error>?) in
            guard state.outcome == nil, let complete = Self.take(frame, into: &state.taken, selection: selection) else { return (nil, nil) }
            return (complete, state.finish(.success(complete)))
        }
        if let complete { waiter?.resume(returning: complete) }
    }

    /// Adds `frame` to those taken; returns the frames once the selection is complete.
    private static func take(_ frame: CapturedFrame, into taken: inout [CapturedFrame], selection: FrameSelection) -> [CapturedFrame]? {
        switch selection {
        case .from(let notBefore, let count):
            guard frame.exposureStart >= notBefore else { return nil }
            taken.append(frame)
            return taken.count >= count ? taken : nil
        case .nearest(let instant, _, _):
            guard frame.exposureStart >= instant else {
                taken = [frame]
                return nil
            }
            if let before = taken.first, instant - before.exposureStart <= frame.exposureStart - instant { return [before] }
            return [frame]
        }
    }

    func end(reason: WireStreamEndReason, message: String) {
        fail(WireProtocolError(reason == .deviceDisconnected ? .deviceDisconnected : .internal, "stream ended before a frame: \(message)"))
    }

    func fail(_ error: WireProtocolError) {
        state.withLockedValue { $0.finish(.failure(error)) }?.resume(throwing: error)
    }
}

/// Keeps a prepared camera streaming and its newest frame at hand, for photos.
final class NewestFrameSink: FrameSink {
    private struct State {
        var streamID = ""
        /// The stream's most recent frames, oldest first (a short ring: zero shutter lag for every level).
        var recent: [CapturedFrame] = []
    }

    private let state = NIOLockedValueBox(State())
    var streamID: String { state.withLockedValue { $0.streamID } }
    func assign(streamID: String) { state.withLockedValue { $0.streamID = streamID } }
    let connection: UInt64 = 0
    /// How many frames the ring holds.
    let capacity: Int
    private let onEnd: @Sendable (NewestFrameSink) -> Void

    /// `onEnd` runs when the stream ends on its own (the device vanished or failed, the agent stops).
    init(capacity: Int = PhotoPlan.qualityFrames, onEnd: @escaping @Sendable (NewestFrameSink) -> Void) {
        self.capacity = max(1, capacity)
        self.onEnd = onEnd
    }

    var newest: CapturedFrame? { state.withLockedValue { $0.recent.last } }

    /// Up to `count` frames exposed before `frame` (same format), newest first.
    func recent(before frame: CapturedFrame, count: Int) -> [CapturedFrame] {
        state.withLockedValue { state in
            Array(state.recent.filter { $0.exposureStart < frame.exposureStart && $0.format == frame.format }.suffix(count).reversed())
        }
    }

    func deliver(_ frame: CapturedFrame) {
        state.withLockedValue { state in
            if state.recent.count >= capacity { state.recent.removeFirst(state.recent.count - capacity + 1) }
            state.recent.append(frame)
        }
    }

    func end(reason: WireStreamEndReason, message: String) {
        state.withLockedValue { $0.recent = [] }
        if reason != .stopped { onEnd(self) }
    }
}

/// One client's view of a stream, living on its connection's event loop.
///
/// At most `maxQueued` frames are written and not yet on the wire; a frame that arrives while the
/// client is that far behind is dropped and counted, and the next frame sent says how many were
/// dropped before it (`dropped_before`). Memory per client is bounded by `maxQueued` frames, however
/// slowly it reads.
final class StreamSubscriber: FrameSink {
    let requestID: UInt64
    let connection: UInt64
    let maxQueued: Int
    /// Frames exposed before this agent time are not sent (a stream started by a trigger at T).
    let notBefore: Int64
    let eventLoop: any EventLoop
    private let write: @Sendable (WireFrame, EventLoopPromise<Void>?) -> Void

    /// What is set from other threads: the stream id `AgentStreams` assigns, and who is told when the
    /// subscriber ends its own stream.
    private struct Registration {
        var streamID = ""
        var abandon: (@Sendable (String) -> Void)?
    }

    private let registration = NIOLockedValueBox(Registration())
    var streamID: String { registration.withLockedValue { $0.streamID } }
    func assign(streamID: String) { registration.withLockedValue { $0.streamID = streamID } }

    /// What the subscriber keeps on its event loop.
    private struct State {
        /// The stream's id, kept here from `open` on so that sending a frame takes no lock.
        var streamID = ""
        var inFlight = 0
        var droppedSinceLastSent: UInt64 = 0
        var sent: UInt64 = 0
        var dropped: UInt64 = 0
        var ended = false
        var opened = false
    }

    private let state: NIOLoopBoundBox<State>

    init(
        requestID: UInt64,
        connection: UInt64,
        maxQueued: Int,
        notBefore: Int64 = .min,
        eventLoop: any EventLoop,
        write: @escaping @Sendable (WireFrame, EventLoopPromise<Void>?) -> Void
    ) {
        self.requestID = requestID
        self.connection = connection
        self.maxQueued = maxQueued
        self.notBefore = notBefore
        self.eventLoop = eventLoop
        self.write = write
        state = NIOLoopBoundBox.makeBoxSendingValue(State(), eventLoop: eventLoop)
    }

    /// Called from the device's stream task.
    func deliver(_ frame: CapturedFrame) {
        eventLoop.execute { self.send(frame) }
    }

    /// Writes `StreamStarted` on the event loop; frames are sent from then on.
    func open(format: DeviceFormat) {
        eventLoop.execute {
            guard !self.state.value.ended else { return }
            self.state.value.streamID = self.streamID
            var started = WireStreamStarted()
            started.streamID = self.state.value.streamID
            started.format = WireFormat(format)
            self.write(WireFrame(requestID: self.requestID, .streamStarted(started)), nil)
            self.state.value.opened = true
        }
    }

    private func send(_ frame: CapturedFrame) {
        guard state.value.opened, !state.value.ended, frame.exposureStart >= notBefore else { return }
        guard state.value.inFlight < maxQueued else {
            state.value.droppedSinceLastSent += 1
            state.value.dropped += 1
            return
        }
        let message = WireVideoFrame(frame, streamID: state.value.streamID, droppedBefore: state.value.droppedSinceLastSent)
        state.value.droppedSinceLastSent = 0
        state.value.inFlight += 1
        state.value.sent += 1
        let promise = eventLoop.makePromise(of: Void.self)
        promise.futureResult.whenComplete { result in
            self.state.value.inFlight -= 1
            if case .failure(let error as WireProtocolError) = result, error.code == .frameTooLarge {
                self.frameTooLarge(error)
            }
        }
        write(WireFrame(requestID: requestID, .videoFrame(message), payload: frame.bytes), promise)
    }

    /// A frame could not be sent at all: it is larger than the client said it accepts. Every frame of
    /// the format would be, so the stream ends, saying why, rather than going silent.
    private func frameTooLarge(_ error: WireProtocolError) {
        guard !state.value.ended else { return }
        state.value.sent -= 1
        state.value.dropped += 1
        end(
            reason: .frameTooLarge,
            message: "\(error.message): announce a larger max_frame_length in Hello or choose a smaller format")
        abandon?(streamID)
    }

    /// Called once when the subscriber ends its own stream, so the device stops if nobody else watches.
    var abandon: (@Sendable (String) -> Void)? {
        get { registration.withLockedValue { $0.abandon } }
        set { registration.withLockedValue { $0.abandon = newValue } }
    }

    /// Sends `StreamEnded` once.
    func end(reason: WireStreamEndReason, message: String) {
        eventLoop.execute {
            guard !self.state.value.ended else { return }
            self.state.value.ended = true
            var ended = WireStreamEnded()
            ended.streamID = self.streamID
            ended.reason = reason
            ended.framesSent = self.state.value.sent
            ended.framesDropped = self.state.value.dropped
            ended.message = message
            self.write(WireFrame(requestID: self.requestID, .streamEnded(ended)), nil)
        }
    }
}
