import CamRigCapture
import CamRigDeviceModel
import CamRigDevices
import CamRigImage
import CamRigObjectStore
import CamRigWire
import CamRigWireModel
import Foundation
import NIOCore
import NIOPosix

/// What a FetchResults with `upload_to` asks: each result of the trigger put in the store by this agent,
/// under the capture's prefix and the name the coordinator gave its device.
public struct ResultUpload: Sendable, Equatable {
    var location: ObjectStoreLocation
    var partSize: Int
    var triggerID: String
    /// Device id → the stem of its file, relative to the capture.
    var stems: [String: String]
    var thumbnailWidth: Int

    /// The upload `fetch` asks for; nil when it asks for none; an error when it is malformed.
    static func from(_ fetch: WireFetchResults, agentID: String) -> Parsed {
        guard fetch.hasUploadTo else { return .none }
        let location: ObjectStoreLocation
        switch fetch.uploadTo.location() {
        case .success(let parsed): location = parsed
        case .failure(let error): return .refused(WireError(.invalidArgument, agent: agentID, "FetchResults.upload_to: \(error)"))
        }
        var stems: [String: String] = [:]
        for name in fetch.names {
            guard CaptureFileNames.isValid(name.stem) else {
                return .refused(WireError(.invalidArgument, agent: agentID, device: name.deviceID, "FetchResults.names: \(name.stem.debugDescription) is not a file name inside a capture"))
            }
            stems[name.deviceID] = name.stem
        }
        guard !stems.isEmpty else {
            return .refused(WireError(.invalidArgument, agent: agentID, "FetchResults with upload_to names no device (names)"))
        }
        return .upload(ResultUpload(
            location: location, partSize: location.partSize ?? ObjectUpload.defaultPartSize,
            triggerID: fetch.triggerID, stems: stems, thumbnailWidth: Int(min(fetch.thumbnailWidth, 1024))))
    }

    enum Parsed {
        case none
        case upload(ResultUpload)
        case refused(WireError)
    }

    /// Whether `result` is one this upload takes.
    func takes(_ result: WirePhotoResult) -> Bool {
        (triggerID.isEmpty || result.triggerID == triggerID) && stems[result.deviceID] != nil
    }

    /// Puts `result`'s image in the store as its image file (PNG for raw pixel formats, JPEG as it came:
    /// the file the coordinator's own store would write), resumably (`stateFile`), and says what the store
    /// holds, with a thumbnail for the contact sheet when asked for one.
    func store(
        _ result: WirePhotoResult, image: ByteBuffer, client: S3Client, stateFile: URL, threadPool: NIOThreadPool
    ) async throws -> (WireStoredObject, ContactSheet.Thumbnail?) {
        let layout = FrameLayout(
            pixelFormat: PixelFormat(rawValue: result.pixelFormat), dimensions: result.dimensions.dimensions, bytesPerLine: Int(result.bytesPerLine))
        // Encoding is CPU work: on the pool's thread, off the event loops and Swift's cooperative threads.
        let encoded = try await threadPool.runIfActive {
            try image.withUnsafeReadableBytes {
                try FrameImageWriter.encode($0, pixelFormat: layout.pixelFormat, dimensions: layout.dimensions, bytesPerLine: layout.bytesPerLine)
            }
        }
        let stem = CaptureFileNames.photo(
            stems[result.deviceID]!, proxy: result.resolved.deferredProxy, bracketIndex: Int(result.resolved.bracketIndex))
        let upload = ObjectUpload(
            key: location.key("\(stem).\(encoded.fileExtension)"), source: .bytes(ByteBuffer(bytes: encoded.data)), partSize: partSize,
            stateFile: stateFile, contentType: ["png": "image/png", "jpg": "image/jpeg", "dng": "image/x-adobe-dng"][encoded.fileExtension])
        let stored = try await upload.run(with: client)
        guard thumbnailWidth > 0 else { return (WireStoredObject(stored), nil) }
        let thumbnail = image.withUnsafeReadableBytes {
            try? ContactSheet.thumbnail(of: $0, layout: layout, width: thumbnailWidth, decodeJPEG: JPEGDecoding.rgb).get()
        }
        return (WireStoredObject(stored), thumbnail)
    }
}
