import CamRigCapture
import CamRigCoordinator
import CamRigStorage
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdWebSocket
import CamRigWire
import NIOCore
import X509

/// The HTTP API (`/api/v1`), the events WebSocket, `/metrics`, `/login` and the console's files.
/// `openapi.yaml` (served at `/openapi.yaml`) documents every route here.
public enum ServiceRoutes {
    /// A camera as the API lists it.
    public struct CameraView: Codable, Sendable {
        public var device: DeviceOutput
        public var inSession: Bool
        public var phase: PhaseOutput?
        public var previewWatchers: Int
        /// Frames it dropped in the captures this service made.
        public var droppedFrames: Int?
    }

    public struct CameraDetail: Codable, Sendable {
        public var camera: CameraView
        public var settings: [String: String]
        public var controls: [ControlOutput]
        public var formatIds: [String]
    }

    public struct SessionView: Codable, Sendable {
        public var id: String?
        public var committed: String?
        public var cameras: Int
        public var fps: Double?
        public var error: String?
        public var runningCapture: String?
    }

    public struct RigView: Codable, Sendable {
        public var started: String
        public var access: Access?
        public var agents: [AgentStatusOutput]
        public var cameras: [CameraView]
        public var session: SessionView
    }

    public struct SyncView: Codable, Sendable {
        public struct Agent: Codable, Sendable {
            public var status: AgentStatusOutput
            public var history: [RigService.ClockSample]
            public var spool: Spool?
        }
        public struct Spool: Codable, Sendable {
            public var usedBytes: UInt64
            public var capacityBytes: UInt64
            public var results: UInt32
        }
        public var agents: [Agent]
        public var cameras: [PhaseOutput]
    }

    public struct SettingsRequest: Codable, Sendable {
        /// `camrig device set` keys and values, e.g. {"exposure-duration": "1/250", "iso": "200"}.
        public var settings: [String: String]

        public init(settings: [String: String]) { self.settings = settings }
    }

