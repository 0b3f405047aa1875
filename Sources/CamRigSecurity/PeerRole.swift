/// What a certificate allows its holder to be in a rig.
///
/// The role travels in the certificate's subject as the organizational unit (`OU=agent`), so any TLS
/// peer, in any language, can read it with its X.509 library.
public enum PeerRole: String, Sendable, CaseIterable, Codable {
    /// A camera host running `camrig-agent`.
    case agent
    /// A coordinator: may do everything on an agent.
    case coordinator
    /// A viewer: may describe devices and watch streams, nothing else.
    case viewer
}
