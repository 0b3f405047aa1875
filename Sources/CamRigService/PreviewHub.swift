import CamRigCoordinator
import CamRigWire
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import ServiceLifecycle

/// Live previews of the rig's cameras, fetched from their agents only while someone watches.
///
/// The first watcher of a camera opens a preview stream on its agent (small JPEGs made on the agent,
/// `StartStream.preview`); the last one to leave closes it. Watchers share one stream per camera and
/// each sees the newest preview (one waiting at most: a slow watcher skips previews rather than
/// holding anything up).
///
/// One `PreviewStateMachine` under one lock decides; this class runs what it decides outside the lock
/// (yields, StartStream/StopStream, resuming whoever waits). Nothing polls: a feed waits for previews
/// to resume, `pause()` for the streams to close, and the keep-alive (a service of the group) for the
/// moment a feed has been quiet for 2 s.
public final class PreviewHub: Sendable {
    /// One preview picture.
    public struct Preview: Sendable {
        public var jpeg: ByteBuffer
        public var sequence: UInt64
        /// Agent clock, nanoseconds: when the frame it was made from was stamped.
        public var timestamp: Int64
        public var width: Int
        public var height: Int
        /// Previews the agent skipped before this one (it was still making or sending the previous one).
        public var droppedBefore: UInt64
        public var received: Date
    }

    /// What previews are asked for.
    public struct Options: Sendable {
        public var maxWidth: UInt32 = 320
        public var framesPerSecond: Double = 5
        public var quality: UInt32 = 70
        /// A feed whose watchers got nothing for this long is sent its newest preview again.
        public var keepAliveInterval: Duration = .seconds(2)
        public init() {}
    }

    typealias StateMachine = PreviewStateMachine<AsyncStream<Preview>.Continuation, AgentClient, CheckedContinuation<Void, Never>, Preview>
    private let state = NIOLockedValueBox(StateMachine())
    private let options: Options
    private let logger: Logger

    public init(options: Options = Options(), logger: Logger) {
        self.options = options
        self.logger = logger
    }

    // MARK: Watching

    /// Starts watching `device` (opening its preview stream if nobody watched it); the stream yields
    /// each preview as it arrives, the newest first if one is already there.
    public func watch(_ device: RigDevice) -> (id: UInt64, previews: AsyncStream<Preview>) {
        let (stream, continuation) = AsyncStream.makeStream(of: Preview.self, bufferingPolicy: .bufferingNewest(1))
        let name = device.name
        let (id, action) = state.withLockedValue { $0.watch(name, watcher: continuation) }
        continuation.onTermination = { [weak self] _ in self?.stopWatching(name, id: id) }
        switch action {
        case .startFeed(let generation):
            let task = Task { [self] in await self.feed(device, generation: generation) }
            state.withLockedValue { $0.feedStarted(name, generation: generation, task: task) }?.cancel()
        case .yield(let preview):
            continuation.yield(preview)
        case .none:
            break
        }
        return (id, stream)
    }

    /// Stops one watcher; the camera's preview stream closes when it was the last.
    public func stopWatching(_ name: String, id: UInt64) {
        let action = state.withLockedValue { $0.stopWatching(name, id: id) }
        action.finish?.finish()
        action.cancel?.cancel()
        action.resumeLoop?.resume()
        for waiter in action.resume { waiter.resume() }
        if let (client, streamID) = action.stopStream {
            // Closed by the last watcher leaving: tell the agent, so the camera stops if nobody else watches.
            Task { await Self.stop(streamID, on: client) }
        }
    }

    /// How many watch `name` now (0: its agent sends no previews).
    public func watcherCount(_ name: String) -> Int { state.withLockedValue { $0.watcherCount(name) } }

    /// Previews received for `name` since its stream opened.
    public func receivedCount(_ name: String) -> UInt64 { state.withLockedValue { $0.receivedCount(name) } }

    /// One preview of `device`: the newest if someone watches it, else the first of a stream opened for it.
    public func snapshot(_ device: RigDevice, timeout: Duration = .seconds(5)) async throws -> Preview {
        let (id, previews) = watch(device)
        defer { stopWatching(device.name, id: id) }
        let preview = await withTaskGroup(of: Preview?.self) { group in
            group.addTask {
                for await preview in previews { return preview }
                return nil
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return nil
            }
            defer { group.cancelAll() }
            return await group.next() ?? nil
        }
        if let preview { return preview }
        let error = state.withLockedValue { $0.error(device.name) }
        throw PreviewError(device: device.name, message: "no preview from \(device.name) within \(timeout)" + (error.map { ": \($0)" } ?? ""))
    }

    // MARK: Pausing

