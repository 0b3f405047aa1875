import CamRigCapture
import CamRigObjectStore
import CamRigWire
import Foundation

extension WireObjectStoreTarget {
    /// The target an agent is sent: where to put objects and with which credentials.
    public init(_ location: ObjectStoreLocation, caCertificatesPEM: String = "") {
        self.init()
        endpoint = location.endpoint
        region = location.region
        bucket = location.bucket
        prefix = location.prefix
        pathStyle = location.pathStyle
        accessKeyID = location.credentials.accessKeyID
        secretAccessKey = location.credentials.secretAccessKey
        sessionToken = location.credentials.sessionToken ?? ""
        partSize = UInt32(clamping: location.partSize ?? 0)
        self.caCertificatesPem = caCertificatesPEM
    }

    /// The location it names, or why it names none (a field missing).
    public func location() -> Result<ObjectStoreLocation, ObjectStoreError> {
        guard endpoint.hasPrefix("http://") || endpoint.hasPrefix("https://"), !bucket.isEmpty, !prefix.isEmpty, !accessKeyID.isEmpty,
            !secretAccessKey.isEmpty
        else {
            return .failure(.configuration("the object store target needs an http(s) endpoint, a bucket, a prefix and credentials"))
        }
        return .success(ObjectStoreLocation(
            endpoint: endpoint, region: region.isEmpty ? "us-east-1" : region, bucket: bucket, prefix: prefix, pathStyle: pathStyle,
            credentials: ObjectStoreCredentials(accessKeyID: accessKeyID, secretAccessKey: secretAccessKey, sessionToken: sessionToken),
            partSize: partSize == 0 ? nil : Int(partSize)))
    }
}

extension WireStoredObject {
    public init(_ object: StoredObject) {
        self.init()
        key = object.key
        size = object.size
        sha256 = Data(object.sha256.hexBytes)
        etag = object.etag
    }

    public var stored: StoredObject {
        StoredObject(key: key, size: size, sha256: sha256.map { String(format: "%02x", $0) }.joined(), etag: etag)
    }
}

extension String {
    /// Bytes of a hex string (pairs of digits; what does not parse is left out).
    fileprivate var hexBytes: [UInt8] {
        var bytes: [UInt8] = []
        var index = startIndex
        while index < endIndex, let next = self.index(index, offsetBy: 2, limitedBy: endIndex) {
            if let byte = UInt8(self[index..<next], radix: 16) { bytes.append(byte) }
            index = next
        }
        return bytes
    }
}
