import CamRigCoordinator
import CamRigViews
import Foundation
import Hummingbird
import NIOCore

/// The rig's cameras: listed, one in detail, its settings changed, its previews.
struct DevicesController {
    let service: RigService

    var routes: RouteCollection<AuthenticatedContext> {
        let routes = RouteCollection(context: AuthenticatedContext.self)
        let service = self.service
        routes.get("devices") { _, _ in try ServiceRoutes.json(await RigController.cameras(service, await service.state())) }
        routes.get("devices/:agent/:device") { _, context in
            let device = try await service.device(named: try ServiceRoutes.cameraName(context))
            return try ServiceRoutes.json(await Self.detail(service, device))
        }
        routes.put("devices/:agent/:device/settings") { request, context in
            let name = try ServiceRoutes.cameraName(context)
            let body = try await ServiceRoutes.decode(SettingsRequest.self, request, context)
            guard !body.settings.isEmpty else {
                throw ServiceError(.badRequest, device: name, "settings is empty: give at least one key, e.g. {\"settings\": {\"exposure-duration\": \"1/250\"}}")
            }
            let settings = body.settings.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
            let device = try await service.apply(settings: settings, to: name, by: context.access)
            return try ServiceRoutes.json(await Self.detail(service, device))
        }
        routes.get("devices/:agent/:device/preview.jpg") { _, context in
            let device = try await service.device(named: try ServiceRoutes.cameraName(context))
            let preview: PreviewHub.Preview
            do {
                preview = try await service.previews.snapshot(device)
            } catch let error as PreviewError {
                throw ServiceError(.unavailable, agent: device.agentID, device: device.name, error.message)
            }
            return Response(status: .ok, headers: [.contentType: "image/jpeg", .cacheControl: "no-store"], body: .init(byteBuffer: preview.jpeg))
        }
        routes.get("devices/:agent/:device/preview.mjpeg") { _, context in
            let device = try await service.device(named: try ServiceRoutes.cameraName(context))
            let previews = service.previews
            let boundary = "camrigpreview"
            return Response(
                status: .ok,
                headers: [.contentType: "multipart/x-mixed-replace; boundary=\(boundary)", .cacheControl: "no-store"],
                body: ResponseBody { writer in
                    // Watching ends when the viewer goes away: the write fails and the stream closes.
                    let (id, stream) = previews.watch(device)
                    defer { previews.stopWatching(device.name, id: id) }
                    for await preview in stream {
                        var part = ByteBuffer(
                            string: "--\(boundary)\r\nContent-Type: image/jpeg\r\nContent-Length: \(preview.jpeg.readableBytes)\r\nX-Camrig-Sequence: \(preview.sequence)\r\n\r\n")
                        part.writeImmutableBuffer(preview.jpeg)
                        part.writeString("\r\n")
                        try await writer.write(part)
                    }
                    try await writer.finish(nil)
                })
        }
        return routes
    }

    static func detail(_ service: RigService, _ device: RigDevice) async -> CameraDetail {
        let view = await RigController.cameras(service, await service.state(), [device])[0]
        return CameraDetail(camera: view, device: device)
    }
}