    /// Closes every preview stream on the agents until `resume()` (watchers keep watching and see the
    /// next preview after): a camera's format cannot change while it streams. Returns once they are
    /// closed (at most 2 s).
    public func pause() async {
        let open = state.withLockedValue { $0.pause() }
        for (client, streamID) in open { await Self.stop(streamID, on: client) }
        let id = state.withLockedValue { $0.makeID() }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { [state] in
                await withTaskCancellationHandler {
                    await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
                        if !state.withLockedValue({ $0.waitForQuiet(id: id, waiter: waiter) }) { waiter.resume() }
                    }
                } onCancel: {
                    state.withLockedValue { $0.cancelQuietWait(id: id) }?.resume()
                }
            }
            group.addTask { try? await Task.sleep(for: .seconds(2)) }
            await group.next()
            group.cancelAll()
        }
    }

    /// Lets preview streams open again after `pause()`.
    public func resume() {
        for loop in state.withLockedValue({ $0.resume() }) { loop.resume() }
    }

    /// Ends every preview stream (service shutdown).
    public func stopAll() {
        let action = state.withLockedValue { $0.stopAll() }
        for task in action.cancel { task.cancel() }
        for watcher in action.finish { watcher.finish() }
        for waiter in action.resume { waiter.resume() }
    }

    // MARK: A feed

    /// Asks the agent to end a preview stream (it answers Ok, then ends the stream with StreamEnded).
    private static func stop(_ streamID: String, on client: AgentClient) async {
        var stop = WireStopStream()
        stop.streamID = streamID
        _ = try? await client.request(.stopStream(stop))
    }

    /// Waits until the feed may open its stream: false when the feed is gone.
    private func mayOpen(_ name: String, generation: UInt64) async -> Bool {
        while !Task.isCancelled {
            switch state.withLockedValue({ $0.openStream(name, generation: generation) }) {
            case .open: return true
            case .end: return false
            case .wait:
                await withTaskCancellationHandler {
                    await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
                        if !state.withLockedValue({ $0.park(name, generation: generation, waiter: waiter) }) { waiter.resume() }
                    }
                } onCancel: { [state] in
                    state.withLockedValue { $0.cancelWait(name, generation: generation) }?.resume()
                }
            }
        }
        return false
    }

    /// Keeps `device`'s preview stream open while the feed lives, reopening it a second after it ends
    /// (agent restarted, camera unplugged and back).
    private func feed(_ device: RigDevice, generation: UInt64) async {
        let name = device.name
        while await mayOpen(name, generation: generation) {
            var failure: String?
            do {
                let client = try device.agent.client()
                var start = WireStartStream()
                start.deviceID = device.deviceID
                start.preview.maxWidth = options.maxWidth
                start.preview.maxFramesPerSecond = options.framesPerSecond
                start.preview.jpegQuality = options.quality
                streaming: for try await frame in client.stream(.startStream(start), buffering: .init(lowWatermark: 1, highWatermark: 2)) {
                    switch frame.envelope.body {
                    case .streamStarted(let started):
                        // Previews paused while this stream was being opened: closed at once.
                        if let (client, streamID) = state.withLockedValue({ $0.streamStarted(name, generation: generation, client: client, streamID: started.streamID) }) {
                            await Self.stop(streamID, on: client)
                        }
                    case .videoFrame(let video):
                        guard let payload = frame.payload else { continue }
                        let preview = Preview(
                            jpeg: payload, sequence: video.sequence, timestamp: video.timestamp.nanoseconds, width: Int(video.dimensions.width),
                            height: Int(video.dimensions.height), droppedBefore: video.droppedBefore, received: Date())
                        let action = state.withLockedValue { $0.received(name, generation: generation, preview, at: .now) }
                        for watcher in action.watchers { watcher.yield(preview) }
                        action.keepAlive?.resume()
                    case .streamEnded(let ended):
                        failure = ended.message.isEmpty ? "the preview stream ended" : ended.message
                        break streaming
                    case .error(let error):
                        failure = error.message
                        break streaming
                    default:
                        continue
                    }
                }
            } catch {
                logger.debug("preview stream failed", metadata: ["camera": "\(name)", "error": "\(error)"])
                if !(error is CancellationError) { failure = "\(error)" }
            }
            for waiter in state.withLockedValue({ $0.streamClosed(name, generation: generation, error: failure) }) { waiter.resume() }
            if Task.isCancelled { return }
            // A stream that ended on its own is tried again after a second (not when paused: it waits).
            if !state.withLockedValue({ $0.isPaused }) { try? await Task.sleep(for: .seconds(1)) }
        }
    }
}

extension PreviewHub: Service {
    /// The keep-alive, until graceful shutdown: a feed whose watchers got nothing for
    /// `keepAliveInterval` (its agent down, the camera unplugged, previews paused) is sent its newest
    /// preview again, so that a watcher that left is noticed by its next write failing.
    public func run() async throws {
        let (state, interval) = (self.state, options.keepAliveInterval)
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                switch state.withLockedValue({ $0.keepAlive(now: .now, interval: interval) }) {
                case .end:
                    return
                case .resend(let feeds):
                    for (watchers, preview) in feeds { for watcher in watchers { watcher.yield(preview) } }
                case .sleep(let deadline):
                    try? await Task.sleep(until: deadline, clock: .continuous)
                case .wait:
                    await withTaskCancellationHandler {
                        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
                            if !state.withLockedValue({ $0.parkKeepAlive(waiter) }) { waiter.resume() }
                        }
                    } onCancel: {
                        state.withLockedValue { $0.cancelKeepAliveWait() }?.resume()
                    }
                }
            }
        }
    }
}

/// A camera's preview could not be had.
public struct PreviewError: Error, Sendable, CustomStringConvertible {
    public var device: String
    public var message: String
    public var description: String { message }
}
