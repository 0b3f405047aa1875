import ArgumentParser
import CamRigSecurity
import CamRigViews

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
        subcommands: [Init.self, Issue.self, Renew.self, Revoke.self, List.self, Token.self, RevokeToken.self, JoinToken.self]
    )
}

extension PeerRole: ExpressibleByArgument {}

extension AccessRole: ExpressibleByArgument {}
