import ArgumentParser

/// `camrig captures list|show|recover|finalize|offload|export|import`: the catalog.
struct Captures: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "The capture catalog.", subcommands: [List.self, Show.self, Recover.self, Finalize.self, Offload.self, Export.self, Import.self])
}
