import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigDevices
import CamRigWire
import CamRigWireModel
import Foundation

/// One device as `camrig devices` shows it.
struct DeviceOutput: Encodable {
    var name: String
    var agent: String
    var device: String
    var localizedName: String
    var model: String
    var type: String
    var position: String
    var label: String
    var connected: Bool
    var activeFormat: String
    var activeFps: Double?
    var leaseHolder: String?
    var formats: [String]

    init(_ device: RigDevice) {
        let description = device.description
        name = device.name
        agent = device.agentID
        self.device = device.deviceID
        localizedName = description.localizedName
        model = description.modelID
        type = description.deviceType.name
        position = description.position.name
        label = description.label
        connected = description.connected
        activeFormat = description.state.activeFormatID
        activeFps = description.state.activeMinFrameDuration.duration.map(\.frameRate)
        leaseHolder = description.hasLease ? description.lease.holder : nil
        formats = description.formats.map { format in
            "\(format.id) " + format.rateRanges.map(\.description).joined(separator: ", ")
        }
    }
}

extension WireDeviceType {
    var name: String { String(describing: self).replacingOccurrences(of: "builtIn", with: "built-in-") }
}

extension WireDevicePosition {
    var name: String { String(describing: self) }
}

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
            let (devices, failures) = try await rig.withPool(logger: logger, clockSamples: 0) { pool in await RigDiscovery.devices(in: pool, query: query) }
            for failure in failures { logger.warning("agent did not list its devices", metadata: ["agent": "\(failure.agent)", "error": "\(failure.error)"]) }
            let rows = devices.map(DeviceOutput.init)
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

/// `camrig device get|set`: one camera's configuration, remotely, like `v4l2-ctl -C/-c`.
struct Device: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Read or change one camera's configuration.", subcommands: [Get.self, Set.self])

    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show a camera's formats, active configuration and controls.")

        @Argument(help: "The camera: AGENT/DEVICE (or DEVICE when only one agent has it).")
        var device: String

        @OptionGroup var rig: RigOptions
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let logger = output.makeLogger()
            do {
                let found = try await rig.withPool(logger: logger, clockSamples: 0) { pool in
                    let (devices, _) = await RigDiscovery.devices(in: pool)
                    guard let found = RigDiscovery.find(device, in: devices) else {
                        throw ValidationFailure("no camera '\(device)' on the rig's connected agents; `camrig devices` lists them")
                    }
                    return found
                }
                let state = found.description.state
                let controls = found.description.controls.map { control in
                    ControlOutput(id: control.id, name: control.name, value: control.current.integer, minimum: control.minimum, maximum: control.maximum, defaultValue: control.defaultValue)
                }
                let summary = DeviceGetOutput(
                    device: DeviceOutput(found),
                    state: [
                        "format": state.activeFormatID,
                        "fps": state.activeMinFrameDuration.duration.map { String(format: "%.3f", $0.frameRate) } ?? "-",
                        "focus": "\(state.focus.mode)",
                        "exposure": "\(state.exposure.mode)",
                        "white-balance": "\(state.whiteBalance.mode)",
                        "zoom": "\(state.zoom.factor)",
                        "torch": "\(state.torch.mode)",
                    ],
                    controls: controls
                )
                if output.json {
                    try printJSON(summary, snakeCase: true)
                } else {
                    print("\(found.name): \(found.description.localizedName) (\(found.description.modelID))")
                    for (key, value) in summary.state.sorted(by: { $0.key < $1.key }) { print("  \(key) = \(value)") }
                    print("formats:")
                    for format in summary.device.formats { print("  \(format)") }
                    print("controls:")
                    print(table(["ID", "NAME", "VALUE", "MIN", "MAX", "DEFAULT"], controls.map { ["0x" + String($0.id, radix: 16), $0.name, "\($0.value)", "\($0.minimum)", "\($0.maximum)", "\($0.defaultValue)"] }))
                }
            } catch {
                throw userFacing(error)
            }
        }
    }

    struct Set: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Change a camera's configuration under its lease, atomically: all settings or none.",
            discussion: """
                Settings: format=FOURCC-WxH, fps=30 (or 30000/1001), focus=locked|auto|continuous, lens=0..1, \
                exposure=locked|auto|continuous, exposure-duration=1/250 (custom exposure), iso=N, bias=EV, \
                white-balance=locked|auto|continuous, temperature=K, zoom=F, torch=on|off|auto, \
                and raw V4L2 controls as 0xID=value (ids, as `camrig device get` lists them).
                """
        )

        @Argument(help: "The camera: AGENT/DEVICE.")
        var device: String

        @Argument(help: "key=value settings.")
        var settings: [String]

        @OptionGroup var rig: RigOptions
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let logger = output.makeLogger()
            let parsed = try DeviceSettingsParser.parse(settings)
            do {
                let state = try await rig.withPool(logger: logger, clockSamples: 0) { pool -> WireDeviceState in
                    let (devices, _) = await RigDiscovery.devices(in: pool)
                    guard let found = RigDiscovery.find(device, in: devices) else {
                        throw ValidationFailure("no camera '\(device)' on the rig's connected agents; `camrig devices` lists them")
                    }
                    let session = RigSession(pool: pool, logger: logger)
                    try await session.addInput(found)
                    await session.beginConfiguration()
                    await session.setPreset(.inputPriority)
                    await session.setControls(of: found.name, parsed)
                    try await session.commitConfiguration()
                    await session.stop()
                    let (after, _) = await RigDiscovery.devices(in: pool)
                    return RigDiscovery.find(found.name, in: after)?.description.state ?? found.description.state
                }
                if output.json {
                    try printJSON(["device": device, "format": state.activeFormatID, "fps": state.activeMinFrameDuration.duration.map { String(format: "%.3f", $0.frameRate) } ?? "-"], snakeCase: true)
                } else {
                    print("\(device): set \(settings.joined(separator: " ")); now \(state.activeFormatID) at \(state.activeMinFrameDuration.duration.map { FrameRatePlanner.rateText($0) } ?? "-")")
                }
            } catch {
                throw userFacing(error)
            }
        }
    }
}

