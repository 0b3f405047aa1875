import CamRigViews
import Foundation
import NIOConcurrencyHelpers

/// Fans events out to every watcher; a watcher that falls behind loses the oldest of its backlog, never
/// the service's progress.
public final class EventHub: Sendable {
    private struct State {
        var sequence: UInt64 = 0
        var watchers: [UInt64: AsyncStream<ServiceEventRecord>.Continuation] = [:]
        var nextWatcher: UInt64 = 1
        var recent: [ServiceEventRecord] = []
    }
    private let state = NIOLockedValueBox(State())
    /// Events kept for `recent` (a console that just opened shows them).
    static let recentLimit = 200

    public init() {}

    /// A stream of every event from now on; it ends when `unsubscribe` is called with the id.
    public func subscribe(backlog: Int = 256) -> (id: UInt64, events: AsyncStream<ServiceEventRecord>) {
        let (stream, continuation) = AsyncStream.makeStream(of: ServiceEventRecord.self, bufferingPolicy: .bufferingNewest(backlog))
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
    public func recent(limit: Int = 100) -> [ServiceEventRecord] {
        state.withLockedValue { Array($0.recent.suffix(limit)) }
    }

    @discardableResult
    public func publish(_ event: ServiceEvent) -> ServiceEventRecord {
        let (record, watchers) = state.withLockedValue { state -> (ServiceEventRecord, [AsyncStream<ServiceEventRecord>.Continuation]) in
            state.sequence += 1
            let record = ServiceEventRecord(sequence: state.sequence, time: ISO8601DateFormatter().string(from: Date()), event: event)
            state.recent.append(record)
            if state.recent.count > Self.recentLimit { state.recent.removeFirst(state.recent.count - Self.recentLimit) }
            return (record, Array(state.watchers.values))
        }
        for watcher in watchers { watcher.yield(record) }
        return record
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
