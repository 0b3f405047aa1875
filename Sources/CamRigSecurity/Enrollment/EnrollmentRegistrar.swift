import CamRigFiles
import Crypto
import Foundation
import NIOConcurrencyHelpers
import SwiftASN1
import X509

/// The service's side of enrollment: checks join tokens and renewal requests, signs the agents'
/// certificates with the rig's CA, and keeps the ledger (`enrollment/ledger.json` in the CA's TLS
/// directory): how often each token was used, every enrolment (pending, joined or refused, with the
/// reason) and the rig's enrolled members, which the service connects to.
///
/// The ledger is written durably before an answer leaves, so a token's last use is never given twice,
/// even across a crash. Refusals name their reason; the secret is never logged or kept.
public final class EnrollmentRegistrar: Sendable {
    /// An enrolled agent: its certificate's name and where the coordinator reaches it.
    public struct Member: Codable, Sendable, Hashable {
        public var name: String
        public var endpoint: String
        public var address: String
        /// The serial number (hex) of the certificate the last renewal replaced: it may renew again, for
        /// the answer to that renewal may never have reached the agent.
        public var replaced: String?

        public init(name: String, endpoint: String, address: String, replaced: String? = nil) {
            self.name = name
            self.endpoint = endpoint
            self.address = address
            self.replaced = replaced
        }
    }

    /// Why a request was refused, for the requester and the service's log.
    public struct Refusal: Error, Sendable, CustomStringConvertible {
        public enum Kind: Sendable { case badRequest, forbidden, conflict }
        public var kind: Kind
        public var reason: String
        public var description: String { reason }
    }

    struct Ledger: Codable {
        var uses: [String: Int] = [:]
        var records: [Enrollment.Record] = []
        var members: [Member] = []
    }

    public let directory: TLSDirectory
    /// How long an issued certificate is valid.
    public let validity: TimeInterval
    private let authority: CertificateAuthority
    private let tokens: JoinTokenList
    private let ledger: NIOLockedValueBox<Ledger>
    private let now: @Sendable () -> Date
    /// Records kept in the ledger (the oldest go first).
    static let recordLimit = 1000

    public init(directory: TLSDirectory, validity: TimeInterval = 90 * 86_400, now: @escaping @Sendable () -> Date = { Date() }) throws {
        self.directory = directory
        self.validity = validity
        self.now = now
        authority = try directory.loadAuthority()
        tokens = JoinTokenList(directory: directory)
        var loaded = Ledger()
        if let data = try? Data(contentsOf: Self.file(in: directory)) {
            do {
                loaded = try JoinTokenList.decoder.decode(Ledger.self, from: data)
            } catch {
                throw SecurityError("\(Self.file(in: directory).path) is not an enrollment ledger: \(error)")
            }
        }
        ledger = NIOLockedValueBox(loaded)
    }

    static func file(in directory: TLSDirectory) -> URL {
        JoinTokenList(directory: directory).folder.appendingPathComponent("ledger.json")
    }

    public var members: [Member] { ledger.withLockedValue { $0.members } }

    /// How often each token was used, as the service's ledger in `directory` says (for `--list`).
    public static func uses(in directory: TLSDirectory) -> [String: Int] {
        guard let data = try? Data(contentsOf: file(in: directory)), let ledger = try? JoinTokenList.decoder.decode(Ledger.self, from: data) else { return [:] }
        return ledger.uses
    }
    /// Newest first.
    public var records: [Enrollment.Record] { ledger.withLockedValue { $0.records.reversed() } }

    /// The CA's certificate, PEM: what GET /enroll/v1/ca answers.
    public var caPEM: String { (try? authority.certificate.serializeAsPEM().pemString) ?? "" }

    /// The rig's revocation list, PEM, when there is one.
    public func revocationListPEM() -> String? {
        try? String(contentsOfFile: directory.revocationListPath, encoding: .utf8)
    }

    // MARK: Joining

