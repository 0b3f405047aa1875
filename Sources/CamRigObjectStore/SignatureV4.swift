import Crypto
import Foundation

/// AWS Signature Version 4 for S3 requests (AWS's "Authenticating Requests" reference): a canonical
/// request of the method, path, query, signed headers and payload hash; the string to sign; and an
/// HMAC-SHA256 signature with a key derived from the secret, the day, the region and the service.
///
/// Pure: the caller gives the time, so the same request signs the same way (AWS's published examples
/// are its tests).
public struct SignatureV4: Sendable {
    public var credentials: ObjectStoreCredentials
    public var region: String
    public var service: String

    public init(credentials: ObjectStoreCredentials, region: String, service: String = "s3") {
        self.credentials = credentials
        self.region = region
        self.service = service
    }

    /// The SHA-256 of an empty payload, as `x-amz-content-sha256` names it.
    public static let emptyPayloadHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    /// The headers to add to a request so that the store accepts it: `x-amz-date`, `x-amz-content-sha256`,
    /// `x-amz-security-token` (with temporary credentials) and `Authorization`.
    ///
    /// - Parameters:
    ///   - path: the URL's path as sent (already percent-encoded, see `ObjectKey.encodedPath`).
    ///   - query: the query's parameters, not encoded.
    ///   - headers: every other header sent, `host` among them; all are signed.
    ///   - payloadHash: the hex SHA-256 of the body.
    public func sign(
        method: String, path: String, query: [(String, String)], headers: [(String, String)], payloadHash: String, date: Date
    ) -> [(String, String)] {
        let (amzDate, day) = Self.timestamps(date)
        var all = headers.map { ($0.0.lowercased(), Self.trimmed($0.1)) }
        all.append(("x-amz-date", amzDate))
        all.append(("x-amz-content-sha256", payloadHash))
        if let token = credentials.sessionToken { all.append(("x-amz-security-token", token)) }
        // One entry per header name, values joined by commas, sorted by name.
        var merged: [String: [String]] = [:]
        for (name, value) in all { merged[name, default: []].append(value) }
        let names = merged.keys.sorted()
        let canonicalHeaders = names.map { "\($0):\(merged[$0]!.joined(separator: ","))\n" }.joined()
        let signedHeaders = names.joined(separator: ";")
        let encodedQuery: [(name: String, value: String)] = query.map { (Self.encode($0.0), Self.encode($0.1)) }
        let sortedQuery = encodedQuery.sorted { (a, b) -> Bool in a.name == b.name ? a.value < b.value : a.name < b.name }
        let canonicalQuery = sortedQuery.map { "\($0.name)=\($0.value)" }.joined(separator: "&")
        let canonicalRequest = [method, path.isEmpty ? "/" : path, canonicalQuery, canonicalHeaders, signedHeaders, payloadHash]
            .joined(separator: "\n")
        let scope = "\(day)/\(region)/\(service)/aws4_request"
        let stringToSign = ["AWS4-HMAC-SHA256", amzDate, scope, Self.hex(SHA256.hash(data: Data(canonicalRequest.utf8)))]
            .joined(separator: "\n")
        let signature = Self.hex(HMAC<SHA256>.authenticationCode(for: Data(stringToSign.utf8), using: signingKey(day: day)))
        var added = [("x-amz-date", amzDate), ("x-amz-content-sha256", payloadHash)]
        if let token = credentials.sessionToken { added.append(("x-amz-security-token", token)) }
        added.append((
            "Authorization",
            "AWS4-HMAC-SHA256 Credential=\(credentials.accessKeyID)/\(scope), SignedHeaders=\(signedHeaders), Signature=\(signature)"
        ))
        return added
    }

    /// The key for one day, region and service, derived from the secret.
    func signingKey(day: String) -> SymmetricKey {
        func hmac(_ key: SymmetricKey, _ text: String) -> SymmetricKey {
            SymmetricKey(data: Data(HMAC<SHA256>.authenticationCode(for: Data(text.utf8), using: key)))
        }
        let dateKey = hmac(SymmetricKey(data: Data("AWS4\(credentials.secretAccessKey)".utf8)), day)
        return hmac(hmac(hmac(dateKey, region), service), "aws4_request")
    }

    /// `20130524T000000Z` and `20130524`, in UTC.
    static func timestamps(_ date: Date) -> (String, String) {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let c = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        let day = String(format: "%04d%02d%02d", c.year!, c.month!, c.day!)
        return (day + String(format: "T%02d%02d%02dZ", c.hour!, c.minute!, c.second!), day)
    }

    /// Sequential spaces become one, and the ends are trimmed (the canonical form of a header's value).
    static func trimmed(_ value: String) -> String {
        value.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
    }

    /// URI encoding as SigV4 wants it: everything but `A-Za-z0-9-._~` as `%XY` (upper case); `/` too
    /// unless `keepingSlashes` (object keys in paths).
    public static func encode(_ text: String, keepingSlashes: Bool = false) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            case UInt8(ascii: "/") where keepingSlashes:
                out.append("/")
            default:
                out += String(format: "%%%02X", byte)
            }
        }
        return out
    }

    public static func hex(_ bytes: some Sequence<UInt8>) -> String {
        bytes.map { String(format: "%02x", $0) }.joined()
    }
}
