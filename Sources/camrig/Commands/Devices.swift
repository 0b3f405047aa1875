import CamRigServiceClient
import CamRigText
import CamRigViews
import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigWire
import Foundation

/// `camrig devices`: every camera of the rig.
struct Devices: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List the cameras of every agent, optionally filtered like a discovery session.")

    @Option(name: .long, help: "Only these device types, in this order of preference (synthetic, external, wide-angle, telephoto, ultra-wide; repeatable).")
    var type: [String] = []

    @Option(name: .long, help: "Only cameras at this position: front or back.")
    var position: String?

    @Option(name: .long, help: "Only cameras whose rig label starts with this.")
    var labelPrefix: String?

    @Option(name: .long, help: ArgumentHelp("The same as one string: type=T[+T…],position=P,label=PREFIX.", valueName: "query"))
    var query: String?

    @OptionGroup var rig: RigOptions
    @OptionGroup var output: OutputOptions

    func discoveryQuery() throws -> WireDiscoveryQuery? {
        var type = self.type
        var position = self.position
        var labelPrefix = self.labelPrefix
        for term in (query ?? "").split(separator: ",") {
            let parts = term.split(separator: "=", maxSplits: 1).map(String.init)
            guard parts.count == 2 else { throw ValidationError("--query term '\(term)' is not key=value") }
            switch parts[0] {
            case "type": type += parts[1].split(separator: "+").map(String.init)
            case "position": position = parts[1]
            case "label": labelPrefix = parts[1]
            default: throw ValidationError("--query key '\(parts[0])': use type, position or label")
            }
        }
        guard !type.isEmpty || position != nil || labelPrefix != nil else { return nil }
        var query = WireDiscoveryQuery()
        let types: [String: WireDeviceType] = ["synthetic": .synthetic, "external": .external, "wide-angle": .builtInWideAngle, "telephoto": .builtInTelephoto, "ultra-wide": .builtInUltraWide]
        query.deviceTypes = try type.map { name in
            guard let type = types[name] else { throw ValidationError("--type \(name): use one of \(types.keys.sorted().joined(separator: ", "))") }
            return type
        }
        if let position {
            switch position {
            case "front": query.position = .front
            case "back": query.position = .back
            default: throw ValidationError("--position must be front or back")
            }
        }
        query.labelPrefix = labelPrefix ?? ""
        return query
    }

    func run() async throws {
        let logger = output.makeLogger()
        let query = try discoveryQuery()
        do {
            let rows: [DeviceOutput]
            if query == nil, let served = try await rig.throughService(logger: logger, { try await $0.get("/api/v1/devices", as: [CameraView].self) }) {
                rows = served.map(\.device)
            } else {
                let (devices, failures) = try await rig.withPool(logger: logger, clockSamples: 0) { pool in await RigDiscovery.devices(in: pool, query: query) }
                for failure in failures { logger.warning("agent did not list its devices", metadata: ["agent": "\(failure.agent)", "error": "\(failure.error)"]) }
                rows = devices.map(DeviceOutput.init)
            }
            if output.json {
                try printJSON(["devices": rows], snakeCase: true)
            } else {
                print(table(
                    ["DEVICE", "NAME", "TYPE", "POSITION", "LABEL", "ACTIVE", "FPS", "LEASE"],
                    rows.map { [$0.name, $0.localizedName, $0.type, $0.position, $0.label, $0.activeFormat, $0.activeFps.map { String(format: "%.2f", $0) } ?? "-", $0.leaseHolder ?? "-"] }
                ))
            }
        } catch {
            throw userFacing(error)
        }
    }
}
