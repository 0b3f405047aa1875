import CamRigSecurity
import CamRigWire

// Certificate roles on the wire.

extension PeerRole {
    /// The role as the wire protocol spells it.
    public var wire: WirePeerRole {
        switch self {
        case .agent: .agent
        case .coordinator: .coordinator
        case .viewer: .viewer
        }
    }
}

extension WirePeerRole {
    /// The role as certificates spell it (`PeerRole.rawValue`), or "role-less".
    public var roleName: String {
        switch self {
        case .agent: PeerRole.agent.rawValue
        case .coordinator: PeerRole.coordinator.rawValue
        case .viewer: PeerRole.viewer.rawValue
        case .unspecified, .UNRECOGNIZED: "role-less"
        }
    }
}
