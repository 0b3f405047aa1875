import ArgumentParser

/// `camrig sync …`: clock synchronization with the rig's agents.
struct Sync: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Clock synchronization with the rig's agents.", subcommands: [Status.self])
}
