import Foundation

/// Where captures go in an S3-compatible store and how to reach it: `s3://BUCKET/PREFIX`, with the
/// endpoint, region and credentials in the conventions of AWS's own tools.
public struct ObjectStoreLocation: Sendable, Hashable, CustomStringConvertible {
    /// `http(s)://HOST[:PORT]`, no path.
    public var endpoint: String
    public var region: String
    public var bucket: String
    /// Keys start with it (no leading or trailing `/`; empty for the bucket's top).
    public var prefix: String
    /// `ENDPOINT/BUCKET/KEY` rather than `BUCKET.HOST/KEY`: what self-hosted stores want.
    public var pathStyle: Bool
    public var credentials: ObjectStoreCredentials
    /// PEM file of the certificate authorities to trust for an https endpoint (`AWS_CA_BUNDLE`); the
    /// system's when nil.
    public var caBundle: String?
    /// Bytes per part of multipart uploads (nil: 8 MiB; S3 takes no less than 5 MiB).
    public var partSize: Int?

    public init(
        endpoint: String, region: String, bucket: String, prefix: String, pathStyle: Bool, credentials: ObjectStoreCredentials,
        caBundle: String? = nil, partSize: Int? = nil
    ) {
        self.partSize = partSize
        self.endpoint = endpoint.hasSuffix("/") ? String(endpoint.dropLast()) : endpoint
        self.region = region
        self.bucket = bucket
        self.prefix = prefix.split(separator: "/").joined(separator: "/")
        self.pathStyle = pathStyle
        self.credentials = credentials
        self.caBundle = caBundle
    }

    /// `s3://BUCKET/PREFIX`: where captures are, as operators name it.
    public var url: String { prefix.isEmpty ? "s3://\(bucket)" : "s3://\(bucket)/\(prefix)" }

    public var description: String { "\(url) at \(endpoint)" }

    /// The key of `name` under the prefix.
    public func key(_ name: String) -> String { prefix.isEmpty ? name : "\(prefix)/\(name)" }

    /// The same store, with keys under `name` below this prefix.
    public func below(_ name: String) -> ObjectStoreLocation {
        var location = self
        location.prefix = key(name)
        return location
    }

    /// Whether `s` names an object store (`s3://…`) rather than a folder.
    public static func isObjectStoreURL(_ s: String) -> Bool { s.hasPrefix("s3://") }

