import CamRigText
import CamRigViews
import ArgumentParser
import CamRigCLI
import Foundation

extension Captures {
    /// `camrig captures show ID`: one capture's manifest.
    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show one capture: cameras, clock statistics and sync sets.")
        @Argument(help: "Capture id (or a unique prefix).")
        var id: String
        @OptionGroup var captures: CaptureOptions
        @OptionGroup var output: OutputOptions

        func run() async throws {
            do {
                let (manifest, directory) = try await captures.withStorage(logger: output.makeLogger()) { store in
                    let entry = try await CaptureOptions.entry(id, in: store)
                    return (try await store.manifest(of: entry), try store.handle(of: entry).location.captureLocation)
                }
                if output.json {
                    try printJSON(manifest, snakeCase: true)
                } else {
                    print(CaptureOutput(manifest, directory: directory).text)
                    for set in manifest.sets.prefix(20) {
                        print("  set \(set.index): \(set.complete ? "complete" : "missing cameras \(set.missingCameras)"), skew \(micros(set.skewNs)) µs")
                    }
                    if manifest.sets.count > 20 { print("  … \(manifest.sets.count - 20) more sets in manifest.json") }
                }
            } catch {
                throw userFacing(error)
            }
        }
    }
}