    /// A host asks to join with a token: on success its certificate, and the member to connect to.
    public func join(_ request: Enrollment.JoinRequest, from address: String) -> Result<(Enrollment.Issued, Member), Refusal> {
        let time = now()
        return ledger.withLockedValue { ledger in
            var tokenID = "unknown"
            var draft = ledger
            let outcome = Self.attempt { () throws -> (Enrollment.Issued, Member) in
                let token: JoinToken
                do { token = try JoinToken(text: request.token) } catch { throw Refusal(kind: .forbidden, reason: "\(error)") }
                tokenID = token.id
                guard token.caPin == JoinToken.pin(of: authority.certificate) else {
                    throw Refusal(kind: .forbidden, reason: "token \(token) was made for another rig's CA (its pin does not match this CA)")
                }
                let records: [JoinTokenList.Record]
                do { records = try tokens.records() } catch { throw Refusal(kind: .forbidden, reason: "the rig's token list cannot be read: \(error)") }
                guard let record = records.first(where: { $0.id == token.id }) else {
                    throw Refusal(kind: .forbidden, reason: "token \(token) is not one of this rig's tokens")
                }
                guard record.secretSHA256 == token.secretHash else {
                    throw Refusal(kind: .forbidden, reason: "token \(token) has a wrong secret (tampered with, or mistyped)")
                }
                if let revoked = record.revoked {
                    throw Refusal(kind: .forbidden, reason: "token \(token) was revoked at \(PeerCertificateVerifier.format(revoked))")
                }
                guard record.expires > time else {
                    throw Refusal(kind: .forbidden, reason: "token \(token) expired at \(PeerCertificateVerifier.format(record.expires)): make a new one with `camrig certs join-token`")
                }
                let used = draft.uses[token.id, default: 0]
                guard used < record.uses else {
                    throw Refusal(kind: .forbidden, reason: "token \(token) is used up (\(used) of \(record.uses) uses)")
                }
                let name = Self.name(asked: request.name, token: record)
                do { try TLSDirectory.validateName(name) } catch { throw Refusal(kind: .badRequest, reason: "\(error)") }
                let endpoint = try Self.endpoint(host: request.host ?? address, port: request.port)
                // A name the CA issued otherwise (`camrig certs issue`: a coordinator, a viewer, an agent set
                // up by hand) is never taken over by a token's holder.
                if FileManager.default.fileExists(atPath: directory.certificateFile(for: name)), !draft.members.contains(where: { $0.name == name }) {
                    throw Refusal(
                        kind: .conflict,
                        reason: "'\(name)' already has a certificate in this rig (`camrig certs list`): give the host another name (camrig-agent --identity NAME)")
                }
                // A member whose certificate was revoked (its file moved out) no longer holds the name.
                if let other = draft.members.first(where: { $0.name == name }), other.address != address,
                    FileManager.default.fileExists(atPath: directory.certificateFile(for: name))
                {
                    throw Refusal(
                        kind: .conflict,
                        reason: "'\(name)' is already enrolled from \(other.address): give this host another name (camrig-agent --identity NAME), or revoke '\(name)' first")
                }
                let csr = try Self.request(request.csr)
                let issued = try issue(csr: csr, name: name, address: address, time: time)
                draft.uses[token.id] = used + 1
                return (issued, Member(name: name, endpoint: endpoint, address: address))
            }
            return settle(outcome, draft: draft, in: &ledger, time: time, name: String(request.name.prefix(64)), address: address, token: tokenID, issued: .pending, what: "enrolment")
        }
    }

    /// The certificate name for a host that asked for `asked`.
    static func name(asked: String, token: JoinTokenList.Record) -> String {
        if let fixed = token.name { return fixed }
        if let prefix = token.prefix { return asked.hasPrefix(prefix) ? asked : prefix + asked }
        return asked
    }

    static func endpoint(host: String, port: Int) throws -> String {
        guard (1...65535).contains(port) else { throw Refusal(kind: .badRequest, reason: "port \(port) is not a TCP port") }
        guard !host.isEmpty, host.count <= 253, !host.contains(where: { $0 == "/" || $0 == " " || $0 == "@" }) else {
            throw Refusal(kind: .badRequest, reason: "'\(host.prefix(64))' is not a host name or address")
        }
        return host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }

    /// Where the coordinator reaches a member after it renewed from `address`, serving on `port`: the host
    /// follows the address the request came from, unless the agent named another host when it joined
    /// (`--enroll-host`, kept); the port is always the one the agent serves on now.
    static func renewedEndpoint(of member: Member?, address: String, port: Int) throws -> String {
        guard let member, let separator = member.endpoint.lastIndex(of: ":") else { return try endpoint(host: address, port: port) }
        let host = member.endpoint[..<separator].trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        let followsAddress = host == member.address.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        return try endpoint(host: followsAddress ? address : host, port: port)
    }

