import ArgumentParser
import CamRigCoordinator
import CamRigWire

extension AgentEndpoint {
    /// Parses an `--agent` value (or a rig file's entry) with `AgentEndpoint(_:)`, failing with what
    /// the user should type.
    static func argument(_ text: String) throws -> AgentEndpoint {
        guard let endpoint = AgentEndpoint(text) else {
            throw ValidationError("'\(text)' is not HOST[:PORT] (IPv6 as [ADDR]:PORT; the port defaults to 7450)")
        }
        return endpoint
    }
}
