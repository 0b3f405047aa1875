import ArgumentParser
import CamRigCLI
import CamRigSecurity
import Foundation

/// `camrig certs …`: the rig's certificate authority.
struct Certs: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "certs",
        abstract: "Create the rig's certificate authority and issue certificates.",
        discussion: """
            Every agent, coordinator and viewer presents a certificate signed by the rig's CA; the role \
            (agent, coordinator, viewer) is part of the certificate. Copy ca.pem and a host's NAME.pem and \
            NAME-key.pem to that host; keep ca-key.pem where certificates are issued.
            """,
        subcommands: [Init.self, Issue.self, List.self]
    )

    struct Init: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a CA and a coordinator certificate in a new directory."
        )

        @Option(name: .long, help: ArgumentHelp("Directory to create (or an empty one).", valueName: "dir"))
        var dir: String

        @Option(name: .long, help: "Name of the coordinator certificate.")
        var coordinatorName = "coordinator"

        @Option(name: .long, help: "Common name of the CA (default: 'CamRig CA' and a random suffix).")
        var caName: String?

        @Flag(name: .long, help: "Print JSON.")
        var json = false

        func run() async throws {
            let directory = TLSDirectory(path: dir)
            do {
                let (authority, coordinator) = try directory.initialize(caName: caName, coordinatorName: coordinatorName)
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
                let summary = CertificateSummary(name: name, identity: issued.identity, directory: directory)
                if json {
                    try printJSON(summary)
                } else {
                    print("issued \(role.rawValue) certificate '\(name)': \(summary.certificate), key \(summary.key)")
                    print("valid until \(summary.notValidAfter)")
                }
            } catch {
                throw userFacing(error)
            }
        }
    }

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
                if json {
                    try printJSON(InitOutput(ca: "\(root.subject)", directory: dir, certificates: summaries))
                } else {
                    print("CA: \(root.subject)")
                    for summary in summaries {
                        let expired = summary.expired ? "  EXPIRED" : ""
                        print("\(summary.name.padding(toLength: 24, withPad: " ", startingAt: 0)) \(summary.role.padding(toLength: 12, withPad: " ", startingAt: 0)) until \(summary.notValidAfter)\(expired)")
                    }
                }
            } catch {
                throw userFacing(error)
            }
        }
    }
}

extension PeerRole: ExpressibleByArgument {}

struct CertificateSummary: Encodable {
    var name: String
    var role: String
    var notValidAfter: String
    var expired: Bool
    var certificate: String
    var key: String

    init(name: String, identity: PeerIdentity, directory: TLSDirectory) {
        self.name = name
        self.role = identity.role.rawValue
        let formatter = ISO8601DateFormatter()
        self.notValidAfter = formatter.string(from: identity.notValidAfter)
        self.expired = identity.notValidAfter < Date()
        self.certificate = (directory.path as NSString).appendingPathComponent("\(name).pem")
        self.key = (directory.path as NSString).appendingPathComponent("\(name)-key.pem")
    }

    enum CodingKeys: String, CodingKey {
        case name, role, expired, certificate, key
        case notValidAfter = "not_valid_after"
    }
}

struct InitOutput: Encodable {
    var ca: String
    var directory: String
    var certificates: [CertificateSummary]
}
