import ArgumentParser
import Foundation

/// The service's own options, the same for `camrig serve` and the `camrig-service` program it runs.
public struct ServeOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("Address to serve the API and console on, HOST:PORT (port 0: any free port).", valueName: "host:port"))
    public var listen = "127.0.0.1:8443"

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Start this many agents with synthetic cameras on loopback and serve them (certificates in a temporary directory), for trying the console.",
            valueName: "n"))
    public var loopback: Int?

    @Option(name: .long, help: ArgumentHelp("Synthetic cameras per loopback agent.", valueName: "n"))
    public var cameras = 1

    @Option(name: .long, help: ArgumentHelp("The console's files (default: the ones installed with the service).", valueName: "dir"))
    public var console: String?

    @Flag(name: .long, help: "Do not phase-lock free-running cameras.")
    public var noPhaseLock = false

    @Option(
        name: .long,
        help: ArgumentHelp(
            "An origin besides the service's own that browsers may change the rig from, e.g. https://rig.example (a reverse proxy in front of the service; repeatable).",
            valueName: "url"))
    public var allowOrigin: [String] = []

    @Flag(
        name: .long,
        help: "Let agents join the rig with a join token (`camrig certs join-token`): they send a certificate request, get a certificate from the TLS directory's CA, and are connected to. Needs the CA's key (ca-key.pem) in the TLS directory.")
    public var enroll = false

    @Option(name: .long, help: ArgumentHelp("Days an enrolled agent's certificate is valid (default 90); the agent renews it two thirds into its life.", valueName: "days"))
    public var certificateDays = 90.0

    public init() {}

    public func validate() throws {
        _ = try listenAddress()
        if let loopback { guard (1...32).contains(loopback) else { throw ValidationError("--loopback takes 1…32 agents") } }
        guard (1...8).contains(cameras) else { throw ValidationError("--cameras must be within 1…8") }
        guard certificateDays > 0, certificateDays <= 825 else { throw ValidationError("--certificate-days must be within (0, 825]") }
    }

    /// `--listen` as a host (brackets of an IPv6 address removed) and a port.
    public func listenAddress() throws -> (host: String, port: Int) {
        guard let colon = listen.lastIndex(of: ":"), let port = Int(listen[listen.index(after: colon)...]), (0...65535).contains(port) else {
            throw ValidationError("--listen '\(listen)' is not HOST:PORT, e.g. 0.0.0.0:8443")
        }
        return (String(listen[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]")), port)
    }

    /// These options as command-line arguments, to hand on to the program that serves.
    public var arguments: [String] {
        var arguments = ["--listen", listen, "--cameras", "\(cameras)"]
        if let loopback { arguments += ["--loopback", "\(loopback)"] }
        if let console { arguments += ["--console", console] }
        if noPhaseLock { arguments.append("--no-phase-lock") }
        for origin in allowOrigin { arguments += ["--allow-origin", origin] }
        if enroll { arguments.append("--enroll") }
        arguments += ["--certificate-days", "\(certificateDays)"]
        return arguments
    }
}
