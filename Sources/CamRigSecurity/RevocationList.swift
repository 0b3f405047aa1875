import Crypto
import Foundation
import SwiftASN1
import X509

/// The certificates the rig's CA has revoked: an RFC 5280 certificate revocation list (CRL, version 2)
/// signed by the CA, kept as `crl.pem` in the TLS directory.
///
/// The file is a standard CRL (`openssl crl -in crl.pem -CAfile ca.pem -noout -text` reads and
/// verifies it). A peer refuses a certificate whose serial number is listed, once the list's signature
/// verifies against the rig's CA; a list that does not verify is an error, never silently ignored.
public struct RevocationList: Sendable, Hashable {
    /// The file name in a TLS directory.
    public static let fileName = "crl.pem"

    /// Why a certificate was revoked (RFC 5280 `CRLReason`; the codes CamRig offers).
    public enum Reason: Int, Sendable, Hashable, CaseIterable, CustomStringConvertible {
        case unspecified = 0
        case keyCompromise = 1
        case affiliationChanged = 3
        case superseded = 4
        case cessationOfOperation = 5

        /// The name used on the command line and in messages.
        public var description: String {
            switch self {
            case .unspecified: "unspecified"
            case .keyCompromise: "key-compromise"
            case .affiliationChanged: "affiliation-changed"
            case .superseded: "superseded"
            case .cessationOfOperation: "cessation-of-operation"
            }
        }

        public init?(name: String) {
            guard let found = Self.allCases.first(where: { $0.description == name }) else { return nil }
            self = found
        }
    }

    /// One revoked certificate.
    public struct Entry: Sendable, Hashable {
        public var serialNumber: Certificate.SerialNumber
        /// When it was revoked (whole seconds).
        public var revokedAt: Date
        public var reason: Reason?

        public init(serialNumber: Certificate.SerialNumber, revokedAt: Date, reason: Reason? = nil) {
            self.serialNumber = serialNumber
            self.revokedAt = Date(timeIntervalSince1970: revokedAt.timeIntervalSince1970.rounded(.down))
            self.reason = reason
        }
    }

    /// The CA that issued the list.
    public var issuer: DistinguishedName
    /// Increases with every list the CA issues (the CRL number extension).
    public var number: Int
    /// When this list was issued (whole seconds).
    public var thisUpdate: Date
    /// When the next list is due at the latest.
    public var nextUpdate: Date
    public var entries: [Entry]

    public init(issuer: DistinguishedName, number: Int, thisUpdate: Date, nextUpdate: Date, entries: [Entry]) {
        self.issuer = issuer
        self.number = number
        self.thisUpdate = thisUpdate
        self.nextUpdate = nextUpdate
        self.entries = entries
    }

    /// The entry for `serialNumber`, if that certificate is revoked.
    public func entry(for serialNumber: Certificate.SerialNumber) -> Entry? {
        entries.first { $0.serialNumber == serialNumber }
    }

    // MARK: Issuing

