import ArgumentParser
import CamRigCLI
import CamRigSecurity

extension Certs {
    /// `camrig certs issue`: one more certificate from the directory's CA.
    struct Issue: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Issue a certificate signed by the directory's CA.")

        @Option(name: .long, help: ArgumentHelp("Directory holding the CA (ca.pem, ca-key.pem).", valueName: "dir"))
        var dir: String

        @Option(name: .long, help: "Name of the holder: the certificate's common name and file name.")
        var name: String

        @Option(name: .long, help: "agent, coordinator or viewer.")
        var role: PeerRole

        @Option(name: .long, parsing: .upToNextOption, help: "Host names or IP addresses to list in the certificate.")
        var host: [String] = []

        @Option(name: .long, help: "Validity in days.")
        var days = 825

        @Flag(name: .long, help: "Print JSON.")
        var json = false

        func validate() throws {
            guard days > 0 else { throw ValidationError("--days must be positive") }
        }

        func run() async throws {
            let directory = TLSDirectory(path: dir)
            do {
                let issued = try directory.issue(name: name, role: role, hostnames: host, validFor: days)
                try CertificateSummary(name: name, identity: issued.identity, directory: directory).printMade("issued", json: json)
            } catch {
                throw userFacing(error)
            }
        }
    }
}