    static func request(_ pem: String) throws -> CertificateSigningRequest {
        let csr: CertificateSigningRequest
        do {
            csr = try CertificateSigningRequest(pemEncoded: pem)
        } catch {
            throw Refusal(kind: .badRequest, reason: "the certificate request is not a PEM PKCS #10 request: \(error)")
        }
        guard csr.publicKey.isValidSignature(csr.signature, for: csr) else {
            throw Refusal(kind: .badRequest, reason: "the certificate request's signature does not verify: it was not made with the key it carries")
        }
        guard P256.Signing.PublicKey(csr.publicKey) != nil else {
            throw Refusal(kind: .badRequest, reason: "the certificate request's key is not ECDSA P-256, which CamRig's certificates use")
        }
        return csr
    }

    private func issue(csr: CertificateSigningRequest, name: String, address: String, time: Date) throws -> Enrollment.Issued {
        let notAfter = time.addingTimeInterval(validity)
        let certificate: Certificate
        let pem: String
        do {
            certificate = try authority.certificate(
                for: csr.publicKey, name: name, role: .agent, hostnames: IPAddressBytes(address) != nil ? [address] : [],
                notValidBefore: time.addingTimeInterval(-300), notValidAfter: notAfter)
            pem = try certificate.serializeAsPEM().pemString
        } catch {
            throw Refusal(kind: .conflict, reason: "the CA could not sign the certificate: \(error)")
        }
        // Kept beside the CA (the certificate only: the key never left its host), so that
        // `camrig certs list` shows it and `camrig certs revoke --name` revokes it.
        do {
            try directory.write(pem: pem, to: directory.certificateFile(for: name), secret: false)
        } catch {
            throw Refusal(kind: .conflict, reason: "the service cannot keep the certificate: \(error)")
        }
        let life = certificate.notValidAfter.timeIntervalSince(time)
        return Enrollment.Issued(
            name: name, certificate: pem, ca: caPEM, crl: revocationListPEM(), notValidAfter: certificate.notValidAfter,
            renewAfter: time.addingTimeInterval(life * 2 / 3))
    }

    // MARK: Renewing

    /// An enrolled agent asks for a new certificate for a new key, proving it holds the current one.
    public func renew(_ request: Enrollment.RenewRequest, from address: String) -> Result<(Enrollment.Issued, Member), Refusal> {
        let time = now()
        return ledger.withLockedValue { ledger in
            var name = "unknown"
            let outcome = Self.attempt { () throws -> (Enrollment.Issued, Member) in
                let current: Certificate
                do { current = try Certificate(pemEncoded: request.certificate) } catch {
                    throw Refusal(kind: .badRequest, reason: "the current certificate is not PEM: \(error)")
                }
                guard authority.signed(current) else { throw Refusal(kind: .forbidden, reason: "the certificate was not issued by this rig's CA") }
                let identity: PeerIdentity
                do { identity = try PeerIdentity(certificate: current) } catch { throw Refusal(kind: .forbidden, reason: "\(error)") }
                name = identity.name
                guard identity.role == .agent else { throw Refusal(kind: .forbidden, reason: "only agents renew here; '\(name)' is a \(identity.role.rawValue)") }
                guard current.notValidAfter > time else {
                    throw Refusal(kind: .forbidden, reason: "'\(name)''s certificate expired at \(PeerCertificateVerifier.format(current.notValidAfter)): enroll again with a new token")
                }
                let list: RevocationList?
                do { list = try directory.revocationList(verifiedBy: authority.certificate) } catch {
                    throw Refusal(kind: .conflict, reason: "the rig's revocation list cannot be read, so no certificate is renewed: \(error)")
                }
                if list?.entry(for: current.serialNumber) != nil { throw Refusal(kind: .forbidden, reason: "'\(name)''s certificate was revoked") }
                // Only the certificate last issued to the name renews, or the one its last renewal replaced
                // (the agent may never have had the answer: the connection dropped, the host lost power);
                // an older one, or one whose name was revoked (its file moved away), does not.
                let member = ledger.members.first { $0.name == name }
                guard let pem = try? String(contentsOfFile: directory.certificateFile(for: name), encoding: .utf8),
                    let kept = try? Certificate(pemEncoded: pem),
                    kept.serialNumber == current.serialNumber || (member?.replaced != nil && member?.replaced == current.serialNumber.description)
                else {
                    throw Refusal(
                        kind: .forbidden,
                        reason: "'\(name)''s certificate is not the one this rig last issued to that name (replaced by a renewal, or revoked): enroll again with a new token")
                }
                let csr = try Self.request(request.csr)
                guard let proof = Data(base64Encoded: request.proof),
                    current.publicKey.isValidSignature(proof, for: try Self.der(csr), signatureAlgorithm: .ecdsaWithSHA256)
                else {
                    throw Refusal(kind: .forbidden, reason: "the proof does not verify with '\(name)''s certificate: the sender does not hold its key")
                }
                // Everything checked before the certificate is issued (which replaces the CA's copy).
                let endpoint = try Self.renewedEndpoint(of: member, address: address, port: request.port)
                let issued = try issue(csr: csr, name: name, address: address, time: time)
                return (issued, Member(name: name, endpoint: endpoint, address: address, replaced: current.serialNumber.description))
            }.mapError { refusal in
                // Whatever is wrong with a renewal's certificate, request or proof, the credential failed.
                Refusal(kind: refusal.kind == .badRequest ? .forbidden : refusal.kind, reason: refusal.reason)
            }
            return settle(outcome, draft: ledger, in: &ledger, time: time, name: name, address: address, token: "renewal", issued: .joined, what: "renewal")
        }
    }

