import CamRigClock
import CamRigDevices
import CamRigWire
import NIOConcurrencyHelpers

/// Pushes events to the clients that subscribed to them.
public final class AgentEvents: Sendable {
    struct Subscription: Sendable {
        var connection: UInt64
        var requestID: UInt64
        var kinds: Set<WireEventKind>
        var write: @Sendable (WireFrame) -> Void

        func takes(_ kind: WireEventKind) -> Bool {
            kinds.contains(kind) || (kinds.isEmpty && !AgentEvents.namedOnly.contains(kind))
        }
    }

    private let subscriptions = NIOLockedValueBox<[Subscription]>([])

    private let clock: HostClock

    public init(clock: HostClock = .system) {
        self.clock = clock
    }

    func subscribe(connection: UInt64, requestID: UInt64, kinds: [WireEventKind], write: @escaping @Sendable (WireFrame) -> Void) {
        subscriptions.withLockedValue {
            $0.append(Subscription(connection: connection, requestID: requestID, kinds: Set(kinds), write: write))
        }
    }

    /// Whether any subscription takes events of `kind` (so that building one nobody reads can be skipped).
    func wants(_ kind: WireEventKind) -> Bool {
        subscriptions.withLockedValue { $0.contains { $0.takes(kind) } }
    }

    func connectionClosed(_ connection: UInt64) {
        subscriptions.withLockedValue { $0.removeAll { $0.connection == connection } }
    }

    /// Kinds sent only to subscriptions that name them (capability `state-events`): a subscription to
    /// every kind (`kinds` empty), as clients made before these kinds existed, does not get them.
    static let namedOnly: Set<WireEventKind> = [.deviceChanged, .spoolStatus, .phaseStatus]

    /// Sends `event` to every subscription that wants its kind.
    func publish(_ event: WireEvent) {
        var event = event
        if !event.hasTime {
            event.time.nanoseconds = clock.now()
            event.time.clock = .agentMonotonic
        }
        for subscription in subscriptions.withLockedValue({ $0 }) where subscription.takes(event.kind) {
            subscription.write(WireFrame(requestID: subscription.requestID, .event(event)))
        }
    }

    func publish(_ kind: WireEventKind, device: String = "", message: String, _ detail: ((inout WireEvent) -> Void)? = nil) {
        var event = WireEvent()
        event.kind = kind
        event.deviceID = device
        event.message = message
        detail?(&event)
        publish(event)
    }
}
