import CamRigCLI
import CamRigCoordinator
import CamRigSecurity
import Logging

extension TLSOptions {
    /// A client's security towards agents: plaintext with `--insecure` (with a warning), else TLS 1.3
    /// from `directory(fallback:from:)` with `--identity` (else `fallbackIdentity`).
    func clientSecurity(
        fallbackDirectory: String? = nil, fallbackIdentity: String? = nil, from source: String? = nil, logger: Logger
    ) throws -> ClientSecurity {
        guard let directory = try directory(fallback: fallbackDirectory, from: source) else {
            logger.warning("connecting WITHOUT TLS (--insecure): nothing is encrypted or authenticated")
            return .insecure
        }
        return .tls(try MutualTLS.client(directory: TLSDirectory(path: directory), identityName: identity ?? fallbackIdentity))
    }
}
