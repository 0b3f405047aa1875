import CamRigCapture
import CamRigObjectStore
import CamRigWire
import CamRigWireModel
import Foundation

extension AgentRecordings {
    /// Puts file `name` of a finished recording in the object store the request names, as PREFIX/NAME:
    /// resumed where an earlier upload was cut off (its state is kept beside the file, hidden), checked
    /// against the SHA-256 the recording noted for it, and paced to `max_bytes_per_second` when set (as a
    /// fetch is). The file stays until acknowledged.
    nonisolated func upload(_ request: WireUploadRecordingFile) async -> WireEnvelope.OneOf_Body {
        guard let file = await file(request.recordingID, request.name) else {
            return .error(WireError(
                .notFound, agent: agentID,
                "agent \(agentID) holds no finished file '\(request.name)' of recording '\(request.recordingID)' (never recorded here, still recording, or acknowledged)"))
        }
        let location: ObjectStoreLocation
        switch request.store.location() {
        case .success(let parsed): location = parsed
        case .failure(let error): return .error(WireError(.invalidArgument, agent: agentID, "UploadRecordingFile.store: \(error)"))
        }
        let folder = directory.appendingPathComponent(request.recordingID)
        let partSize = location.partSize ?? ObjectUpload.defaultPartSize
        let recorded = file.sha256.map { String(format: "%02x", $0) }.joined()
        // The recorder's SHA-256: the file is read once, and stored only if its bytes still hash to it.
        var upload = ObjectUpload(
            key: location.key(request.name), source: .file(folder.appendingPathComponent(request.name).path), partSize: partSize,
            stateFile: folder.appendingPathComponent(".\(request.name).upload"), contentType: request.name.hasSuffix(".mkv") ? "video/x-matroska" : nil,
            sha256: recorded.isEmpty ? nil : recorded)
        upload.maxBytesPerSecond = request.maxBytesPerSecond
        // Parts are read on the agent's disk thread, as its other files are.
        upload.threadPool = threadPool
        do {
            // The client's connections are closed before the answer goes.
            return try await S3Client.with(location) { client in
                await Self.answer(upload: upload, with: client, request: request, file: file, recorded: recorded, agentID: agentID, location: location)
            }
        } catch {
            // Only the client's set-up throws: `answer` turns every failure of the upload into its reply.
            return .error(WireError(.invalidArgument, agent: agentID, "\(error)"))
        }
    }

    private nonisolated static func answer(
        upload: ObjectUpload, with client: S3Client, request: WireUploadRecordingFile, file: WireRecordedFile, recorded: String, agentID: String,
        location: ObjectStoreLocation
    ) async -> WireEnvelope.OneOf_Body {
        do {
            let stored = try await upload.run(with: client)
            guard stored.sha256 == recorded, stored.size == file.size else {
                return .error(WireError(
                    .internal, agent: agentID,
                    "'\(request.name)' of recording '\(request.recordingID)' on agent \(agentID) is \(stored.size) bytes with SHA-256 \(stored.sha256.prefix(16))… on disk, not the \(file.size) bytes with \(recorded.prefix(16))… recorded: the file changed after it was written"))
            }
            return .storedObject(WireStoredObject(stored))
        } catch let error as ObjectStoreError {
            let code: WireErrorCode = error.kind == .unreachable ? .storeUnavailable : .storeRefused
            return .error(WireError(code, agent: agentID, "agent \(agentID) could not put '\(request.name)' in \(location.url): \(error.description)"))
        } catch {
            return .error(WireError(.storeRefused, agent: agentID, "agent \(agentID) could not put '\(request.name)' in \(location.url): \(error)"))
        }
    }
}
