import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigDevices
import CamRigWireModel
import Foundation

extension Device {
    /// `camrig device get`: one camera's formats, state and controls.
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
                        throw CommandFailure("no camera '\(device)' on the rig's connected agents; `camrig devices` lists them")
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
                        "responsive": state.photoOutput.responsiveCapture ? "on" : "off",
                        "deferred": state.photoOutput.deferredDelivery ? "on" : "off",
                        "max-quality": state.photoOutput.maxQualityPrioritization == .unspecified
                            ? "quality" : PhotoQualityPrioritization(state.photoOutput.maxQualityPrioritization).description,
                        "max-photo-size": "\(state.photoOutput.maxPhotoDimensions.width)x\(state.photoOutput.maxPhotoDimensions.height)",
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
}
