import ArgumentParser
import CamRigCLI
import CamRigSecurity
import CamRigViews
import Foundation

extension Certs {
    /// `camrig certs token`: an access token for the service's API and console.
    struct Token: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Issue an access token for `camrig serve`'s API and console (for browsers and scripts without a client certificate).",
            discussion: """
                The token is signed by the directory's CA and checked by the service against ca.pem alone. Send it \
                as `Authorization: Bearer TOKEN`, or open https://HOST:PORT/login?token=TOKEN in a browser. \
                operator may do everything; viewer may only look (status, previews, captures).
                """
        )

        @Option(name: .long, help: ArgumentHelp("Directory holding the CA (ca.pem, ca-key.pem).", valueName: "dir"))
        var dir: String

        @Option(name: .long, help: "Who holds the token (shown in the console and in events).")
        var name: String

        @Option(name: .long, help: "operator or viewer.")
        var role: AccessRole = .viewer

        @Option(name: .long, help: "Validity in days.")
        var days = 30.0

        @Flag(name: .long, help: "Print JSON.")
        var json = false

        func validate() throws {
            guard days > 0, days <= 3650 else { throw ValidationError("--days must be within (0, 3650]") }
            guard !name.isEmpty, name.count <= 64 else { throw ValidationError("--name must be 1 to 64 characters") }
        }

        func run() async throws {
            do {
                let expires = Date().addingTimeInterval(days * 86_400)
                let token = try AccessTokens.issue(name: name, role: role, expires: expires, authority: try TLSDirectory(path: dir).loadAuthority())
                if json {
                    try printJSON(["token": token, "name": name, "role": role.rawValue, "expires": ISO8601DateFormatter().string(from: expires)])
                } else {
                    print(token)
                }
            } catch {
                throw userFacing(error)
            }
        }
    }
}
