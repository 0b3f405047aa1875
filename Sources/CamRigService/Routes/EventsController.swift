import CamRigViews
import Foundation
import Hummingbird
import HummingbirdWebSocket

/// The rig's events: the latest as JSON, and all from now on over a WebSocket.
struct EventsController {
    let service: RigService

    var routes: RouteCollection<AuthenticatedContext> {
        let routes = RouteCollection(context: AuthenticatedContext.self)
        let events = service.events
        routes.get("events/recent") { _, _ in try ServiceRoutes.json(events.recent()) }
        return routes
    }

    /// `/events`: one JSON event per text message.
    var webSocketRoutes: RouteCollection<ServiceRequestContext> {
        let routes = RouteCollection(context: ServiceRequestContext.self)
        let events = service.events
        routes.ws("events", shouldUpgrade: WebSocketRoute.shouldUpgrade) { inbound, outbound, _ in
            let (id, stream) = events.subscribe()
            defer { events.unsubscribe(id) }
            let encoder = JSONEncoder()
            encoder.keyEncodingStrategy = .convertToSnakeCase
            // Inbound messages are not used; reading them notices the viewer closing the socket.
            let reader = Task {
                for try await _ in inbound {}
                events.unsubscribe(id)
            }
            defer { reader.cancel() }
            for await event in stream {
                guard let data = try? encoder.encode(event) else { continue }
                try await outbound.write(.text(String(decoding: data, as: UTF8.self)))
            }
        }
        return routes
    }
}

/// What the WebSocket routes share.
enum WebSocketRoute {
    /// A WebSocket route asked for without an upgrade (a plain GET) is answered 426, naming the protocol.
    @Sendable static func shouldUpgrade(_ request: Request, _ context: ServiceRequestContext) throws -> RouterShouldUpgrade {
        guard request.headers[.upgrade]?.lowercased() == "websocket" else {
            var refusal = ServiceError(
                .upgradeRequired, "\(request.uri.path) is a WebSocket: open it with an upgrade (Connection: Upgrade, Upgrade: websocket)")
            refusal.headers = [(.upgrade, "websocket"), (.connection, "Upgrade")]
            throw refusal
        }
        return .upgrade([:])
    }
}
