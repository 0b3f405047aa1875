import CamRigObjectStore
import Foundation
import Testing

/// The signer against the worked examples of AWS's "Signature Calculations for the Authorization Header"
/// (Amazon S3 API reference): same key, same day, same requests, the signatures AWS publishes.
@Suite("AWS Signature V4", .timeLimit(.minutes(1)))
struct SignatureV4Tests {
    static let signer = SignatureV4(
        credentials: ObjectStoreCredentials(accessKeyID: "AKIAIOSFODNN7EXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
        region: "us-east-1")
    /// 2013-05-24T00:00:00Z.
    static let day = Date(timeIntervalSince1970: 1_369_353_600)
    static let host = ("host", "examplebucket.s3.amazonaws.com")

    static func authorization(_ headers: [(String, String)]) -> String {
        headers.first { $0.0 == "Authorization" }?.1 ?? ""
    }

    @Test("GET Object with a Range header")
    func getObject() {
        let headers = Self.signer.sign(
            method: "GET", path: "/test.txt", query: [], headers: [Self.host, ("range", "bytes=0-9")],
            payloadHash: SignatureV4.emptyPayloadHash, date: Self.day)
        #expect(
            Self.authorization(headers)
                == "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
        #expect(headers.contains { $0.0 == "x-amz-date" && $0.1 == "20130524T000000Z" })
    }

    @Test("PUT Object: a key with a character to encode, a body, and more headers")
    func putObject() {
        let body = Data("Welcome to Amazon S3.".utf8)
        let hash = SignatureV4.hex(SHA256Digest(body))
        #expect(hash == "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072")
        let headers = Self.signer.sign(
            method: "PUT", path: "/" + SignatureV4.encode("test$file.text", keepingSlashes: true), query: [],
            headers: [Self.host, ("Date", "Fri, 24 May 2013 00:00:00 GMT"), ("x-amz-storage-class", "REDUCED_REDUNDANCY")],
            payloadHash: hash, date: Self.day)
        #expect(Self.authorization(headers).hasSuffix(
            "SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class, Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"))
    }

    @Test("GET Bucket lifecycle: a query parameter without a value")
    func getLifecycle() {
        let headers = Self.signer.sign(
            method: "GET", path: "/", query: [("lifecycle", "")], headers: [Self.host], payloadHash: SignatureV4.emptyPayloadHash, date: Self.day)
        #expect(Self.authorization(headers).hasSuffix("Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"))
    }

    @Test("GET Bucket (list objects): query parameters sorted by name")
    func listObjects() {
        let headers = Self.signer.sign(
            method: "GET", path: "/", query: [("prefix", "J"), ("max-keys", "2")], headers: [Self.host],
            payloadHash: SignatureV4.emptyPayloadHash, date: Self.day)
        #expect(Self.authorization(headers).hasSuffix("Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"))
    }

    @Test("the secret never shows in a description")
    func secretNotDescribed() {
        let location = ObjectStoreLocation(
            endpoint: "http://127.0.0.1:9000", region: "us-east-1", bucket: "rig", prefix: "captures", pathStyle: true,
            credentials: ObjectStoreCredentials(accessKeyID: "AKID", secretAccessKey: "very-secret"))
        #expect(!"\(location)".contains("very-secret"))
        #expect(!String(reflecting: location.credentials).contains("very-secret"))
        #expect("\(location.credentials)".contains("AKID"))
    }

    @Test("s3:// addresses with the environment's settings, and the errors of bad ones")
    func parseLocation() throws {
        let environment = ["AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "s", "AWS_ENDPOINT_URL": "http://127.0.0.1:8080", "AWS_REGION": "eu-west-1"]
        let location = try ObjectStoreLocation.parse("s3://rig-a/studio/captures/", environment: environment)
        #expect(location.bucket == "rig-a" && location.prefix == "studio/captures" && location.pathStyle && location.region == "eu-west-1")
        #expect(location.key("X/manifest.json") == "studio/captures/X/manifest.json")
        let aws = try ObjectStoreLocation.parse("s3://rig-a", environment: ["AWS_ACCESS_KEY_ID": "A", "AWS_SECRET_ACCESS_KEY": "s"])
        #expect(aws.endpoint == "https://s3.us-east-1.amazonaws.com" && !aws.pathStyle && aws.prefix.isEmpty)
        let settings = ObjectStoreLocation.Settings(endpoint: "https://store:9443", region: "local", pathStyle: true)
        #expect(try ObjectStoreLocation.parse("s3://b/p", settings: settings, environment: environment).endpoint == "https://store:9443")
        #expect(throws: ObjectStoreError.self) { try ObjectStoreLocation.parse("s3://rig-a", environment: [:]) }
        #expect(throws: ObjectStoreError.self) { try ObjectStoreLocation.parse("s3://Bad_Bucket/x", environment: environment) }
        #expect(throws: ObjectStoreError.self) {
            try ObjectStoreLocation.parse("s3://b", environment: environment.merging(["AWS_ENDPOINT_URL": "ftp://x"]) { $1 })
        }
    }
}

import Crypto

private func SHA256Digest(_ data: Data) -> SHA256.Digest { SHA256.hash(data: data) }
