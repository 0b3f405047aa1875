import CamRigHTTP
import Crypto
import Foundation
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import NIOSSL

/// The S3 API calls CamRig makes, over `HTTPTransport` (SwiftNIO's HTTP/1.1), each signed with `SignatureV4` and its payload
/// hashed: objects put, read, checked and listed, and multipart uploads made, resumed and completed.
///
/// One client per process part that needs one; `shutdown()` before it goes.
public final class S3Client: Sendable {
    public let location: ObjectStoreLocation
    private let http: HTTPTransport
    private let signer: SignatureV4
    private let host: String
    private let timeout: TimeAmount

    public init(_ location: ObjectStoreLocation, timeout: TimeAmount = .seconds(60)) throws {
        self.location = location
        signer = SignatureV4(credentials: location.credentials, region: location.region)
        guard let url = URL(string: location.endpoint), let hostname = url.host else {
            throw ObjectStoreError.configuration("the endpoint \(location.endpoint.debugDescription) is not http(s)://HOST[:PORT]")
        }
        let defaultPort = url.scheme == "https" ? 443 : 80
        let authority = url.port.map { $0 == defaultPort ? hostname : "\(hostname):\($0)" } ?? hostname
        host = location.pathStyle ? authority : "\(location.bucket).\(authority)"
        var tls: TLSConfiguration?
        if url.scheme == "https" {
            var configuration = TLSConfiguration.makeClientConfiguration()
            configuration.minimumTLSVersion = .tlsv12
            if let bundle = location.caBundle {
                do {
                    configuration.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(bundle))
                } catch {
                    throw ObjectStoreError.configuration("cannot read the CA bundle \(bundle) (AWS_CA_BUNDLE): \(error)")
                }
            }
            tls = configuration
        }
        let connectHost = location.pathStyle ? hostname : "\(location.bucket).\(hostname)"
        do {
            http = try HTTPTransport(host: connectHost.trimmingCharacters(in: CharacterSet(charactersIn: "[]")), port: url.port ?? defaultPort, tls: tls)
        } catch {
            throw ObjectStoreError.configuration("cannot set up TLS for \(location.endpoint): \(error)")
        }
        self.timeout = timeout
    }

    public func shutdown() async {
        await http.shutdown()
    }

    /// `body` given a client of `location`, shut down before this returns, whether `body` throws or not.
    public static func with<Value>(
        _ location: ObjectStoreLocation, timeout: TimeAmount = .seconds(60), _ body: (S3Client) async throws -> Value
    ) async throws -> Value {
        let client = try S3Client(location, timeout: timeout)
        do {
            let value = try await body(client)
            await client.shutdown()
            return value
        } catch {
            await client.shutdown()
            throw error
        }
    }

    // MARK: Objects

    /// Puts `body` as `key` in one request, with its MD5 for the store to check and its SHA-256 as the
    /// object's `sha256` metadata; returns the object once the store's entity tag matches the MD5.
    public func put(_ key: String, body: ByteBuffer, contentType: String? = nil) async throws -> StoredObject {
        let sums = body.withUnsafeReadableBytes { (md5: Data(Insecure.MD5.hash(data: $0)), sha: SignatureV4.hex(SHA256.hash(data: $0))) }
        var headers = [("content-md5", sums.md5.base64EncodedString()), ("x-amz-meta-sha256", sums.sha)]
        if let contentType { headers.append(("content-type", contentType)) }
        let response = try await send("PUT", key: key, headers: headers, body: body, payloadHash: sums.sha, expect: [200])
        let etag = Self.unquoted(response.headers.first(name: "etag") ?? "")
        guard etag == SignatureV4.hex(sums.md5) else {
            throw ObjectStoreError(.mismatch, "the store answered PUT \(key) with entity tag \(etag), not the MD5 of what was sent")
        }
        return StoredObject(key: key, size: UInt64(body.readableBytes), sha256: sums.sha, etag: etag)
    }

    /// The object's size, `sha256` metadata and entity tag; nil when there is no such object.
    public func head(_ key: String) async throws -> (size: UInt64, sha256: String?, etag: String)? {
        do {
            let response = try await send("HEAD", key: key, expect: [200])
            let size = UInt64(response.headers.first(name: "content-length") ?? "") ?? 0
            return (size, response.headers.first(name: "x-amz-meta-sha256"), Self.unquoted(response.headers.first(name: "etag") ?? ""))
        } catch let error as ObjectStoreError where error.kind == .notFound {
            return nil
        }
    }

    /// The object's bytes (at most `limit`).
    public func get(_ key: String, limit: Int = 1 << 30) async throws -> ByteBuffer {
        try await send("GET", key: key, expect: [200], limit: limit).body
    }

    /// Bytes `range` of the object (a ranged GET: a large object read piece by piece).
    public func get(_ key: String, range: Range<UInt64>) async throws -> ByteBuffer {
        guard !range.isEmpty else { return ByteBuffer() }
        let body = try await send(
            "GET", key: key, headers: [("range", "bytes=\(range.lowerBound)-\(range.upperBound - 1)")], expect: [206, 200], limit: range.count).body
        guard body.readableBytes == range.count else {
            throw ObjectStoreError(.mismatch, "the store answered bytes \(range.lowerBound)-\(range.upperBound - 1) of \(key) with \(body.readableBytes) bytes")
        }
        return body
    }

    public func delete(_ key: String) async throws {
        _ = try await send("DELETE", key: key, expect: [200, 204])
    }

    /// The keys under `prefix` (every page), with their sizes.
    public func list(prefix: String) async throws -> [(key: String, size: UInt64)] {
        var all: [(String, UInt64)] = []
        var token: String?
        repeat {
            var query = [("list-type", "2"), ("prefix", prefix)]
            if let token { query.append(("continuation-token", token)) }
            let body = try await send("GET", key: nil, query: query, expect: [200]).text
            for entry in S3XML.elements("Contents", in: body) {
                guard let key = S3XML.value("Key", in: entry) else { continue }
                all.append((key, UInt64(S3XML.value("Size", in: entry) ?? "") ?? 0))
            }
            token = S3XML.value("IsTruncated", in: body) == "true" ? S3XML.value("NextContinuationToken", in: body) : nil
        } while token != nil
        return all
    }

    /// Makes the bucket unless it is there already (ours or anyone's: the error says which).
    public func createBucket() async throws {
        do {
            _ = try await send("PUT", key: nil, expect: [200])
        } catch let error as ObjectStoreError where error.code == "BucketAlreadyOwnedByYou" {
            return
        }
    }

    // MARK: Multipart uploads

    /// Starts a multipart upload of `key` carrying `sha256` (hex, of the whole object) as metadata.
    public func createMultipartUpload(_ key: String, sha256: String, contentType: String? = nil) async throws -> String {
        var headers = [("x-amz-meta-sha256", sha256)]
        if let contentType { headers.append(("content-type", contentType)) }
        let body = try await send("POST", key: key, query: [("uploads", "")], headers: headers, expect: [200]).text
        guard let id = S3XML.value("UploadId", in: body), !id.isEmpty else {
            throw ObjectStoreError(.refused, "the store started an upload of \(key) without saying its id")
        }
        return id
    }

    /// Uploads one part, with its MD5 (which the caller computed, with its SHA-256 in hex) for the store
    /// to check; returns its entity tag (the MD5, hex).
    @discardableResult
    public func uploadPart(_ key: String, uploadID: String, number: Int, body: ByteBuffer, md5 digest: [UInt8], sha256 sha: String) async throws -> String {
        let md5 = Data(digest)
        let response = try await send(
            "PUT", key: key, query: [("partNumber", String(number)), ("uploadId", uploadID)],
            headers: [("content-md5", md5.base64EncodedString())], body: body, payloadHash: sha, expect: [200])
        let etag = Self.unquoted(response.headers.first(name: "etag") ?? "")
        guard etag == SignatureV4.hex(md5) else {
            throw ObjectStoreError(.mismatch, "the store took part \(number) of \(key) with entity tag \(etag), not the MD5 of what was sent")
        }
        return etag
    }

    /// The parts the store holds of an upload, by number: entity tag and size.
    public func listParts(_ key: String, uploadID: String) async throws -> [Int: (etag: String, size: UInt64)] {
        var parts: [Int: (String, UInt64)] = [:]
        var marker: String?
        repeat {
            var query = [("uploadId", uploadID)]
            if let marker { query.append(("part-number-marker", marker)) }
            let body = try await send("GET", key: key, query: query, expect: [200]).text
            for part in S3XML.elements("Part", in: body) {
                guard let number = Int(S3XML.value("PartNumber", in: part) ?? "") else { continue }
                parts[number] = (Self.unquoted(S3XML.value("ETag", in: part) ?? ""), UInt64(S3XML.value("Size", in: part) ?? "") ?? 0)
            }
            marker = S3XML.value("IsTruncated", in: body) == "true" ? S3XML.value("NextPartNumberMarker", in: body) : nil
        } while marker != nil
        return parts
    }

    /// Joins the parts into the object; returns the store's entity tag of it.
    public func completeMultipartUpload(_ key: String, uploadID: String, parts: [(number: Int, etag: String)]) async throws -> String {
        let xml =
            "<CompleteMultipartUpload>"
            + parts.map { "<Part><PartNumber>\($0.number)</PartNumber><ETag>\"\($0.etag)\"</ETag></Part>" }.joined()
            + "</CompleteMultipartUpload>"
        let body = ByteBuffer(string: xml)
        let response = try await send(
            "POST", key: key, query: [("uploadId", uploadID)], headers: [("content-type", "application/xml")], body: body,
            payloadHash: SignatureV4.hex(SHA256.hash(data: Data(xml.utf8))), expect: [200])
        // A 200 may still carry an error: the store answers early and fails while joining.
        if let code = S3XML.value("Code", in: response.text) {
            throw ObjectStoreError(.refused, code: code, "the store could not complete the upload of \(key): \(code) \(S3XML.value("Message", in: response.text) ?? "")")
        }
        return Self.unquoted(S3XML.value("ETag", in: response.text) ?? response.headers.first(name: "etag") ?? "")
    }

    public func abortMultipartUpload(_ key: String, uploadID: String) async throws {
        _ = try await send("DELETE", key: key, query: [("uploadId", uploadID)], expect: [200, 204])
    }

    /// Multipart uploads begun and neither completed nor aborted, under `prefix`: key and upload id.
    public func listMultipartUploads(prefix: String) async throws -> [(key: String, uploadID: String)] {
        let body = try await send("GET", key: nil, query: [("uploads", ""), ("prefix", prefix)], expect: [200]).text
        return S3XML.elements("Upload", in: body).compactMap { upload in
            guard let key = S3XML.value("Key", in: upload), let id = S3XML.value("UploadId", in: upload) else { return nil }
            return (key, id)
        }
    }

    // MARK: Requests

    struct Response {
        var status: UInt
        var headers: HTTPHeaders
        var body: ByteBuffer
        var text: String { String(buffer: body) }
    }

    /// The URL path of `key` in the bucket (or of the bucket), percent-encoded.
    func path(_ key: String?) -> String {
        let encodedKey = key.map { SignatureV4.encode($0, keepingSlashes: true) }
        if location.pathStyle {
            return "/\(location.bucket)" + (encodedKey.map { "/\($0)" } ?? "")
        }
        return "/" + (encodedKey ?? "")
    }

    private func send(
        _ method: String, key: String?, query: [(String, String)] = [], headers: [(String, String)] = [], body: ByteBuffer? = nil,
        payloadHash: String = SignatureV4.emptyPayloadHash, expect: Set<UInt>, limit: Int = 16 << 20
    ) async throws -> Response {
        let path = path(key)
        var signed = headers
        signed.append(("host", host))
        if let body { signed.append(("content-length", String(body.readableBytes))) }
        let authorization = signer.sign(method: method, path: path, query: query, headers: signed, payloadHash: payloadHash, date: Date())
        let queryText = query.map { $0.1.isEmpty && ["uploads"].contains($0.0) ? SignatureV4.encode($0.0) : "\(SignatureV4.encode($0.0))=\(SignatureV4.encode($0.1))" }
            .joined(separator: "&")
        var head = HTTPRequestHead(version: .http1_1, method: HTTPMethod(rawValue: method), uri: "\(path)\(queryText.isEmpty ? "" : "?" + queryText)")
        head.headers.add(name: "host", value: host)
        for (name, value) in signed where name != "host" { head.headers.add(name: name, value: value) }
        // A PUT or POST without a body still says so (some stores refuse a request of unknown length).
        if body == nil, method == "PUT" || method == "POST" { head.headers.add(name: "content-length", value: "0") }
        for (name, value) in authorization { head.headers.add(name: name, value: value) }
        let what = "\(method) \(key.map { location.bucket + "/" + $0 } ?? location.bucket)"
        // A store that is busy (503 SlowDown) or failed inside (500, 502, 504) is asked again, as AWS's own
        // clients do: each request here can be repeated without harm.
        var attempt = 0
        while true {
            let response: HTTPTransport.Response
            do {
                response = try await http.execute(head, body: body, limit: limit, timeout: timeout)
            } catch {
                throw ObjectStoreError(
                    .unreachable, "the object store at \(location.endpoint) did not answer \(what) (\(error)); is it running, and is the endpoint right?")
            }
            let answered = Response(status: response.status, headers: response.headers, body: response.body)
            if expect.contains(answered.status) { return answered }
            attempt += 1
            guard [500, 502, 503, 504].contains(answered.status), attempt < Self.attempts else { throw refusal(answered, what: what) }
            try await Task.sleep(for: .milliseconds(Int64(100 << min(attempt, 5)) + Int64.random(in: 0..<50)))
            // Signed again: the date moves on.
            for (name, _) in authorization { head.headers.remove(name: name) }
            for (name, value) in signer.sign(method: method, path: path, query: query, headers: signed, payloadHash: payloadHash, date: Date()) {
                head.headers.add(name: name, value: value)
            }
        }
    }

    /// Times a request is sent before a busy or failing store's answer is final.
    static let attempts = 5

    /// The store's refusal as an error that says what to do.
    private func refusal(_ response: Response, what: String) -> ObjectStoreError {
        let code = S3XML.value("Code", in: response.text)
        let message = S3XML.value("Message", in: response.text)
        let detail = [code, message].compactMap { $0 }.joined(separator: ": ")
        let said = "the object store at \(location.endpoint) refused \(what) with HTTP \(response.status)\(detail.isEmpty ? "" : " (\(detail))")"
        switch (response.status, code) {
        case (403, "SignatureDoesNotMatch"?):
            return ObjectStoreError(
                .accessDenied, code: code,
                "\(said): it does not take the signature of \(location.credentials) (an unknown key, or a wrong secret); check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
        case (403, "InvalidAccessKeyId"?):
            return ObjectStoreError(.accessDenied, code: code, "\(said): the store knows no \(location.credentials); check AWS_ACCESS_KEY_ID")
        case (403, _):
            return ObjectStoreError(.accessDenied, code: code, "\(said): \(location.credentials) may not do this; check its permissions on \(location.bucket)")
        case (404, _), (_, "NoSuchUpload"?), (_, "NoSuchKey"?):
            return ObjectStoreError(.notFound, code: code, said)
        case (400, "BadDigest"?), (400, "XAmzContentSHA256Mismatch"?):
            return ObjectStoreError(.mismatch, code: code, "\(said): the bytes changed on the way; they are sent again")
        default:
            return ObjectStoreError(.refused, code: code, said)
        }
    }

    static func unquoted(_ etag: String) -> String {
        etag.trimmingCharacters(in: CharacterSet(charactersIn: "\" "))
    }
}

