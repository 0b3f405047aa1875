import ArgumentParser
import CamRigCLI
import CamRigSecurity

extension Certs {
    /// `camrig certs init`: a new CA and the coordinator's certificate.
    struct Init: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a CA and a coordinator certificate in a new directory."
        )

        @Option(name: .long, help: ArgumentHelp("Directory to create (or an empty one).", valueName: "dir"))
        var dir: String

        @Option(name: .long, help: "Name of the coordinator certificate.")
        var coordinatorName = "coordinator"

        @Option(
            name: .long,
            help: ArgumentHelp(
                "A host name or address the coordinator's certificate names besides localhost, 127.0.0.1, ::1 and this host's name: the one `camrig serve` is reached by (repeatable).",
                valueName: "host"))
        var hostname: [String] = []

        @Option(name: .long, help: "Common name of the CA (default: 'CamRig CA' and a random suffix).")
        var caName: String?

        @Flag(name: .long, help: "Print JSON.")
        var json = false

        func run() async throws {
            let directory = TLSDirectory(path: dir)
            do {
                let (authority, coordinator) = try directory.initialize(
                    caName: caName, coordinatorName: coordinatorName, coordinatorHostnames: TLSDirectory.localHostnames() + hostname)
                let summary = CertificateSummary(name: coordinatorName, identity: coordinator.identity, directory: directory)
                if json {
                    try printJSON(InitOutput(ca: "\(authority.certificate.subject)", directory: dir, certificates: [summary]))
                } else {
                    print("created CA '\(authority.certificate.subject)' in \(dir)")
                    print("issued \(summary.role) certificate '\(summary.name)' (valid until \(summary.notValidAfter))")
                    print("next: camrig certs issue --dir \(dir) --name agent-1 --role agent")
                }
            } catch {
                throw userFacing(error)
            }
        }
    }
}
