import ArgumentParser
import CamRigCLI
import CamRigWire

/// `camrig`: the coordinator and command line of a CamRig rig.
@main
struct CamRigCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "camrig",
        abstract: "Synchronized capture across many camera hosts.",
        discussion: """
            Agents (camrig-agent) run on every camera host; this command talks to them over TLS with \
            client certificates. Start with `camrig certs init --dir DIR`.
            """,
        version: "camrig \(CamRigVersion.string)",
        subcommands: [Demo.self, Serve.self, Agents.self, Devices.self, Device.self, Capture.self, Record.self, Sync.self, Captures.self, Certs.self, Ping.self]
    )
}