    /// `s3://BUCKET/PREFIX` with what the environment says (`AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`,
    /// `AWS_REGION` or `AWS_DEFAULT_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_SESSION_TOKEN`, `AWS_CA_BUNDLE`), each overridden by `settings` (a rig file's `store:`).
    ///
    /// Without an endpoint the store is AWS's own, `https://s3.REGION.amazonaws.com`, addressed
    /// virtual-host style; with one, path style (self-hosted stores), unless `path_style` says otherwise.
    public static func parse(
        _ url: String, settings: Settings = Settings(), environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws -> ObjectStoreLocation {
        guard url.hasPrefix("s3://") else { throw ObjectStoreError.configuration("\(url.debugDescription) is not an s3://BUCKET/PREFIX address") }
        let rest = url.dropFirst("s3://".count)
        let bucket = String(rest.prefix { $0 != "/" })
        let prefix = String(rest.dropFirst(bucket.count))
        guard !bucket.isEmpty, bucket.allSatisfy({ $0.isLowercase || $0.isNumber || $0 == "-" || $0 == "." }) else {
            throw ObjectStoreError.configuration(
                "\(url.debugDescription) names no valid bucket: s3://BUCKET/PREFIX, BUCKET of lower-case letters, digits, '-' and '.'")
        }
        func value(_ setting: String?, _ names: String...) -> String? {
            if let setting, !setting.isEmpty { return setting }
            return names.lazy.compactMap { environment[$0] }.first { !$0.isEmpty }
        }
        let region = value(settings.region, "AWS_REGION", "AWS_DEFAULT_REGION") ?? "us-east-1"
        let endpoint = value(settings.endpoint, "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
        guard let accessKey = value(settings.accessKeyID, "AWS_ACCESS_KEY_ID"),
            let secret = value(settings.secretAccessKey, "AWS_SECRET_ACCESS_KEY")
        else {
            throw ObjectStoreError.configuration(
                "no credentials for \(url): set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or access_key_id and secret_access_key under the rig file's store:)")
        }
        if let endpoint {
            guard let parsed = URL(string: endpoint), let scheme = parsed.scheme, scheme == "http" || scheme == "https", parsed.host != nil,
                parsed.path.isEmpty || parsed.path == "/"
            else {
                throw ObjectStoreError.configuration("the endpoint \(endpoint.debugDescription) is not http(s)://HOST[:PORT]")
            }
        }
        return ObjectStoreLocation(
            endpoint: endpoint ?? "https://s3.\(region).amazonaws.com", region: region, bucket: bucket, prefix: prefix,
            pathStyle: settings.pathStyle ?? (endpoint != nil),
            credentials: ObjectStoreCredentials(
                accessKeyID: accessKey, secretAccessKey: secret, sessionToken: value(settings.sessionToken, "AWS_SESSION_TOKEN")),
            caBundle: value(settings.caBundle, "AWS_CA_BUNDLE"), partSize: settings.partSizeMiB.map { max(5, $0) << 20 })
    }

    /// What a rig file may say about its store (`store:`); each setting overrides the environment's.
    public struct Settings: Sendable, Hashable, Decodable {
        public var url: String?
        public var endpoint: String?
        public var region: String?
        public var pathStyle: Bool?
        public var accessKeyID: String?
        public var secretAccessKey: String?
        public var sessionToken: String?
        public var caBundle: String?
        /// MiB per part of multipart uploads (at least 5).
        public var partSizeMiB: Int?
        /// What the agents put results with, when not these credentials.
        public var agentAccessKeyID: String?
        public var agentSecretAccessKey: String?

        public init(
            url: String? = nil, endpoint: String? = nil, region: String? = nil, pathStyle: Bool? = nil, accessKeyID: String? = nil,
            secretAccessKey: String? = nil, sessionToken: String? = nil, caBundle: String? = nil, partSizeMiB: Int? = nil,
            agentAccessKeyID: String? = nil, agentSecretAccessKey: String? = nil
        ) {
            self.partSizeMiB = partSizeMiB
            self.agentAccessKeyID = agentAccessKeyID
            self.agentSecretAccessKey = agentSecretAccessKey
            self.url = url
            self.endpoint = endpoint
            self.region = region
            self.pathStyle = pathStyle
            self.accessKeyID = accessKeyID
            self.secretAccessKey = secretAccessKey
            self.sessionToken = sessionToken
            self.caBundle = caBundle
        }

        enum CodingKeys: String, CodingKey {
            case url, endpoint, region
            case pathStyle = "path_style"
            case accessKeyID = "access_key_id"
            case secretAccessKey = "secret_access_key"
            case sessionToken = "session_token"
            case caBundle = "ca_bundle"
            case partSizeMiB = "part_size_mib"
            case agentAccessKeyID = "agent_access_key_id"
            case agentSecretAccessKey = "agent_secret_access_key"
        }

        /// The agents' own credentials: `agent_access_key_id` and `agent_secret_access_key`, else
        /// `CAMRIG_AGENT_AWS_ACCESS_KEY_ID` and `CAMRIG_AGENT_AWS_SECRET_ACCESS_KEY`; nil when neither says
        /// (the agents then use the coordinator's).
        public func agentCredentials(environment: [String: String] = ProcessInfo.processInfo.environment) -> ObjectStoreCredentials? {
            guard let key = agentAccessKeyID ?? environment["CAMRIG_AGENT_AWS_ACCESS_KEY_ID"], !key.isEmpty,
                let secret = agentSecretAccessKey ?? environment["CAMRIG_AGENT_AWS_SECRET_ACCESS_KEY"], !secret.isEmpty
            else { return nil }
            return ObjectStoreCredentials(accessKeyID: key, secretAccessKey: secret)
        }
    }
}

/// An object as the store holds it, checked: its size, the SHA-256 of its bytes (hex), and the store's
/// entity tag.
public struct StoredObject: Sendable, Hashable, Codable {
    public var key: String
    public var size: UInt64
    public var sha256: String
    public var etag: String

    public init(key: String, size: UInt64, sha256: String, etag: String) {
        self.key = key
        self.size = size
        self.sha256 = sha256
        self.etag = etag
    }
}

/// What went wrong with a store, saying which store, which object and what to do. Never holds a secret.
public struct ObjectStoreError: Error, Sendable, CustomStringConvertible {
    public enum Kind: Sendable, Hashable {
        /// The configuration cannot work (a malformed address, no credentials).
        case configuration
        /// The store refused the credentials or the access (HTTP 403).
        case accessDenied
        /// The store did not answer (refused connection, timeout, TLS failure).
        case unreachable
        /// The object or upload is not there (HTTP 404).
        case notFound
        /// The store's copy differs from what was sent (size, checksum).
        case mismatch
        /// Any other refusal.
        case refused
    }

    public var kind: Kind
    /// The store's own error code (`SignatureDoesNotMatch`, `NoSuchUpload`, …), when it gave one.
    public var code: String?
    public var description: String

    public init(_ kind: Kind, code: String? = nil, _ description: String) {
        self.kind = kind
        self.code = code
        self.description = description
    }

    public static func configuration(_ description: String) -> ObjectStoreError { ObjectStoreError(.configuration, description) }
}

/// An access key and its secret (and a session token with temporary credentials). Its description names
/// the key only: the secret never reaches a log.
public struct ObjectStoreCredentials: Sendable, Hashable, CustomStringConvertible {
    public var accessKeyID: String
    public var secretAccessKey: String
    public var sessionToken: String?

    public init(accessKeyID: String, secretAccessKey: String, sessionToken: String? = nil) {
        self.accessKeyID = accessKeyID
        self.secretAccessKey = secretAccessKey
        self.sessionToken = sessionToken?.isEmpty == true ? nil : sessionToken
    }

    public var description: String { "access key \(accessKeyID)" }
}
