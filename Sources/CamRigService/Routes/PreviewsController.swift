import CamRigCoordinator
import Foundation
import Hummingbird
import HummingbirdWebSocket
import NIOCore

/// Live previews of many cameras over one WebSocket.
struct PreviewsController {
    let service: RigService

    /// `/previews`: one socket carries every preview a console watches, so a page holds one connection
    /// instead of one per camera (browsers allow six per site over HTTP/1.1). The page sends
    /// {"watch": ["AGENT/DEVICE", …]} whenever the cameras on its screen change; each preview comes as
    /// a binary message: the camera's name length (2 bytes, big-endian), its name (UTF-8), the JPEG.
    var webSocketRoutes: RouteCollection<ServiceRequestContext> {
        let routes = RouteCollection(context: ServiceRequestContext.self)
        let service = self.service
        routes.ws("previews", shouldUpgrade: WebSocketRoute.shouldUpgrade) { inbound, outbound, _ in
            let (merged, sink) = AsyncStream.makeStream(of: (String, PreviewHub.Preview).self, bufferingPolicy: .bufferingNewest(64))
            let watching = PreviewWatchSet(service: service, sink: sink)
            let reader = Task {
                do {
                    for try await message in inbound.messages(maxSize: 64 * 1024) {
                        guard case .text(let text) = message,
                            let request = try? JSONDecoder().decode([String: [String]].self, from: Data(text.utf8)), let names = request["watch"]
                        else { continue }
                        await watching.watch(Array(names.prefix(1024)))
                    }
                } catch {}
                await watching.stopAll()
                sink.finish()
            }
            defer { reader.cancel() }
            for await (name, preview) in merged {
                var message = ByteBuffer()
                let nameBytes = Array(name.utf8)
                message.writeInteger(UInt16(nameBytes.count))
                message.writeBytes(nameBytes)
                message.writeImmutableBuffer(preview.jpeg)
                try await outbound.write(.binary(message))
            }
            await watching.stopAll()
        }
        return routes
    }
}

/// The cameras one previews socket watches, each with its own task feeding the socket's merged stream.
/// Names asked for that are not cameras of the rig yet (a service just restarted lists its cameras
/// within a second or two) are watched as soon as the rig has them: the socket waits on the service's
/// device events, not on a timer.
actor PreviewWatchSet {
    let service: RigService
    let sink: AsyncStream<(String, PreviewHub.Preview)>.Continuation
    private var watching: [String: (id: UInt64, task: Task<Void, Never>)] = [:]
    private var unresolved: Set<String> = []
    private var waiting: Task<Void, Never>?

    init(service: RigService, sink: AsyncStream<(String, PreviewHub.Preview)>.Continuation) {
        self.service = service
        self.sink = sink
    }

    /// Watches exactly `names` (unknown cameras once they appear).
    func watch(_ names: [String]) async {
        let wanted = Set(names)
        for (name, watch) in watching where !wanted.contains(name) {
            watch.task.cancel()
            service.previews.stopWatching(name, id: watch.id)
            watching.removeValue(forKey: name)
        }
        unresolved = []
        for name in wanted where watching[name] == nil {
            guard let device = try? await service.device(named: name) else {
                unresolved.insert(name)
                continue
            }
            let (id, previews) = service.previews.watch(device)
            let sink = self.sink
            watching[name] = (id, Task { for await preview in previews { sink.yield((name, preview)) } })
        }
        if unresolved.isEmpty {
            waiting?.cancel()
            waiting = nil
        } else if waiting == nil {
            waiting = Task { [service] in
                let (id, events) = service.events.subscribe(backlog: 16)
                defer { service.events.unsubscribe(id) }
                for await event in events where event.kind == .deviceAdded || event.kind == .sessionCommitted {
                    if await self.retry() { return }
                }
            }
        }
    }

    /// Watches the names asked for that could not be found before; true when none is left.
    private func retry() async -> Bool {
        guard !unresolved.isEmpty else { return true }
        await watch(Array(unresolved) + Array(watching.keys))
        return unresolved.isEmpty
    }

    func stopAll() {
        waiting?.cancel()
        waiting = nil
        for (name, watch) in watching {
            watch.task.cancel()
            service.previews.stopWatching(name, id: watch.id)
        }
        watching.removeAll()
    }
}
