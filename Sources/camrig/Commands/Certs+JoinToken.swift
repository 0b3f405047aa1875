import ArgumentParser
import CamRigCLI
import CamRigSecurity
import Foundation

extension Certs {
    /// `camrig certs join-token`: tokens with which agents join the rig through `camrig serve --enroll`.
    struct JoinToken: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "join-token",
            abstract: "Make a join token with which camera hosts enroll themselves (`camrig-agent --enroll https://SERVICE --token TOKEN`).",
            discussion: """
                The token is one line: an id, a secret, and the pin of this directory's CA (the hash of its key), \
                so that an agent checks it reached the rig's own service before it trusts anything it is sent. \
                The agent makes its key on its host and sends only a certificate request; `camrig serve --enroll`, \
                run with this directory, signs it and connects to the agent. A token may be used --uses times \
                until --expires; --revoke ends it early (agents that joined with it stay). The directory keeps \
                only a hash of the secret (enrollment/tokens.json); --list shows every token and its uses.
                """
        )

        @Option(name: .long, help: ArgumentHelp("The CA's directory, the one `camrig serve` runs with.", valueName: "dir"))
        var dir: String

        @Option(name: .long, help: "The role of the certificates issued with it (agent).")
        var role: PeerRole = .agent

        @Option(name: .long, help: "The certificate name of the one host this token enrolls.")
        var name: String?

        @Option(name: .long, help: ArgumentHelp("Names for the hosts this token enrolls: PREFIX followed by each host's name (unless it starts with PREFIX).", valueName: "prefix"))
        var prefix: String?

        @Option(name: .long, help: ArgumentHelp("How long the token may be used: 90s, 30m, 1h, 7d.", valueName: "duration"))
        var expires = "1h"

        @Option(name: .long, help: "How many hosts may enroll with it.")
        var uses = 1

        @Option(name: .long, help: ArgumentHelp("End the token with this id (or the whole token) now.", valueName: "id"))
        var revoke: String?

        @Flag(name: .long, help: "List the directory's tokens (never their secrets) and how often each was used.")
        var list = false

        @Flag(name: .long, help: "Print JSON.")
        var json = false

        func validate() throws {
            if name != nil, prefix != nil { throw ValidationError("give --name or --prefix, not both") }
            guard (1...100_000).contains(uses) else { throw ValidationError("--uses must be within 1…100000") }
            _ = try Self.duration(expires)
        }

        static func duration(_ text: String) throws -> TimeInterval {
            let units: [Character: TimeInterval] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]
            guard let unit = text.last.flatMap({ units[$0] }), let value = Double(text.dropLast()), value > 0, value * unit <= 365 * 86_400 else {
                throw ValidationError("--expires '\(text)' is not a duration like 90s, 30m, 1h or 7d (at most a year)")
            }
            return value * unit
        }

        struct Listed: Encodable {
            var id: String
            var role: String
            var name: String?
            var prefix: String?
            /// ISO 8601, as everywhere in CamRig's JSON.
            var created: String
            var expires: String
            var uses: Int
            var used: Int
            var revoked: String?
            var state: String
        }

        func run() async throws {
            do {
                let directory = TLSDirectory(path: dir)
                let tokens = JoinTokenList(directory: directory)
                if let revoke {
                    let token = (try? CamRigSecurity.JoinToken(text: revoke))?.id ?? revoke
                    let record = try tokens.revoke(id: token)
                    if json { try printJSON(["id": record.id, "revoked": ISO8601DateFormatter().string(from: record.revoked ?? Date())]) } else {
                        print("join token \(record.id) revoked: it enrolls no more hosts (those that joined with it stay)")
                    }
                    return
                }
                if list {
                    let used = EnrollmentRegistrar.uses(in: directory)
                    let formatter = ISO8601DateFormatter()
                    let listed = try tokens.records().map { token in
                        let count = used[token.id, default: 0]
                        let state = token.revoked != nil ? "revoked" : token.expires < Date() ? "expired" : count >= token.uses ? "used up" : "valid"
                        return Listed(
                            id: token.id, role: token.role.rawValue, name: token.name, prefix: token.prefix, created: formatter.string(from: token.created),
                            expires: formatter.string(from: token.expires), uses: token.uses, used: count, revoked: token.revoked.map(formatter.string(from:)),
                            state: state)
                    }
                    if json { try printJSON(listed, snakeCase: true) } else {
                        for token in listed {
                            let naming = token.name.map { "name \($0)" } ?? token.prefix.map { "prefix \($0)" } ?? "host names"
                            print("\(token.id)  \(token.state)  \(token.used)/\(token.uses) used  until \(token.expires)  \(naming)")
                        }
                    }
                    return
                }
                let expiry = Date().addingTimeInterval(try Self.duration(expires))
                let (token, record) = try tokens.make(role: role, name: name, prefix: prefix, expires: expiry, uses: uses)
                if json {
                    try printJSON([
                        "token": token.text, "id": record.id, "expires": ISO8601DateFormatter().string(from: expiry), "uses": "\(uses)",
                        "ca_pin": token.caPin,
                    ])
                } else {
                    print(token.text)
                }
            } catch {
                throw userFacing(error)
            }
        }
    }
}
