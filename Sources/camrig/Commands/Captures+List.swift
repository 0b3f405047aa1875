import ArgumentParser
import CamRigCLI
import CamRigStorage
import CamRigText

extension Captures {
    /// `camrig captures list`: the captures in the catalog, of every rig sharing it or of one.
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List captures, newest first.",
            discussion: "A catalog several rigs share (--catalog) lists every rig's captures; --rig NAME lists one rig's."
        )
        @Option(name: .long, help: ArgumentHelp("Only this rig's captures (its --rig-name, or the rig file's name:).", valueName: "name"))
        var rig: String?
        @Option(name: .long, help: "At most this many, the newest.")
        var limit: Int?
        @OptionGroup var captures: CaptureOptions
        @OptionGroup var output: OutputOptions

        func validate() throws {
            if let limit, limit < 1 { throw ValidationError("--limit must be at least 1") }
        }

        func run() async throws {
            do {
                let query = CaptureCatalog.Query(rig: rig, limit: limit)
                let entries = try await captures.withStorage(logger: output.makeLogger()) { store in try await store.catalog.list(query) }
                if output.json {
                    try printJSON(["captures": entries])
                } else {
                    print(table(
                        ["ID", "RIG", "KIND", "STATE", "CREATED", "CAMERAS", "HELD BY AGENTS", "SETS", "INCOMPLETE", "DROPPED", "SKEW p50 µs", "SKEW max µs"],
                        entries.map {
                            [
                                $0.id, $0.rig.isEmpty ? "-" : $0.rig, $0.kind, $0.state, $0.created, "\($0.cameras)", "\($0.missing)", "\($0.sets)", "\($0.incompleteSets)",
                                "\($0.droppedFrames)", micros($0.skewP50Ns), micros($0.skewMaxNs),
                            ]
                        }
                    ))
                }
            } catch {
                throw userFacing(error)
            }
        }
    }
}