struct ControlOutput: Encodable {
    var id: UInt32
    var name: String
    var value: Int64
    var minimum: Int64
    var maximum: Int64
    var defaultValue: Int64
}

struct DeviceGetOutput: Encodable {
    var device: DeviceOutput
    var state: [String: String]
    var controls: [ControlOutput]
}

/// `key=value` settings into a `Configure` change.
enum DeviceSettingsParser {
    static func parse(_ settings: [String]) throws -> WireConfigure {
        var change = WireConfigure()
        guard !settings.isEmpty else { throw ValidationError("give at least one key=value setting") }
        for setting in settings {
            let parts = setting.split(separator: "=", maxSplits: 1).map(String.init)
            guard parts.count == 2, !parts[1].isEmpty else { throw ValidationError("'\(setting)' is not key=value") }
            let (key, value) = (parts[0], parts[1])
            func number() throws -> Double {
                guard let number = Double(value) else { throw ValidationError("\(key)=\(value): not a number") }
                return number
            }
            func mode<T>(_ modes: [String: T]) throws -> T {
                guard let mode = modes[value] else { throw ValidationError("\(key)=\(value): use one of \(modes.keys.sorted().joined(separator: ", "))") }
                return mode
            }
            switch key {
            case "format": change.formatID = value
            case "fps":
                guard let duration = duration(ofRate: value) else { throw ValidationError("fps=\(value): give a rate like 30 or 30000/1001") }
                change.minFrameDuration = WireRational(duration)
                change.maxFrameDuration = WireRational(duration)
            case "focus": change.focus.mode = try mode(["locked": .locked, "auto": .auto, "continuous": .continuous])
            case "lens": change.focus.lensPosition = Float(try number())
            case "exposure": change.exposure.mode = try mode(["locked": .locked, "auto": .auto, "continuous": .continuous])
            case "exposure-duration":
                guard let duration = durationText(value) else { throw ValidationError("exposure-duration=\(value): give seconds as a fraction like 1/250") }
                change.exposure.mode = .custom
                change.exposure.duration = WireRational(duration)
            case "iso": change.exposure.iso = Float(try number())
            case "bias": change.exposure.targetBias = Float(try number())
            case "white-balance": change.whiteBalance.mode = try mode(["locked": .locked, "auto": .auto, "continuous": .continuous])
            case "temperature": change.whiteBalance.temperatureKelvin = Float(try number())
            case "zoom": change.zoom.factor = try number()
            case "torch": change.torch.mode = try mode(["on": .on, "off": .off, "auto": .auto])
            default:
                guard key.hasPrefix("0x"), let id = UInt32(key.dropFirst(2), radix: 16), let raw = Int64(value) else {
                    throw ValidationError("unknown setting '\(key)'; see `camrig device set --help`")
                }
                var control = WireControlValue()
                control.id = id
                control.integer = raw
                change.rawControls.append(control)
            }
        }
        return change
    }

    /// "30" → 1/30 s; "30000/1001" → 1001/30000 s.
    static func duration(ofRate text: String) -> FrameDuration? {
        let parts = text.split(separator: "/")
        if parts.count == 2, let numerator = UInt32(parts[0]), let denominator = UInt32(parts[1]) {
            return FrameDuration(numerator: denominator, denominator: numerator)
        }
        guard let rate = UInt32(text) else { return nil }
        return FrameDuration(framesPerSecond: rate)
    }

    /// "1/250" → 1/250 s.
    static func durationText(_ text: String) -> FrameDuration? {
        let parts = text.split(separator: "/")
        guard parts.count == 2, let numerator = UInt32(parts[0]), let denominator = UInt32(parts[1]) else { return nil }
        return FrameDuration(numerator: numerator, denominator: denominator)
    }
}