/// The little of XML that S3's answers need: the text of named elements, and named blocks. S3's answers
/// are flat documents of known elements without attributes that matter, so no general parser is needed.
enum S3XML {
    /// The text of the first `<name>…</name>` in `xml`, with XML's entities decoded.
    static func value(_ name: String, in xml: some StringProtocol) -> String? {
        elements(name, in: xml).first.map(decode)
    }

    /// The contents of every `<name>…</name>` (or `<name attributes>…</name>`) in `xml`, in order.
    static func elements(_ name: String, in xml: some StringProtocol) -> [Substring] {
        let text = Substring(xml)
        var found: [Substring] = []
        var rest = text[...]
        while let open = rest.range(of: "<\(name)") {
            guard let close = rest[open.upperBound...].firstIndex(of: ">") else { break }
            let between = rest[open.upperBound..<close]
            // `<Name>` or `<Name attr="…">`, not `<NameOther>`.
            guard between.isEmpty || between.first == " " else {
                rest = rest[close...]
                continue
            }
            if rest[rest.index(before: close)] == "/" {
                found.append(rest[close..<close])
                rest = rest[rest.index(after: close)...]
                continue
            }
            let contentStart = rest.index(after: close)
            guard let end = rest[contentStart...].range(of: "</\(name)>") else { break }
            found.append(rest[contentStart..<end.lowerBound])
            rest = rest[end.upperBound...]
        }
        return found
    }

    static func decode(_ text: Substring) -> String {
        guard text.contains("&") else { return String(text) }
        return text.replacingOccurrences(of: "&quot;", with: "\"").replacingOccurrences(of: "&apos;", with: "'")
            .replacingOccurrences(of: "&lt;", with: "<").replacingOccurrences(of: "&gt;", with: ">")
            .replacingOccurrences(of: "&#34;", with: "\"").replacingOccurrences(of: "&amp;", with: "&")
    }
}

extension S3Client {
    /// Checks that the store holds `object` as described: its size, SHA-256 metadata and entity tag.
    public func check(_ object: StoredObject) async throws {
        guard let head = try await head(object.key) else {
            throw ObjectStoreError(.notFound, "the object store at \(location.endpoint) holds no \(location.bucket)/\(object.key)")
        }
        guard head.size == object.size, head.sha256 == object.sha256, head.etag == object.etag else {
            throw ObjectStoreError(
                .mismatch,
                "\(location.bucket)/\(object.key) in the store is \(head.size) bytes with SHA-256 \(head.sha256?.prefix(16) ?? "none")… and entity tag \(head.etag), not the \(object.size) bytes with \(object.sha256.prefix(16))… and \(object.etag) uploaded")
        }
    }
}
