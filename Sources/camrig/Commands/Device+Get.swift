import CamRigText
import CamRigViews
import ArgumentParser
import CamRigCLI
import CamRigCoordinator
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
                let summary = DeviceGetOutput(found)
                let controls = summary.controls
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
