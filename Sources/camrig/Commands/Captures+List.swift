import ArgumentParser
import CamRigCLI

extension Captures {
    /// `camrig captures list`: every capture in the catalog.
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List captures, newest first.")
        @OptionGroup var captures: CaptureOptions
        @OptionGroup var output: OutputOptions

        func run() async throws {
            do {
                let store = try captures.store()
                let entries = try store.catalog.list()
                if output.json {
                    try printJSON(["captures": entries])
                } else {
                    print(table(
                        ["ID", "KIND", "STATE", "CREATED", "CAMERAS", "HELD BY AGENTS", "SETS", "INCOMPLETE", "DROPPED", "SKEW p50 µs", "SKEW max µs"],
                        entries.map { [$0.id, $0.kind, $0.state, $0.created, "\($0.cameras)", "\($0.missing)", "\($0.sets)", "\($0.incompleteSets)", "\($0.droppedFrames)", micros($0.skewP50Ns), micros($0.skewMaxNs)] }
                    ))
                }
            } catch {
                throw userFacing(error)
            }
        }
    }
}
