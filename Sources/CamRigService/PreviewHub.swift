import CamRigCoordinator
import CamRigWire
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore

/// Live previews of the rig's cameras, fetched from their agents only while someone watches.
///
/// The first watcher of a camera opens a preview stream on its agent (small JPEGs made on the agent,
/// `StartStream.preview`); the last one to leave closes it. Watchers share one stream per camera and
/// each sees the newest preview (one waiting at most: a slow watcher skips previews rather than
/// holding anything up).
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
        public init() {}
    }

    private final class Feed: Sendable {
        struct State {
            var watchers: [UInt64: AsyncStream<Preview>.Continuation] = [:]
            var latest: Preview?
            var received: UInt64 = 0
            var error: String?
            /// The stream open now, to stop it when previews pause.
            var open: (client: AgentClient, streamID: String)?
            /// A StartStream sent and not yet answered.
            var opening = false
        }
        let state = NIOLockedValueBox(State())
        let task = NIOLockedValueBox<Task<Void, Never>?>(nil)
    }

    private let feeds = NIOLockedValueBox<[String: Feed]>([:])
    /// While above 0, no preview stream is open (`paused`).
    private let pauses = NIOLockedValueBox(0)
    private let nextWatcher = NIOLockedValueBox<UInt64>(1)
    private let options: Options
    private let logger: Logger

    public init(options: Options = Options(), logger: Logger) {
        self.options = options
        self.logger = logger
    }

    /// Sends each feed's newest preview again to its watchers when nothing newer came for 2 s (its agent
    /// down, the camera unplugged, previews paused), so that a watcher that left is noticed by its next
    /// write failing. Runs until cancelled.
    public func keepAlive() async {
        while !Task.isCancelled {
            try? await Task.sleep(for: .seconds(2))
            let all = feeds.withLockedValue { Array($0.values) }
            for feed in all {
                let (latest, watchers) = feed.state.withLockedValue { state in (state.latest, Array(state.watchers.values)) }
                guard let latest, Date().timeIntervalSince(latest.received) >= 2 else { continue }
                for watcher in watchers { watcher.yield(latest) }
            }
        }
    }

    /// Starts watching `device` (opening its preview stream if nobody watched it); the stream yields
    /// each preview as it arrives, the newest first if one is already there.
    public func watch(_ device: RigDevice) -> (id: UInt64, previews: AsyncStream<Preview>) {
        let id = nextWatcher.withLockedValue { value in
            defer { value += 1 }
            return value
        }
        let (stream, continuation) = AsyncStream.makeStream(of: Preview.self, bufferingPolicy: .bufferingNewest(1))
        // The watcher joins under the hub's lock, so a last watcher leaving at the same moment cannot
        // close the feed this one just joined.
        let (feed, isNew) = feeds.withLockedValue { feeds -> (Feed, Bool) in
            let existing = feeds[device.name]
            let feed = existing ?? Feed()
            feeds[device.name] = feed
            feed.state.withLockedValue { state in
                state.watchers[id] = continuation
                if let latest = state.latest { continuation.yield(latest) }
            }
            return (feed, existing == nil)
        }
        continuation.onTermination = { [weak self] _ in self?.stopWatching(device.name, id: id) }
        if isNew {
            let options = self.options
            let logger = self.logger
            let pauses = self.pauses
            feed.task.withLockedValue {
                $0 = Task { await Self.run(feed, device: device, options: options, paused: { pauses.withLockedValue { $0 > 0 } }, logger: logger) }
            }
        }
        return (id, stream)
    }

    /// Stops one watcher; the camera's preview stream closes when it was the last.
    public func stopWatching(_ name: String, id: UInt64) {
        let (continuation, emptied) = feeds.withLockedValue { feeds -> (AsyncStream<Preview>.Continuation?, Feed?) in
            guard let feed = feeds[name] else { return (nil, nil) }
            let (continuation, remaining) = feed.state.withLockedValue { state in
                (state.watchers.removeValue(forKey: id), state.watchers.count)
            }
            guard remaining == 0 else { return (continuation, nil) }
            feeds.removeValue(forKey: name)
            return (continuation, feed)
        }
        continuation?.finish()
        emptied?.task.withLockedValue { $0?.cancel() }
    }

    /// How many watch `name` now (0: its agent sends no previews).
    public func watcherCount(_ name: String) -> Int {
        feeds.withLockedValue { $0[name] }?.state.withLockedValue { $0.watchers.count } ?? 0
    }

    /// Previews received for `name` since its stream opened.
    public func receivedCount(_ name: String) -> UInt64 {
        feeds.withLockedValue { $0[name] }?.state.withLockedValue { $0.received } ?? 0
    }

    /// One preview of `device`: the newest if someone watches it, else the first of a stream opened for it.
    public func snapshot(_ device: RigDevice, timeout: Duration = .seconds(5)) async throws -> Preview {
        let (id, previews) = watch(device)
        defer { stopWatching(device.name, id: id) }
        return try await withThrowingTaskGroup(of: Preview?.self) { group in
            group.addTask {
                for await preview in previews { return preview }
                return nil
            }
            group.addTask {
                try await Task.sleep(for: timeout)
                return nil
            }
            defer { group.cancelAll() }
            if let preview = try await group.next() ?? nil { return preview }
            let error = feeds.withLockedValue { $0[device.name] }?.state.withLockedValue { $0.error }
            throw PreviewError(
                device: device.name,
                message: "no preview from \(device.name) within \(timeout)" + (error.map { ": \($0)" } ?? ""))
        }
    }

    /// Closes every preview stream on the agents until `resume()` (watchers keep watching and see the
    /// next preview after): a camera's format cannot change while it streams. Returns once they are
    /// closed (at most 2 s).
    public func pause() async {
        pauses.withLockedValue { $0 += 1 }
        let all = feeds.withLockedValue { Array($0.values) }
        for feed in all {
            guard let (client, streamID) = feed.state.withLockedValue({ $0.open }) else { continue }
            await Self.stop(streamID, on: client)
        }
        let deadline = ContinuousClock.now + .seconds(2)
        while ContinuousClock.now < deadline, all.contains(where: { feed in feed.state.withLockedValue { $0.open != nil || $0.opening } }) {
            try? await Task.sleep(for: .milliseconds(20))
        }
    }

    /// Lets preview streams open again after `pause()`.
    public func resume() {
        pauses.withLockedValue { $0 = max(0, $0 - 1) }
    }

    /// Ends every preview stream (service shutdown).
    public func stopAll() {
        let all = feeds.withLockedValue { feeds in
            defer { feeds.removeAll() }
            return Array(feeds.values)
        }
        for feed in all {
            feed.task.withLockedValue { $0?.cancel() }
            let watchers = feed.state.withLockedValue { state in
                defer { state.watchers.removeAll() }
                return Array(state.watchers.values)
            }
            for watcher in watchers { watcher.finish() }
        }
    }

    /// Asks the agent to end a preview stream (it answers Ok, then ends the stream with StreamEnded).
    private static func stop(_ streamID: String, on client: AgentClient) async {
        var stop = WireStopStream()
        stop.streamID = streamID
        _ = try? await client.request(.stopStream(stop))
    }

    /// Keeps `device`'s preview stream open while the feed lives, reopening it after a second when it
    /// ends (agent restarted, camera unplugged and back).
    private static func run(_ feed: Feed, device: RigDevice, options: Options, paused: @Sendable () -> Bool, logger: Logger) async {
        while !Task.isCancelled {
            // Marked opening before the pause is looked at: a pause() from now on waits for this stream.
            feed.state.withLockedValue { $0.opening = true }
            while paused() && !Task.isCancelled {
                feed.state.withLockedValue { $0.opening = false }
                try? await Task.sleep(for: .milliseconds(50))
                feed.state.withLockedValue { $0.opening = true }
            }
            var streamID: String?
            var client: AgentClient?
            do {
                let agentClient = try device.agent.client()
                client = agentClient
                var start = WireStartStream()
                start.deviceID = device.deviceID
                start.preview.maxWidth = options.maxWidth
                start.preview.maxFramesPerSecond = options.framesPerSecond
                start.preview.jpegQuality = options.quality
                streaming: for try await frame in agentClient.stream(.startStream(start), buffering: .init(lowWatermark: 1, highWatermark: 2)) {
                    switch frame.envelope.body {
                    case .streamStarted(let started):
                        streamID = started.streamID
                        feed.state.withLockedValue {
                            $0.error = nil
                            $0.open = (agentClient, started.streamID)
                            $0.opening = false
                        }
                        if paused() {
                            // Previews paused while this stream was being opened: close it at once.
                            await Self.stop(started.streamID, on: agentClient)
                        }
                    case .videoFrame(let video):
                        guard let payload = frame.payload else { continue }
                        let preview = Preview(
                            jpeg: payload, sequence: video.sequence, timestamp: video.timestamp.nanoseconds,
                            width: Int(video.dimensions.width), height: Int(video.dimensions.height), droppedBefore: video.droppedBefore,
                            received: Date())
                        let watchers = feed.state.withLockedValue { state in
                            state.latest = preview
                            state.received += 1
                            return Array(state.watchers.values)
                        }
                        for watcher in watchers { watcher.yield(preview) }
                    case .streamEnded(let ended):
                        feed.state.withLockedValue {
                            $0.error = ended.message.isEmpty ? "the preview stream ended" : ended.message
                            $0.open = nil
                        }
                        streamID = nil
                        break streaming
                    case .error(let error):
                        feed.state.withLockedValue { $0.error = error.message }
                        break streaming
                    default:
                        continue
                    }
                }
            } catch {
                feed.state.withLockedValue { $0.error = "\(error)" }
                logger.debug("preview stream failed", metadata: ["camera": "\(device.name)", "error": "\(error)"])
            }
            feed.state.withLockedValue {
                $0.open = nil
                $0.opening = false
            }
            if let streamID, let client {
                // Closed by the last watcher leaving: tell the agent, so the camera stops if nobody else watches.
                Task.detached { await Self.stop(streamID, on: client) }
            }
            if Task.isCancelled { return }
            if !paused() { try? await Task.sleep(for: .seconds(1)) }
        }
    }
}

/// A camera's preview could not be had.
public struct PreviewError: Error, Sendable, CustomStringConvertible {
    public var device: String
    public var message: String
    public var description: String { message }
}
