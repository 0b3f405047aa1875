import ArgumentParser

/// `camrig device get|set`: one camera's configuration, remotely, like `v4l2-ctl -C/-c`.
struct Device: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Read or change one camera's configuration.", subcommands: [Get.self, Set.self])
}