    /// A new list from `authority`: the entries of `previous` (if any) plus `adding`, numbered one higher.
    public static func issue(
        by authority: CertificateAuthority,
        previous: RevocationList?,
        adding: [Entry],
        now: Date = Date(),
        validFor days: Int = 3650
    ) throws -> (list: RevocationList, pem: String) {
        var entries = previous?.entries ?? []
        for entry in adding where !entries.contains(where: { $0.serialNumber == entry.serialNumber }) {
            entries.append(entry)
        }
        let thisUpdate = Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down))
        let list = RevocationList(
            issuer: authority.certificate.subject,
            number: (previous?.number ?? 0) + 1,
            thisUpdate: thisUpdate,
            nextUpdate: thisUpdate.addingTimeInterval(Double(days) * 86_400),
            entries: entries
        )
        let tbs = try list.serializedTBS()
        let signature = try authority.privateKey.signature(for: tbs)
        var serializer = DER.Serializer()
        try serializer.appendConstructedNode(identifier: .sequence) { coder in
            coder.serializeRawBytes(tbs)
            try Self.serializeAlgorithm(into: &coder)
            try coder.serialize(ASN1BitString(bytes: ArraySlice(signature.derRepresentation)))
        }
        let pem = PEMDocument(type: "X509 CRL", derBytes: serializer.serializedBytes).pemString
        return (list, pem)
    }

    private func serializedTBS() throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.appendConstructedNode(identifier: .sequence) { coder in
            try coder.serialize(1)  // v2
            try Self.serializeAlgorithm(into: &coder)
            try coder.serialize(issuer)
            try Self.serialize(time: thisUpdate, into: &coder)
            try Self.serialize(time: nextUpdate, into: &coder)
            if !entries.isEmpty {
                try coder.appendConstructedNode(identifier: .sequence) { coder in
                    for entry in entries {
                        try coder.appendConstructedNode(identifier: .sequence) { coder in
                            try coder.serialize(entry.serialNumber.bytes)
                            try Self.serialize(time: entry.revokedAt, into: &coder)
                            if let reason = entry.reason {
                                try coder.appendConstructedNode(identifier: .sequence) { coder in
                                    try Self.serializeExtension(Self.reasonCodeOID, into: &coder) { coder in
                                        coder.appendPrimitiveNode(identifier: .enumerated) { $0.append(UInt8(reason.rawValue)) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            try coder.serialize(explicitlyTaggedWithTagNumber: 0, tagClass: .contextSpecific) { coder in
                try coder.appendConstructedNode(identifier: .sequence) { coder in
                    try Self.serializeExtension(Self.crlNumberOID, into: &coder) { coder in
                        try coder.serialize(number)
                    }
                }
            }
        }
        return serializer.serializedBytes
    }

    static let ecdsaWithSHA256: ASN1ObjectIdentifier = [1, 2, 840, 10045, 4, 3, 2]
    static let crlNumberOID: ASN1ObjectIdentifier = [2, 5, 29, 20]
    static let reasonCodeOID: ASN1ObjectIdentifier = [2, 5, 29, 21]

    private static func serializeAlgorithm(into coder: inout DER.Serializer) throws {
        try coder.appendConstructedNode(identifier: .sequence) { coder in
            try coder.serialize(ecdsaWithSHA256)
        }
    }

    private static func serializeExtension(
        _ oid: ASN1ObjectIdentifier,
        into coder: inout DER.Serializer,
        value: (inout DER.Serializer) throws -> Void
    ) throws {
        var inner = DER.Serializer()
        try value(&inner)
        try coder.appendConstructedNode(identifier: .sequence) { coder in
            try coder.serialize(oid)
            try coder.serialize(ASN1OctetString(contentBytes: ArraySlice(inner.serializedBytes)))
        }
    }

    /// RFC 5280 §5.1.2.4: UTCTime through 2049, GeneralizedTime from 2050.
    private static func serialize(time: Date, into coder: inout DER.Serializer) throws {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let c = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: time)
        if c.year! < 2050 {
            try coder.serialize(
                UTCTime(year: c.year!, month: c.month!, day: c.day!, hours: c.hour!, minutes: c.minute!, seconds: c.second!)
            )
        } else {
            try coder.serialize(
                GeneralizedTime(
                    year: c.year!, month: c.month!, day: c.day!, hours: c.hour!, minutes: c.minute!, seconds: c.second!,
                    fractionalSeconds: 0
                )
            )
        }
    }

    // MARK: Reading

    /// Reads a list and checks that `authority` signed it.
    ///
    /// - Throws: `SecurityError` naming `source` when the text is not a CRL, or the CA did not sign it.
    public init(pem: String, verifiedBy authority: Certificate, source: String) throws {
        let der: [UInt8]
        do {
            let document = try PEMDocument(pemString: pem)
            guard document.discriminator == "X509 CRL" else {
                throw SecurityError("\(source) holds a '\(document.discriminator)', not an 'X509 CRL'")
            }
            der = document.derBytes
        } catch let error as SecurityError {
            throw error
        } catch {
            throw SecurityError("\(source) is not a PEM certificate revocation list: \(error)")
        }
        let parsed: (list: RevocationList, tbs: ArraySlice<UInt8>, signature: ArraySlice<UInt8>)
        do {
            parsed = try Self.parse(der)
        } catch {
            throw SecurityError("\(source) is not a valid certificate revocation list: \(error)")
        }
        guard parsed.list.issuer == authority.subject else {
            throw SecurityError(
                "\(source) was issued by '\(parsed.list.issuer)', not by this rig's CA '\(authority.subject)': copy the rig's own crl.pem"
            )
        }
        guard let key = P256.Signing.PublicKey(authority.publicKey),
            let signature = try? P256.Signing.ECDSASignature(derRepresentation: parsed.signature),
            key.isValidSignature(signature, for: parsed.tbs)
        else {
            throw SecurityError(
                "\(source) names this rig's CA '\(authority.subject)' but its signature does not verify: it was altered or made by another CA; copy the rig's own crl.pem"
            )
        }
        self = parsed.list
    }

    private static func parse(_ der: [UInt8]) throws -> (list: RevocationList, tbs: ArraySlice<UInt8>, signature: ArraySlice<UInt8>) {
        let root = try DER.parse(der)
        return try DER.sequence(root, identifier: .sequence) { nodes in
            guard let tbsNode = nodes.next() else { throw SecurityError("no tbsCertList") }
            guard let algorithmNode = nodes.next() else { throw SecurityError("no signature algorithm") }
            try DER.sequence(algorithmNode, identifier: .sequence) { algorithm in
                let oid = try ASN1ObjectIdentifier(derEncoded: &algorithm)
                guard oid == ecdsaWithSHA256 else { throw SecurityError("signed with \(oid), not ECDSA with SHA-256") }
                while algorithm.next() != nil {}
            }
            let signature = try ASN1BitString(derEncoded: &nodes)
            let list = try parseTBS(tbsNode)
            return (list, tbsNode.encodedBytes, signature.bytes)
        }
    }

    private static func parseTBS(_ node: ASN1Node) throws -> RevocationList {
        try DER.sequence(node, identifier: .sequence) { nodes in
            var next = nodes.next()
            if let version = next, version.identifier == .integer {
                let value = try Int(derEncoded: version)
                guard value == 1 else { throw SecurityError("version \(value + 1), expected 2") }
                next = nodes.next()
            }
            guard let algorithm = next else { throw SecurityError("no signature algorithm") }
            _ = algorithm
            guard let issuerNode = nodes.next() else { throw SecurityError("no issuer") }
            let issuer = try DistinguishedName(derEncoded: issuerNode)
            let thisUpdate = try parseTime(nodes.next())
            var nextUpdate = thisUpdate
            var entries: [Entry] = []
            var number = 0
            while let node = nodes.next() {
                if node.identifier == .utcTime || node.identifier == .generalizedTime {
                    nextUpdate = try parseTime(node)
                } else if node.identifier == .sequence {
                    entries = try DER.sequence(of: Entry.self, identifier: .sequence, rootNode: node)
                } else if node.identifier == ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific) {
                    number = try parseExtensions(node)
                }
            }
            return RevocationList(issuer: issuer, number: number, thisUpdate: thisUpdate, nextUpdate: nextUpdate, entries: entries)
        }
    }

    /// The CRL number from the `[0] Extensions`.
    private static func parseExtensions(_ node: ASN1Node) throws -> Int {
        try DER.explicitlyTagged(node, tagNumber: 0, tagClass: .contextSpecific) { inner in
            try extensionValues(inner)[crlNumberOID].map { try Int(derEncoded: $0) } ?? 0
        }
    }

    /// An `Extensions` sequence: each extension's `extnValue` (the DER it wraps) by its OID.
    static func extensionValues(_ node: ASN1Node) throws -> [ASN1ObjectIdentifier: ArraySlice<UInt8>] {
        var values: [ASN1ObjectIdentifier: ArraySlice<UInt8>] = [:]
        try DER.sequence(node, identifier: .sequence) { extensions in
            while let ext = extensions.next() {
                try DER.sequence(ext, identifier: .sequence) { fields in
                    let oid = try ASN1ObjectIdentifier(derEncoded: &fields)
                    var value = fields.next()
                    if value?.identifier == .boolean { value = fields.next() }  // critical
                    if let value { values[oid] = try ASN1OctetString(derEncoded: value).bytes }
                }
            }
        }
        return values
    }

    static func parseTime(_ node: ASN1Node?) throws -> Date {
        guard let node else { throw SecurityError("a time is missing") }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let components: DateComponents
        if node.identifier == .utcTime {
            let t = try UTCTime(derEncoded: node)
            components = DateComponents(year: t.year, month: t.month, day: t.day, hour: t.hours, minute: t.minutes, second: t.seconds)
        } else {
            let t = try GeneralizedTime(derEncoded: node)
            components = DateComponents(year: t.year, month: t.month, day: t.day, hour: t.hours, minute: t.minutes, second: t.seconds)
        }
        guard let date = calendar.date(from: components) else { throw SecurityError("an impossible date") }
        return date
    }
}

extension RevocationList.Entry: DERParseable {
    public init(derEncoded node: ASN1Node) throws {
        self = try DER.sequence(node, identifier: .sequence) { fields in
            let serial = try ArraySlice<UInt8>(derEncoded: &fields)
            let revokedAt = try RevocationList.parseTime(fields.next())
            var reason: RevocationList.Reason?
            if let extensions = fields.next(), let value = try RevocationList.extensionValues(extensions)[RevocationList.reasonCodeOID],
                case .primitive(let content) = try DER.parse(value).content, let code = content.last
            {
                reason = RevocationList.Reason(rawValue: Int(code)) ?? .unspecified
            }
            return RevocationList.Entry(serialNumber: Certificate.SerialNumber(bytes: serial), revokedAt: revokedAt, reason: reason)
        }
    }
}

extension Certificate.SerialNumber {
    /// The serial number as `openssl` prints it: two hex digits per byte, separated by colons.
    public var hexadecimal: String {
        bytes.map { String(format: "%02x", $0) }.joined(separator: ":")
    }
}
