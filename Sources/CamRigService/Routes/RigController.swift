import CamRigCoordinator
import CamRigSecurity
import CamRigViews
import Foundation
import Hummingbird
import NIOCore

/// The rig at a glance, its session, its sync health, and its metrics.
struct RigController {
    let service: RigService

    var routes: RouteCollection<AuthenticatedContext> {
        let routes = RouteCollection(context: AuthenticatedContext.self)
        let service = self.service
        routes.get("rig") { _, context in try ServiceRoutes.json(await Self.rigView(service, access: context.access)) }
        routes.get("session") { _, _ in try ServiceRoutes.json(await Self.sessionView(service, await service.state())) }
        routes.get("sync") { _, _ in try ServiceRoutes.json(await Self.syncView(service)) }
        return routes
    }

    /// `/metrics` (access needed; any role).
    var metricsRoutes: RouteCollection<ServiceRequestContext> {
        let routes = RouteCollection(context: ServiceRequestContext.self)
        let service = self.service
        routes.get("/metrics") { _, _ in
            let text = await service.metrics.scrape(service)
            return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: text)))
        }
        return routes
    }

    /// The views of `devices` (default: every camera of the rig).
    static func cameras(_ service: RigService, _ state: RigService.State, _ devices: [RigDevice]? = nil) async -> [CameraView] {
        let inputs = await state.session?.inputs.map(\.name) ?? []
        return (devices ?? state.devices).map { device in
            CameraView(
                device: DeviceOutput(device), inSession: inputs.contains(device.name), phase: state.phases[device.name].map(PhaseOutput.init),
                previewWatchers: service.previews.watcherCount(device.name), droppedFrames: state.droppedFrames[device.name] ?? 0)
        }
    }

    static func sessionView(_ service: RigService, _ state: RigService.State) async -> SessionView {
        let session = state.session
        return SessionView(
            id: session?.id, committed: state.sessionCommitted.map { ISO8601DateFormatter().string(from: $0) }, cameras: await session?.inputs.count ?? 0,
            fps: await session?.activeFrameDuration?.frameRate, error: state.sessionError, runningCapture: state.runningJob)
    }

    static func rigView(_ service: RigService, access: Access) async -> RigView {
        let state = await service.state()
        return RigView(
            started: ISO8601DateFormatter().string(from: service.started), access: access,
            agents: service.pool.agents.map { AgentStatusOutput($0.snapshot) }, cameras: await cameras(service, state),
            session: await sessionView(service, state))
    }

    static func syncView(_ service: RigService) async -> SyncView {
        let history = await service.history
        let state = await service.state()
        return SyncView(
            agents: service.pool.agents.map { agent in
                let snapshot = agent.snapshot
                return SyncView.Agent(
                    status: AgentStatusOutput(snapshot), history: Array((history[snapshot.name] ?? []).suffix(120)),
                    spool: state.spools[snapshot.name].map { SyncView.Spool(usedBytes: $0.usedBytes, capacityBytes: $0.capacityBytes, results: $0.results) })
            },
            cameras: state.phases.values.sorted { $0.camera < $1.camera }.map(PhaseOutput.init))
    }
}

/// The rig's agents.
struct AgentsController {
    let service: RigService

    var routes: RouteCollection<AuthenticatedContext> {
        let routes = RouteCollection(context: AuthenticatedContext.self)
        let service = self.service
        routes.get("agents") { _, _ in try ServiceRoutes.json(service.pool.agents.map { AgentStatusOutput($0.snapshot) }) }
        routes.get("agents/:agent") { _, context in
            let name = try context.parameters.require("agent")
            guard let agent = service.pool.agents.first(where: { $0.name == name || $0.endpoint.description == name }) else {
                throw ServiceError(.notFound, agent: name, "no agent '\(name)' in the rig (GET /api/v1/agents lists them)")
            }
            return try ServiceRoutes.json(AgentStatusOutput(agent.snapshot))
        }
        return routes
    }
}
