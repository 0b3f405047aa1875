import CamRigFiles
import Foundation
import X509

/// The rig's join tokens, as `camrig certs join-token` made them: `enrollment/tokens.json` in the CA's TLS
/// directory. Only the command line writes it (making and revoking tokens); the service reads it on every
/// request and keeps how often each token was used in its own ledger (`EnrollmentRegistrar`).
public struct JoinTokenList: Sendable {
    /// One token as the rig keeps it: never the secret, only its hash.
    public struct Record: Codable, Sendable, Hashable {
        public var id: String
        public var secretSHA256: String
        public var role: PeerRole
        /// The certificate name every agent enrolling with this token gets (with `uses` 1).
        public var name: String?
        /// Or the prefix of the names: an agent named `HOST` becomes `PREFIX` + `HOST`.
        public var prefix: String?
        public var created: Date
        public var expires: Date
        public var uses: Int
        public var revoked: Date?

        enum CodingKeys: String, CodingKey {
            case id, role, name, prefix, created, expires, uses, revoked
            case secretSHA256 = "secret_sha256"
        }
    }

    public let directory: TLSDirectory

    public init(directory: TLSDirectory) {
        self.directory = directory
    }

    public var folder: URL { URL(fileURLWithPath: directory.path).appendingPathComponent("enrollment") }
    var file: URL { folder.appendingPathComponent("tokens.json") }

    /// Every token made in this directory.
    public func records() throws -> [Record] {
        guard let data = try? Data(contentsOf: file) else { return [] }
        do {
            return try Self.decoder.decode([Record].self, from: data)
        } catch {
            throw SecurityError("\(file.path) is not a token list: \(error)")
        }
    }

    /// Makes a token for this directory's CA.
    public func make(role: PeerRole, name: String?, prefix: String?, expires: Date, uses: Int, now: Date = Date()) throws -> (JoinToken, Record) {
        guard role == .agent else { throw SecurityError("join tokens enroll agents; \(role.rawValue) certificates are issued with `camrig certs issue`") }
        if let name { try TLSDirectory.validateName(name) }
        if let prefix { try TLSDirectory.validateName(prefix + "host") }
        guard uses >= 1 else { throw SecurityError("a token must allow at least one use") }
        guard name == nil || uses == 1 else { throw SecurityError("a token with --name enrolls one host: give --uses 1, or --prefix for several") }
        let token = JoinToken.generate(for: try directory.trustRoot())
        let record = Record(
            id: token.id, secretSHA256: token.secretHash, role: role, name: name, prefix: prefix, created: now, expires: expires, uses: uses)
        try update { $0.append(record) }
        return (token, record)
    }

    /// Ends a token early; agents that already enrolled with it stay enrolled.
    @discardableResult
    public func revoke(id: String, now: Date = Date()) throws -> Record {
        var revoked: Record?
        try update { records in
            guard let index = records.firstIndex(where: { $0.id == id || JoinToken.prefix + $0.id == id }) else { return }
            if records[index].revoked == nil { records[index].revoked = now }
            revoked = records[index]
        }
        guard let revoked else { throw SecurityError("no join token '\(id)' in \(file.path): `camrig certs join-token --list` lists them") }
        return revoked
    }

    /// Changes the list under an exclusive lock (two commands at once never lose a token), written
    /// durably and owned like its directory (the service, running as its own user, reads it).
    private func update(_ change: (inout [Record]) throws -> Void) throws {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let lock = open(folder.appendingPathComponent(".tokens.lock").path, O_CREAT | O_RDWR | O_CLOEXEC, 0o600)
        guard lock >= 0 else { throw SecurityError("cannot lock \(folder.path): \(String(cString: strerror(errno)))") }
        defer { close(lock) }
        guard flock(lock, LOCK_EX) == 0 else { throw SecurityError("cannot lock \(folder.path): \(String(cString: strerror(errno)))") }
        var records = try records()
        try change(&records)
        try DurableFile.write(Array(try Self.encoder.encode(records)), to: file, permissions: 0o600)
        Self.ownLikeParent(folder.path, [folder.path, file.path, folder.appendingPathComponent(".tokens.lock").path])
    }

    /// Run as root on a directory another user owns (the service's): the files go to that user.
    static func ownLikeParent(_ parent: String, _ paths: [String]) {
        guard getuid() == 0 else { return }
        var owner = stat()
        guard stat((parent as NSString).deletingLastPathComponent, &owner) == 0, owner.st_uid != 0 else { return }
        for path in paths { _ = chown(path, owner.st_uid, owner.st_gid) }
    }

    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }()

    static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }()
}
