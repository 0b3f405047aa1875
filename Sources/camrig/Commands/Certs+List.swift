import ArgumentParser
import CamRigCLI
import CamRigSecurity

extension Certs {
    /// `camrig certs list`: the certificates in a directory.
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the certificates in a directory.")

        @Option(name: .long, help: ArgumentHelp("TLS directory.", valueName: "dir"))
        var dir: String

        @Flag(name: .long, help: "Print JSON.")
        var json = false

        func run() async throws {
            let directory = TLSDirectory(path: dir)
            do {
                let root = try directory.trustRoot()
                let summaries = try directory.entries().map {
                    CertificateSummary(name: $0.name, identity: $0.identity, directory: directory)
                }
                let revoked = try directory.revocationList(verifiedBy: root)?.entries.map(RevokedSummary.init) ?? []
                if json {
                    try printJSON(InitOutput(ca: "\(root.subject)", directory: dir, certificates: summaries, revoked: revoked))
                } else {
                    print("CA: \(root.subject)")
                    for summary in summaries {
                        let state = summary.expired ? "  EXPIRED" : summary.expiringSoon ? "  expires in \(summary.daysLeft) days" : ""
                        print("\(summary.name.padding(toLength: 24, withPad: " ", startingAt: 0)) \(summary.role.padding(toLength: 12, withPad: " ", startingAt: 0)) until \(summary.notValidAfter)\(state)")
                    }
                    for entry in revoked {
                        print("revoked: serial \(entry.serial) on \(entry.revokedAt)\(entry.reason.map { " (\($0))" } ?? "") (\(directory.revocationListPath))")
                    }
                    for summary in summaries where summary.expired || summary.expiringSoon {
                        print("warning: '\(summary.name)' \(summary.expired ? "has expired" : "expires within \(CertificateSummary.renewWithinDays) days"): renew it with `camrig certs renew --dir \(dir) --name \(summary.name)` and reload its holder")
                    }
                }
            } catch {
                throw userFacing(error)
            }
        }
    }
}