    // MARK: The ledger

    /// Records `outcome`. An issued certificate: its member and record added to `draft` (the ledger with
    /// the token's use counted), written durably, and only then made the ledger: nothing is given out that
    /// the ledger on disk does not hold. A refusal of `name`: kept in memory only (listed at once, written
    /// with the next enrolment), so that a flood of refused requests costs no disk writes.
    private func settle(
        _ outcome: Result<(Enrollment.Issued, Member), Refusal>, draft: Ledger, in ledger: inout Ledger, time: Date, name: String, address: String,
        token: String, issued state: Enrollment.Record.State, what: String
    ) -> Result<(Enrollment.Issued, Member), Refusal> {
        switch outcome {
        case .success(let (issued, member)):
            var draft = draft
            draft.members.removeAll { $0.name == member.name }
            draft.members.append(member)
            Self.append(
                Enrollment.Record(
                    time: time, state: state, name: member.name, address: address, endpoint: member.endpoint, token: token, reason: nil,
                    notValidAfter: issued.notValidAfter), to: &draft)
            if let error = save(draft) {
                return .failure(Refusal(kind: .conflict, reason: "the service cannot record the \(what): \(error)"))
            }
            ledger = draft
        case .failure(let refusal):
            Self.append(
                Enrollment.Record(
                    time: time, state: .refused, name: name, address: address, endpoint: nil, token: token, reason: refusal.reason, notValidAfter: nil),
                to: &ledger)
        }
        return outcome
    }

    /// The coordinator is connected to agents at these endpoints (HOST:PORT): their pending enrolments
    /// have joined.
    public func connected(_ endpoints: Set<String>) {
        ledger.withLockedValue { ledger in
            var changed = false
            for index in ledger.records.indices
            where ledger.records[index].state == .pending && ledger.records[index].endpoint.map(endpoints.contains) == true {
                ledger.records[index].state = .joined
                changed = true
            }
            if changed { _ = save(ledger) }
        }
    }

    /// The DER bytes of a certificate request: what a renewal's proof signs.
    public static func der(_ csr: CertificateSigningRequest) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.serialize(csr)
        return serializer.serializedBytes
    }

    /// `body`'s result, or its error as a refusal.
    static func attempt<T>(_ body: () throws -> T) -> Result<T, Refusal> {
        do {
            return .success(try body())
        } catch let refusal as Refusal {
            return .failure(refusal)
        } catch {
            return .failure(Refusal(kind: .badRequest, reason: "\(error)"))
        }
    }

    private static func append(_ record: Enrollment.Record, to ledger: inout Ledger) {
        ledger.records.append(record)
        if ledger.records.count > recordLimit { ledger.records.removeFirst(ledger.records.count - recordLimit) }
    }

    /// Writes the ledger durably; the error, if it could not be.
    private func save(_ ledger: Ledger) -> (any Error)? {
        do {
            let file = Self.file(in: directory)
            try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
            try DurableFile.write(Array(try JoinTokenList.encoder.encode(ledger)), to: file, permissions: 0o600)
            return nil
        } catch {
            return error
        }
    }
}
