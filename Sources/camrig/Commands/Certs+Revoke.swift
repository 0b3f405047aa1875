import ArgumentParser
import CamRigCLI
import CamRigSecurity
import Foundation

extension Certs {
    /// `camrig certs revoke`: a certificate the rig's peers must refuse from now on.
    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Revoke a certificate: add it to the CA's revocation list (crl.pem).",
            discussion: """
                Run where the CA's key is. The certificate's serial number goes on crl.pem, signed by the CA, \
                and its files move to revoked/ so the name can be issued again. Copy crl.pem to every host's \
                TLS directory and send the agents SIGHUP (`systemctl reload camrig-agent`): they re-read it \
                without dropping other connections, and close the revoked peer's.
                """
        )

        @Option(name: .long, help: ArgumentHelp("Directory holding the CA (ca.pem, ca-key.pem) and the certificate.", valueName: "dir"))
        var dir: String

        @Option(name: .long, help: "Name of the certificate to revoke.")
        var name: String

        @Option(
            name: .long,
            help: ArgumentHelp(
                "Why: \(RevocationList.Reason.allCases.map(\.description).joined(separator: ", ")).",
                valueName: "reason"
            )
        )
        var reason: String?

        @Flag(name: .long, help: "Print JSON.")
        var json = false

        func validate() throws {
            if let reason, RevocationList.Reason(name: reason) == nil {
                throw ValidationError(
                    "unknown --reason '\(reason)': use one of \(RevocationList.Reason.allCases.map(\.description).joined(separator: ", "))"
                )
            }
        }

        struct Output: Encodable {
            var name: String
            var serial: String
            var reason: String?
            var revocationList: String
            var revocationListNumber: Int
            var revokedCount: Int

            enum CodingKeys: String, CodingKey {
                case name, serial, reason
                case revocationList = "revocation_list"
                case revocationListNumber = "revocation_list_number"
                case revokedCount = "revoked_count"
            }
        }

        func run() async throws {
            let directory = TLSDirectory(path: dir)
            do {
                let (certificate, list) = try directory.revoke(name: name, reason: reason.flatMap(RevocationList.Reason.init(name:)))
                let output = Output(
                    name: name,
                    serial: certificate.serialNumber.hexadecimal,
                    reason: reason,
                    revocationList: directory.revocationListPath,
                    revocationListNumber: list.number,
                    revokedCount: list.entries.count
                )
                if json {
                    try printJSON(output)
                } else {
                    print("revoked '\(name)' (serial \(output.serial)); \(output.revocationList) now lists \(list.entries.count) certificate(s), number \(list.number)")
                    print("copy \(output.revocationList) to every host's TLS directory and reload the agents (systemctl reload camrig-agent, or kill -HUP)")
                }
            } catch {
                throw userFacing(error)
            }
        }
    }
}
