import Foundation
import Yams

/// The agent's configuration file (YAML). Every key is optional; command-line flags override it.
///
///     listen: 0.0.0.0:7450
///     tls_dir: /etc/camrig/tls
///     identity: cam-host-01
///     agent_id: cam-host-01
///     log_level: info
///     spool:
///       dir: /var/lib/camrig/spool
///       size_mb: 1024
///       recording_space_mb: 20000   # on-host recordings; default: free space less 256 MiB
///     devices:
///       synthetic: 0
///       v4l2: ["/dev/video*"]
///     limits:
///       handshake_timeout_s: 5
///       idle_timeout_s: 120
///       max_connections: 64
///       max_unauthenticated: 32
///       max_unauthenticated_per_address: 4
public struct AgentConfigurationFile: Codable, Equatable, Sendable {
    public struct Spool: Codable, Equatable, Sendable {
        public var dir: String?
        public var sizeMB: Int?
        /// The most on-host recordings may take, in MiB.
        public var recordingSpaceMB: Int?

        enum CodingKeys: String, CodingKey {
            case dir
            case sizeMB = "size_mb"
            case recordingSpaceMB = "recording_space_mb"
        }
    }

    public struct Devices: Codable, Equatable, Sendable {
        public var synthetic: Int?
        public var v4l2: [String]?
        /// Serve libcamera's cameras (default: yes, unless synthetic cameras are asked for).
        public var libcamera: Bool?
    }

    public struct Limits: Codable, Equatable, Sendable {
        public var handshakeTimeoutSeconds: Int?
        public var idleTimeoutSeconds: Int?
        public var maxConnections: Int?
        public var maxUnauthenticated: Int?
        public var maxUnauthenticatedPerAddress: Int?

        enum CodingKeys: String, CodingKey {
            case handshakeTimeoutSeconds = "handshake_timeout_s"
            case idleTimeoutSeconds = "idle_timeout_s"
            case maxConnections = "max_connections"
            case maxUnauthenticated = "max_unauthenticated"
            case maxUnauthenticatedPerAddress = "max_unauthenticated_per_address"
        }
    }

    /// Joining a rig through `camrig serve` with a join token (`camrig certs join-token`).
    public struct Enroll: Codable, Equatable, Sendable {
        /// The service, https://HOST[:PORT].
        public var url: String?
        public var token: String?
        /// The address the coordinator should connect to (default: the one the request comes from).
        public var host: String?
        /// Seconds between fetches of the rig's revocation list.
        public var revocationRefreshSeconds: Int?

        enum CodingKeys: String, CodingKey {
            case url, token, host
            case revocationRefreshSeconds = "crl_refresh_s"
        }
    }

    public var listen: String?
    public var enroll: Enroll?
    public var tlsDir: String?
    public var identity: String?
    public var insecure: Bool?
    public var agentID: String?
    public var logLevel: String?
    public var spool: Spool?
    public var devices: Devices?
    public var limits: Limits?

    enum CodingKeys: String, CodingKey, CaseIterable {
        case listen, identity, insecure, spool, devices, limits, enroll
        case tlsDir = "tls_dir"
        case agentID = "agent_id"
        case logLevel = "log_level"
    }

    public init() {}

    /// Parses YAML; unknown keys are errors (a misspelt key would otherwise be silently ignored).
    public init(yaml: String, source: String = "configuration") throws {
        if yaml.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
            self.init()
            return
        }
        do {
            if let node = try Yams.compose(yaml: yaml), let mapping = node.mapping {
                try Self.checkKeys(mapping, allowed: CodingKeys.allCases.map(\.rawValue), path: "")
                for (section, keys) in [("spool", ["dir", "size_mb", "recording_space_mb"]), ("devices", ["synthetic", "v4l2", "libcamera"]), ("enroll", ["url", "token", "host", "crl_refresh_s"]), ("limits", ["handshake_timeout_s", "idle_timeout_s", "max_connections", "max_unauthenticated", "max_unauthenticated_per_address"])] {
                    if let nested = mapping[Node(section)]?.mapping { try Self.checkKeys(nested, allowed: keys, path: "\(section).") }
                }
            }
            self = try YAMLDecoder().decode(Self.self, from: yaml)
        } catch let error as ConfigurationError {
            throw ConfigurationError(message: "\(source): \(error.message)")
        } catch {
            throw ConfigurationError(message: "\(source): \(error)")
        }
    }

    /// Reads and parses a file.
    public init(contentsOf path: String) throws {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw ConfigurationError(message: "cannot read configuration file \(path)")
        }
        try self.init(yaml: text, source: path)
    }

    static func checkKeys(_ mapping: Node.Mapping, allowed: [String], path: String) throws {
        for key in mapping.keys {
            guard let name = key.string, allowed.contains(name) else {
                throw ConfigurationError(message: "unknown key '\(path)\(key.string ?? "\(key)")'; known keys: \(allowed.map { path + $0 }.joined(separator: ", "))")
            }
        }
    }
}

/// A configuration file that cannot be used.
public struct ConfigurationError: Error, CustomStringConvertible, Sendable {
    public var message: String
    public var description: String { message }
}
