import CamRigWire

/// A failure talking to an agent, naming the agent and saying what to do.
public struct AgentClientError: Error, Sendable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        /// TCP connection failed (agent down, wrong address, firewall).
        case connectFailed = "connect-failed"
        /// TLS did not complete, or one side refused the other's certificate.
        case tlsFailed = "tls-failed"
        /// The protocol handshake failed (version mismatch, agent refused hello).
        case handshakeFailed = "handshake-failed"
        /// The agent answered a request with an Error.
        case remoteError = "remote-error"
        /// The agent broke the protocol.
        case protocolViolation = "protocol-violation"
        /// No answer in time.
        case timeout
        /// The connection closed.
        case connectionClosed = "connection-closed"
    }

    public var kind: Kind
    public var agent: String
    public var message: String
    /// The agent's error code, for `.remoteError` and failed handshakes.
    public var code: WireErrorCode?

    public init(_ kind: Kind, agent: String, _ message: String, code: WireErrorCode? = nil) {
        self.kind = kind
        self.agent = agent
        self.message = message
        self.code = code
    }

    public var description: String {
        if let code { return "agent \(agent): \(message) [\(code.name)]" }
        return "agent \(agent): \(message)"
    }
}
