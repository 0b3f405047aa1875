import CamRigSecurity

/// How a client connects to agents.
public enum ClientSecurity: Sendable {
    /// TLS 1.3 with this client's certificate; only agents of the same CA are accepted.
    case tls(MutualTLS)
    /// Plaintext, for agents started with `--insecure`.
    case insecure
}
