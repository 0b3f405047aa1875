import CamRigServiceClient
import CamRigViews
import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigWire
import Foundation

extension Device {
    /// `camrig device set`: change one camera's configuration under its lease.
    struct Set: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Change a camera's configuration under its lease, atomically: all settings or none.",
            discussion: """
                Settings: format=FOURCC-WxH, fps=30 (or 30000/1001), focus=locked|auto|continuous, lens=0..1, \
                exposure=locked|auto|continuous, exposure-duration=1/250 (custom exposure), iso=N, bias=EV, \
                white-balance=locked|auto|continuous, temperature=K, zoom=F, torch=on|off|auto, \
                the photo output's responsive=on|off (responsive capture), deferred=on|off (deferred delivery of \
                quality photos), max-quality=speed|balanced|quality and max-photo-size=WxH, \
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
            // Settings that cannot be parsed are a usage error, found before connecting.
            do { _ = try DeviceSettingsParser.parse(settings) } catch { throw ValidationError("\(error)") }
            do {
                var pairs: [String: String] = [:]
                for setting in settings {
                    let parts = setting.split(separator: "=", maxSplits: 1).map(String.init)
                    pairs[parts[0]] = parts[1]
                }
                if let detail = try await rig.throughService(logger: logger, { client in
                    // The camera as the service names it (a bare device id is found among the rig's cameras).
                    let cameras: [CameraView] = try await client.get("/api/v1/devices")
                    let exact = cameras.filter { $0.device.name == device }
                    let matches = exact.isEmpty ? cameras.filter { $0.device.device == device } : exact
                    guard matches.count == 1, let camera = matches.first else {
                        throw CommandFailure(
                            matches.isEmpty
                                ? "no camera '\(device)' on the service's rig; `camrig devices` lists them"
                                : "'\(device)' is a camera of several agents (\(matches.map(\.device.name).joined(separator: ", "))): name it AGENT/DEVICE")
                    }
                    let path = ServiceClient.cameraPath(agent: camera.device.agent, device: camera.device.device)
                    return try await client.put("\(path)/settings", SettingsRequest(settings: pairs), as: CameraDetail.self)
                }) {
                    if output.json {
                        try printJSON(["device": device, "format": detail.camera.device.activeFormat, "fps": detail.camera.device.activeFps.map { String(format: "%.3f", $0) } ?? "-"], snakeCase: true)
                    } else {
                        print("\(device): set \(settings.joined(separator: " ")) through the service; now \(detail.camera.device.activeFormat) at \(detail.camera.device.activeFps.map { String(format: "%.3f fps", $0) } ?? "-")")
                    }
                    return
                }
                let state = try await rig.withPool(logger: logger, clockSamples: 0) { pool -> WireDeviceState in
                    let (devices, _) = await RigDiscovery.devices(in: pool)
                    guard let found = RigDiscovery.find(device, in: devices) else {
                        throw CommandFailure("no camera '\(device)' on the rig's connected agents; `camrig devices` lists them")
                    }
                    let session = RigSession(pool: pool, logger: logger)
                    try await session.addInput(found)
                    await session.beginConfiguration()
                    await session.setPreset(.inputPriority)
                    // Photo output keys change the device's photo output as it is now.
                    await session.setControls(of: found.name, try DeviceSettingsParser.parse(settings, photoOutput: found.description.state.photoOutput))
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
