import ArgumentParser
import CamRigCLI
import CamRigSecurity
import CamRigViews
import Foundation

extension Certs {
    /// `camrig certs revoke-token`: an access token the service must refuse from now on.
    struct RevokeToken: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "revoke-token",
            abstract: "Revoke an access token before it expires (revoked-tokens.json in the TLS directory).",
            discussion: """
                The token must be one this CA issued. A service using this directory refuses it from its next \
                request on; a service elsewhere needs the file copied into its TLS directory.
                """
        )

        @Option(name: .long, help: ArgumentHelp("Directory holding the CA (ca.pem).", valueName: "dir"))
        var dir: String

        @Argument(help: "The token (camrig1.…).")
        var token: String

        @Flag(name: .long, help: "Print JSON.")
        var json = false

        func run() async throws {
            do {
                let directory = TLSDirectory(path: dir)
                guard let claims = AccessTokens.claims(of: token, trustRoot: try directory.trustRoot()) else {
                    throw CommandFailure("that is not a token issued by the CA in \(dir)")
                }
                let entry = try TokenDenyList.revoke(claims, in: directory)
                if json {
                    try printJSON(["id": entry.id, "name": entry.name, "revoked_at": ISO8601DateFormatter().string(from: entry.revokedAt)])
                } else {
                    print("revoked the token of '\(entry.name)' (\(entry.id)); \(TokenDenyList.fileName) in \(dir) lists it until it would have expired")
                }
            } catch {
                throw userFacing(error)
            }
        }
    }
}