    /// Builds the router: the API behind `AccessMiddleware`, the console's files from `consoleDirectory`.
    public static func router(
        service: RigService, metrics: ServiceMetrics, trustRoot: Certificate, consoleDirectory: String,
        isRevoked: @escaping @Sendable (Certificate) -> Bool = { _ in false }, allowedOrigins: Set<String> = [],
        revokedToken: @escaping @Sendable (String) -> Date? = { _ in nil }
    ) -> Router<ServiceRequestContext> {
        let router = Router(context: ServiceRequestContext.self)
        router.add(middleware: AccessMiddleware(trustRoot: trustRoot, isRevoked: isRevoked, allowedOrigins: allowedOrigins, revokedToken: revokedToken))
        router.add(middleware: FileMiddleware(consoleDirectory, urlBasePath: "/", searchForIndexHtml: true))
        addLogin(to: router, trustRoot: trustRoot, revokedToken: revokedToken)
        router.get("/openapi.yaml") { _, _ in
            let path = consoleDirectory + "/openapi.yaml"
            guard let data = FileManager.default.contents(atPath: path) else { throw ServiceError(.notFound, "openapi.yaml is missing from \(consoleDirectory)") }
            return Response(status: .ok, headers: [.contentType: "application/yaml"], body: .init(byteBuffer: ByteBuffer(data: data)))
        }
        router.get("/metrics") { _, _ in
            let text = await metrics.scrape(service)
            return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: text)))
        }
        let api = router.group("/api/v1")
        api.get("whoami") { _, context in try json(context.access) }
        api.get("rig") { _, context in try json(await rigView(service, access: context.access)) }
        api.get("agents") { _, _ in try json(service.pool.agents.map { AgentStatusOutput($0.snapshot) }) }
        api.get("agents/:agent") { _, context in
            let name = try context.parameters.require("agent")
            guard let agent = service.pool.agents.first(where: { $0.name == name || $0.endpoint.description == name }) else {
                throw ServiceError(.notFound, agent: name, "no agent '\(name)' in the rig (GET /api/v1/agents lists them)")
            }
            return try json(AgentStatusOutput(agent.snapshot))
        }
        api.get("devices") { _, _ in try json(await cameras(service)) }
        api.get("devices/:agent/:device") { _, context in
            let device = try await service.device(named: try cameraName(context))
            return try json(await detail(service, device))
        }
        api.put("devices/:agent/:device/settings") { request, context in
            let name = try cameraName(context)
            let body = try await decode(SettingsRequest.self, request, context)
            guard !body.settings.isEmpty else { throw ServiceError(.badRequest, device: name, "settings is empty: give at least one key, e.g. {\"settings\": {\"exposure-duration\": \"1/250\"}}") }
            let settings = body.settings.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
            let device = try await service.apply(settings: settings, to: name, by: context.access!)
            return try json(await detail(service, device))
        }
        api.get("devices/:agent/:device/preview.jpg") { _, context in
            let device = try await service.device(named: try cameraName(context))
            let preview: PreviewHub.Preview
            do {
                preview = try await service.previews.snapshot(device)
            } catch let error as PreviewError {
                throw ServiceError(.unavailable, agent: device.agentID, device: device.name, error.message)
            }
            return Response(
                status: .ok,
                headers: [.contentType: "image/jpeg", .cacheControl: "no-store"],
                body: .init(byteBuffer: preview.jpeg))
        }
        api.get("devices/:agent/:device/preview.mjpeg") { _, context in
            let device = try await service.device(named: try cameraName(context))
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
                        var part = ByteBuffer(string: "--\(boundary)\r\nContent-Type: image/jpeg\r\nContent-Length: \(preview.jpeg.readableBytes)\r\nX-Camrig-Sequence: \(preview.sequence)\r\n\r\n")
                        part.writeImmutableBuffer(preview.jpeg)
                        part.writeString("\r\n")
                        try await writer.write(part)
                    }
                    try await writer.finish(nil)
                })
        }
        api.get("session") { _, _ in try json(await sessionView(service)) }
        api.get("sync") { _, _ in try json(await syncView(service)) }
        api.post("captures/photo") { request, context in
            let body = try await decode(RigService.PhotoRequest.self, request, context, emptyAs: RigService.PhotoRequest())
            let job = try await service.startPhoto(body, by: context.access!)
            return try json(job, status: .accepted, location: "/api/v1/jobs/\(job.id)")
        }
        api.post("captures/recording") { request, context in
            let body = try await decode(RigService.RecordRequest.self, request, context)
            let job = try await service.startRecording(body, by: context.access!)
            return try json(job, status: .accepted, location: "/api/v1/jobs/\(job.id)")
        }
        api.get("jobs") { _, _ in try json(await service.jobs.reversed()) }
        api.get("jobs/:job") { _, context in
            let id = try context.parameters.require("job")
            guard let job = await service.job(id) else { throw ServiceError(.notFound, "no capture job '\(id)' (jobs are kept while the service runs)") }
            return try json(job)
        }
        api.get("captures") { _, _ in try json(try service.store.catalog.list()) }
        api.get("captures/:capture") { _, context in
            let entry = try catalogEntry(service, try context.parameters.require("capture"))
            let manifest = try service.store.manifest(of: entry)
            return try json(CaptureOutput(manifest, directory: service.store.root.appendingPathComponent(entry.directory).path))
        }
        api.get("captures/:capture/manifest") { _, context in
            let entry = try catalogEntry(service, try context.parameters.require("capture"))
            return try file(service.store.root.appendingPathComponent(entry.directory).appendingPathComponent("manifest.json"), type: "application/json")
        }
        api.get("captures/:capture/files/:file") { _, context in
            let entry = try catalogEntry(service, try context.parameters.require("capture"))
            // A path inside the capture, percent-encoded as one segment (frames/cam0/000001.png as
            // frames%2Fcam0%2F000001.png); no part may be empty or begin with a dot.
            let encoded = try context.parameters.require("file")
            let relative = encoded.removingPercentEncoding ?? encoded
            let directory = service.store.root.appendingPathComponent(entry.directory)
            let url: URL
            do {
                url = try CaptureStore.file(relative, in: directory)
            } catch {
                throw ServiceError(.badRequest, "'\(relative)' is not a file of capture \(entry.id): give a path inside it, e.g. contact-sheet.png")
            }
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory), !isDirectory.boolValue else {
                throw ServiceError(.notFound, "capture \(entry.id) has no file \(relative) (its manifest lists its files)")
            }
            let type = MediaType.getMediaType(forExtension: url.pathExtension)?.description ?? "application/octet-stream"
            // Streamed from disk in chunks: a recording's files may be large.
            return Response(status: .ok, headers: [.contentType: type], body: try await FileIO().loadFile(path: url.path, context: context))
        }
        api.ws("previews") { inbound, outbound, _ in
            // One socket carries every preview a console watches: a page holds one connection instead of
            // one per camera (browsers allow six per site over HTTP/1.1). The page sends
            // {"watch": ["AGENT/DEVICE", …]} whenever the cameras on its screen change; each preview comes
            // as a binary message: the camera's name length (2 bytes, big-endian), its name (UTF-8), the JPEG.
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
            let retrying = Task {
                while !Task.isCancelled {
                    try? await Task.sleep(for: .seconds(2))
                    await watching.retry()
                }
            }
            defer {
                reader.cancel()
                retrying.cancel()
            }
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
        api.get("events/recent") { _, _ in try json(service.events.recent()) }
        api.ws("events") { inbound, outbound, _ in
            let (id, events) = service.events.subscribe()
            defer { service.events.unsubscribe(id) }
            let encoder = JSONEncoder()
            encoder.keyEncodingStrategy = .convertToSnakeCase
            // Inbound messages are not used; reading them notices the viewer closing the socket.
            let reader = Task {
                for try await _ in inbound {}
                service.events.unsubscribe(id)
            }
            defer { reader.cancel() }
            for await event in events {
                guard let data = try? encoder.encode(event) else { continue }
                try await outbound.write(.text(String(decoding: data, as: UTF8.self)))
            }
        }
        return router
    }

    // MARK: Views

    /// The views of `devices` (default: every camera of the rig).
    static func cameras(_ service: RigService, _ devices: [RigDevice]? = nil) async -> [CameraView] {
        let all: [RigDevice]
        if let devices { all = devices } else { all = await service.devices }
        let phases = await service.phases
        let inputs = await service.session?.inputs.map(\.name) ?? []
        let dropped = await service.droppedFrames
        return all.map { device in
            CameraView(
                device: DeviceOutput(device), inSession: inputs.contains(device.name), phase: phases[device.name].map(PhaseOutput.init),
                previewWatchers: service.previews.watcherCount(device.name), droppedFrames: dropped[device.name] ?? 0)
        }
    }

    static func detail(_ service: RigService, _ device: RigDevice) async -> CameraDetail {
        let get = DeviceGetOutput(device)
        let view = await cameras(service, [device])[0]
        return CameraDetail(camera: view, settings: get.state, controls: get.controls, formatIds: device.description.formats.map(\.id))
    }

    static func sessionView(_ service: RigService) async -> SessionView {
        let session = await service.session
        let committed = await service.sessionCommitted
        let running = await service.jobs.last { $0.state == "running" }?.id
        return SessionView(
            id: session?.id, committed: committed.map { ISO8601DateFormatter().string(from: $0) }, cameras: await session?.inputs.count ?? 0,
            fps: await session?.activeFrameDuration?.frameRate, error: await service.sessionError, runningCapture: running)
    }

    static func rigView(_ service: RigService, access: Access?) async -> RigView {
        RigView(
            started: ISO8601DateFormatter().string(from: service.started), access: access,
            agents: service.pool.agents.map { AgentStatusOutput($0.snapshot) }, cameras: await cameras(service), session: await sessionView(service))
    }

    static func syncView(_ service: RigService) async -> SyncView {
        let history = await service.history
        let phases = await service.phases
        let spools = await service.spools
        return SyncView(
            agents: service.pool.agents.map { agent in
                let snapshot = agent.snapshot
                return SyncView.Agent(
                    status: AgentStatusOutput(snapshot), history: Array((history[snapshot.name] ?? []).suffix(120)),
                    spool: spools[snapshot.name].map { SyncView.Spool(usedBytes: $0.usedBytes, capacityBytes: $0.capacityBytes, results: $0.results) })
            },
            cameras: phases.values.sorted { $0.camera < $1.camera }.map(PhaseOutput.init))
    }

    // MARK: Helpers

    /// AGENT/DEVICE from the path, each part percent-decoded (a device id may hold ':' or spaces).
    static func cameraName(_ context: ServiceRequestContext) throws -> String {
        let agent = try context.parameters.require("agent")
        let device = try context.parameters.require("device")
        return "\(agent.removingPercentEncoding ?? agent)/\(device.removingPercentEncoding ?? device)"
    }

    static func catalogEntry(_ service: RigService, _ id: String) throws -> CaptureCatalog.Entry {
        guard let entry = try service.store.catalog.list().first(where: { $0.id == id }) else {
            throw ServiceError(.notFound, "no capture '\(id)' in the catalog (GET /api/v1/captures lists them)")
        }
        return entry
    }

    static func file(_ url: URL, type: String) throws -> Response {
        guard let data = FileManager.default.contents(atPath: url.path) else {
            throw ServiceError(.notFound, "no file \(url.lastPathComponent) in the capture")
        }
        return Response(status: .ok, headers: [.contentType: type], body: .init(byteBuffer: ByteBuffer(data: data)))
    }

    static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok, location: String? = nil) throws -> Response {
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.outputFormatting = [.sortedKeys]
        var headers: HTTPFields = [.contentType: "application/json"]
        if let location { headers[.location] = location }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(data: try encoder.encode(value))))
    }

    static func decode<T: Decodable>(_ type: T.Type, _ request: Request, _ context: ServiceRequestContext, emptyAs empty: T? = nil) async throws -> T {
        var request = request
        let body: ByteBuffer
        do {
            body = try await request.collectBody(upTo: context.maxUploadSize)
        } catch {
            throw ServiceError(.tooLarge, "the request body is larger than \(context.maxUploadSize) bytes")
        }
        if body.readableBytes == 0, let empty { return empty }
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        do {
            return try decoder.decode(T.self, from: Data(buffer: body))
        } catch {
            throw ServiceError(.badRequest, "the request body is not the JSON this route takes (see /openapi.yaml): \(error)")
        }
    }

    static func addLogin(to router: Router<ServiceRequestContext>, trustRoot: Certificate, revokedToken: @escaping @Sendable (String) -> Date?) {
        router.get("/login") { request, _ in
            guard let token = request.uri.queryParameters.get("token") else {
                throw ServiceError(.badRequest, "give the token: /login?token=TOKEN (from `camrig certs token`)")
            }
            switch AccessTokens.verify(token, trustRoot: trustRoot, revokedAt: revokedToken) {
            case .success:
                return Response(
                    status: .seeOther,
                    headers: [
                        .location: "/",
                        .setCookie: "\(AccessMiddleware.cookieName)=\(token); Path=/; HttpOnly; Secure; SameSite=Strict",
                    ])
            case .failure(let refusal):
                throw ServiceError(.unauthorized, refusal.description)
            }
        }
        router.post("/logout") { _, _ in
            Response(status: .noContent, headers: [.setCookie: "\(AccessMiddleware.cookieName)=; Path=/; Max-Age=0; HttpOnly; Secure; SameSite=Strict"])
        }
    }
}

/// The cameras one previews socket watches, each with its own task feeding the socket's merged stream.
actor PreviewWatchSet {
    let service: RigService
    let sink: AsyncStream<(String, PreviewHub.Preview)>.Continuation
    private var watching: [String: (id: UInt64, task: Task<Void, Never>)] = [:]
    /// Names asked for that are not cameras of the rig (yet: a service just restarted lists its cameras
    /// within a second or two); `retry` looks for them again.
    private var unresolved: Set<String> = []

    init(service: RigService, sink: AsyncStream<(String, PreviewHub.Preview)>.Continuation) {
        self.service = service
        self.sink = sink
    }

    /// Watches exactly `names` (unknown cameras are left out).
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
    }

    /// Watches the names asked for that could not be found before.
    func retry() async {
        guard !unresolved.isEmpty else { return }
        await watch(Array(unresolved) + Array(watching.keys))
    }

    func stopAll() {
        for (name, watch) in watching {
            watch.task.cancel()
            service.previews.stopWatching(name, id: watch.id)
        }
        watching.removeAll()
    }
}
