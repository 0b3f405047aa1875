import ArgumentParser
import CamRigCLI
import CamRigSecurity

extension Certs {
    /// `camrig certs renew`: a certificate re-issued before it expires.
    struct Renew: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Re-issue a certificate with the same name, role and host names, and a new key.",
            discussion: "Run where the CA's key is. The new files replace the old ones; copy them to the holder and reload it (agents re-read their TLS directory on SIGHUP: `systemctl reload camrig-agent`)."
        )

        @Option(name: .long, help: ArgumentHelp("Directory holding the CA (ca.pem, ca-key.pem) and the certificate.", valueName: "dir"))
        var dir: String

        @Option(name: .long, help: "Name of the certificate to renew.")
        var name: String

        @Option(name: .long, help: "Validity in days, from now.")
        var days = 825

        @Flag(name: .long, help: "Print JSON.")
        var json = false

        func validate() throws {
            guard days > 0 else { throw ValidationError("--days must be positive") }
        }

        func run() async throws {
            let directory = TLSDirectory(path: dir)
            do {
                let issued = try directory.renew(name: name, validFor: days)
                try CertificateSummary(name: name, identity: issued.identity, directory: directory).printMade("renewed", json: json)
            } catch {
                throw userFacing(error)
            }
        }
    }
}
