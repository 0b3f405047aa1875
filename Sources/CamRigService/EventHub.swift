import Foundation
import NIOConcurrencyHelpers

/// Something that happened on the rig, as the console and scripts see it (`/api/v1/events`).
public struct ServiceEvent: Codable, Sendable, Equatable {
    /// Increases by one with each event of this service.
    public var sequence: UInt64
    /// ISO 8601, when the service saw it.
    public var time: String
    /// `agent.up`, `agent.down`, `device.added`, `device.removed`, `device.connected`, `device.disconnected`,
    /// `device.lease`, `device.settings`, `phase.state`, `session.committed`, `session.failed`,
    /// `capture.started`, `capture.progress`, `capture.finished`, `capture.failed`.
    public var kind: String
    public var agent: String?
    public var device: String?
    /// One line for a person.
    public var message: String
    /// Details by name (capture id, progress, lock state…).
    public var data: [String: String]
}

/// Fans events out to every watcher; a watcher that falls behind loses the oldest of its backlog, never
/// the service's progress.
public final class EventHub: Sendable {
    private struct State {
        var sequence: UInt64 = 0
        var watchers: [UInt64: AsyncStream<ServiceEvent>.Continuation] = [:]
        var nextWatcher: UInt64 = 1
        var recent: [ServiceEvent] = []
    }
    private let state = NIOLockedValueBox(State())
    /// Events kept for `recent` (a console that just opened shows them).
    static let recentLimit = 200

    public init() {}

    /// A stream of every event from now on; it ends when `unsubscribe` is called with the id.
    public func subscribe(backlog: Int = 256) -> (id: UInt64, events: AsyncStream<ServiceEvent>) {
        let (stream, continuation) = AsyncStream.makeStream(of: ServiceEvent.self, bufferingPolicy: .bufferingNewest(backlog))
        let id = state.withLockedValue { state in
            defer { state.nextWatcher += 1 }
            state.watchers[state.nextWatcher] = continuation
            return state.nextWatcher
        }
        continuation.onTermination = { [weak self] _ in self?.unsubscribe(id) }
        return (id, stream)
    }

    public func unsubscribe(_ id: UInt64) {
        let continuation = state.withLockedValue { $0.watchers.removeValue(forKey: id) }
        continuation?.finish()
    }

    public var watcherCount: Int { state.withLockedValue { $0.watchers.count } }

    /// The latest events, oldest first.
    public func recent(limit: Int = 100) -> [ServiceEvent] {
        state.withLockedValue { Array($0.recent.suffix(limit)) }
    }

    @discardableResult
    public func publish(_ kind: String, agent: String? = nil, device: String? = nil, _ message: String, data: [String: String] = [:]) -> ServiceEvent {
        let (event, watchers) = state.withLockedValue { state -> (ServiceEvent, [AsyncStream<ServiceEvent>.Continuation]) in
            state.sequence += 1
            let event = ServiceEvent(
                sequence: state.sequence, time: ISO8601DateFormatter().string(from: Date()), kind: kind, agent: agent, device: device,
                message: message, data: data)
            state.recent.append(event)
            if state.recent.count > Self.recentLimit { state.recent.removeFirst(state.recent.count - Self.recentLimit) }
            return (event, Array(state.watchers.values))
        }
        for watcher in watchers { watcher.yield(event) }
        return event
    }

    /// Ends every watcher's stream (service shutdown).
    public func finishAll() {
        let watchers = state.withLockedValue { state in
            defer { state.watchers.removeAll() }
            return Array(state.watchers.values)
        }
        for watcher in watchers { watcher.finish() }
    }
}
