import CamRigCapture
import CamRigClock
import CamRigDeviceModel
import CamRigWire
import CamRigWireModel
import Foundation
import NIOCore

/// What a capture needs from its session, taken from the actor once: the capture then runs in tasks of
/// its own, so that the session keeps renewing leases and answering while frames are stored.
struct CaptureRig: Sendable {
    var sessionID: String
    var inputs: [RigDevice]
    /// Per input: its format for the manifest, when the session knows it better than the device.
    var formats: [WireFormat?]
    /// The frame grid the inputs are phase-locked to (coordinator clock), when they are: T is put on it.
    var grid: PhaseGrid?
    /// Reads every input's phase lock from its agent (when the inputs are phase-locked), for the manifest.
    var readPhases: (@Sendable () async -> [CameraPhase])?
    /// How long the session's last photo took from its plan until every agent had accepted its trigger:
    /// the next lead leaves room for as much again, and half more.
    var lastFanOut: Int64?

    /// Each input's phase lock as the capture ends; empty when the inputs are not phase-locked.
    func phases() async -> [CameraPhase] {
        await readPhases?() ?? []
    }

    /// Per input: its agent's clock estimate, or an error naming the agent.
    func clockEstimates() throws -> [ClockEstimate] {
        try inputs.map { try $0.agent.clockEstimate() }
    }

    /// Every agent's recent round trips, for the trigger lead.
    var roundTrips: [Int64] { inputs.flatMap(\.agent.recentRoundTrips) }

    /// Input indices by agent, agents in name order.
    var camerasByAgent: [(agentID: String, cameras: [Int])] {
        Dictionary(grouping: inputs.indices, by: { inputs[$0].agentID }).sorted { $0.key < $1.key }.map {
            ($0.key, $0.value)
        }
    }

    /// How the manifest describes each camera before the capture, with its clock as estimated.
    func cameraEntries(_ estimates: [ClockEstimate]) -> [CaptureManifest.Camera] {
        inputs.indices.map { index in
            let device = inputs[index]
            let format = formats[index] ?? device.activeFormat ?? WireFormat()
            let estimate = estimates[index]
            return CaptureManifest.Camera(
                index: index,
                name: device.name,
                agent: device.agentID,
                device: device.deviceID,
                model: device.description.modelID,
                format: format.id,
                pixelFormat: format.fourcc,
                width: format.dimensions.width,
                height: format.dimensions.height,
                clock: CaptureManifest.ClockStatistics(
                    offsetNs: estimate.offsetNanoseconds,
                    driftPpm: estimate.driftPPM,
                    errorBoundNs: estimate.errorBoundNanoseconds,
                    minimumRoundTripNs: estimate.minimumRoundTrip,
                    samples: estimate.sampleCount
                ),
                framesDelivered: 0,
                framesDropped: 0,
                framesUnmatched: 0
            )
        }
    }

    /// The name a camera's files start with: `cam0-AGENT_DEVICE`, unique in the capture and safe as a
    /// file name.
    func fileStem(camera index: Int) -> String {
        Self.fileStem(camera: index, name: inputs[index].name)
    }

    /// The file stem of camera `index` named `name` (`AGENT/DEVICE`).
    static func fileStem(camera index: Int, name: String) -> String {
        let safe = String(name.map { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" || $0 == "." ? $0 : "_" })
        return "cam\(index)-\(safe)"
    }

    /// Camera `camera`'s result of `triggerID`, as the manifest lists it while it is missing.
    func missing(camera: Int, triggerID: String, cause: CaptureManifest.Missing.Cause, reason: String, collectable: Bool) -> CaptureManifest.Missing {
        CaptureManifest.Missing(
            camera: camera, agent: inputs[camera].agentID, device: inputs[camera].deviceID, sessionId: sessionID,
            triggerId: triggerID, reason: reason, collectable: collectable, cause: cause)
    }

    /// Now as the manifest's `created`: ISO 8601, UTC.
    static func timestamp() -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: Date())
    }

    /// An agent's timestamp on the coordinator's clock, with its uncertainty: the clock estimate's
    /// error bound there plus the agent's own.
    static func coordinatorTime(of stamp: WireTimestamp, estimate: ClockEstimate) -> (
        timestamp: Int64, uncertainty: Int64
    ) {
        let timestamp = estimate.coordinatorTime(atAgent: stamp.nanoseconds)
        return (timestamp, Int64(estimate.errorBound(atCoordinator: timestamp)) + Int64(clamping: stamp.uncertaintyNs))
    }

    /// Stores a fetched photo as `stem` in `capture` and describes it as the manifest lists it: its
    /// exposure on the coordinator's clock through `estimate`, with the uncertainty there.
    static func store(
        _ result: WirePhotoResult,
        payload: ByteBuffer,
        camera: Int,
        stem: String,
        estimate: ClockEstimate,
        lateness: Int64?,
        into sink: some CaptureSink,
        capture: CaptureHandle
    ) async throws -> CaptureManifest.Frame {
        let (timestamp, uncertainty) = coordinatorTime(
            of: result.hasExposureStart ? result.exposureStart : result.captureTime, estimate: estimate)
        let file: String
        if !result.uploadError.isEmpty {
            throw UploadFailure(description: result.uploadError)
        } else if result.hasStored {
            // The agent put it in the store itself: checked there, never carried here.
            file = try await sink.adopt(result.stored.stored, in: capture)
        } else {
            file = try await sink.write(
                PayloadBytes(payload),
                layout: layout(pixelFormat: result.pixelFormat, dimensions: result.dimensions, bytesPerLine: result.bytesPerLine),
                named: CaptureFileNames.photo(stem, proxy: result.resolved.deferredProxy, bracketIndex: Int(result.resolved.bracketIndex)),
                in: capture
            )
        }
        var frame = CaptureManifest.Frame(
            camera: camera, sequence: result.sequence, file: file, timestampNs: timestamp,
            agentTimestampNs: result.captureTime.nanoseconds, marks: result.captureTime.marks.name,
            uncertaintyNs: uncertainty, latenessNs: lateness, photo: result.hasResolved ? Self.photo(result) : nil)
        if result.hasStored { frame.sha256 = result.stored.stored.sha256 }
        return frame
    }

    /// The request for an agent's results of `triggerID`: with a sink whose agents upload themselves,
    /// it names the store (the capture's prefix), each device's file stem and the contact sheet's
    /// thumbnail width.
    static func fetchRequest(
        sessionID: String, triggerID: String?, cameras: [(deviceID: String, stem: String)], thumbnailWidth: Int, sink: some CaptureSink,
        capture: CaptureHandle
    ) -> WireFetchResults {
        var fetch = WireFetchResults()
        fetch.sessionID = sessionID
        guard let location = sink.directUpload(for: capture) else { return fetch }
        fetch.uploadTo = WireObjectStoreTarget(location)
        fetch.triggerID = triggerID ?? ""
        fetch.names = cameras.map {
            var name = WireUploadName()
            name.deviceID = $0.deviceID
            name.stem = $0.stem
            return name
        }
        fetch.thumbnailWidth = UInt32(thumbnailWidth)
        return fetch
    }

    /// The contact sheet's thumbnail of a fetched photo: the agent's, when it stored the photo itself;
    /// otherwise made by the sink from the image.
    static func thumbnail(
        of result: WirePhotoResult, payload: ByteBuffer?, width: Int, sink: some CaptureSink
    ) -> Result<ContactSheet.Thumbnail, ContactSheet.ThumbnailRefusal>? {
        guard let payload else { return nil }
        if result.hasStored {
            let width = Int(result.thumbnail.width)
            let height = Int(result.thumbnail.height)
            guard width > 0, height > 0, payload.readableBytes == width * height * 3 else {
                return .failure(ContactSheet.ThumbnailRefusal("stored; no thumbnail from its agent"))
            }
            return .success(ContactSheet.Thumbnail(width: width, height: height, rgb: Array(payload.readableBytesView)))
        }
        let layout = layout(pixelFormat: result.pixelFormat, dimensions: result.dimensions, bytesPerLine: result.bytesPerLine)
        return payload.withUnsafeReadableBytes { sink.thumbnail(of: $0, layout: layout, width: width) }
    }

    /// A photo's resolved settings as the manifest records them.
    static func photo(_ result: WirePhotoResult) -> CaptureManifest.Photo {
        let resolved = result.resolved
        return CaptureManifest.Photo(
            quality: PhotoQualityPrioritization(resolved.qualityPrioritization).description,
            framesMerged: Int(resolved.framesMerged), captureDurationNs: resolved.captureDurationNs,
            processingDurationNs: resolved.processingDurationNs, note: resolved.note.isEmpty ? nil : resolved.note,
            photoId: result.photoID.isEmpty ? nil : result.photoID, proxy: resolved.deferredProxy ? true : nil,
            waitedNs: resolved.waitedNs > 0 ? resolved.waitedNs : nil,
            bracketIndex: resolved.bracketIndex > 0 ? Int(resolved.bracketIndex) : nil,
            exposureBias: resolved.bracketIndex > 0 ? resolved.exposureBias : nil)
    }

    /// How a frame described on the wire is laid out.
    static func layout(pixelFormat: UInt32, dimensions: WireDimensions, bytesPerLine: UInt32) -> FrameLayout {
        FrameLayout(
            pixelFormat: PixelFormat(rawValue: pixelFormat), dimensions: dimensions.dimensions,
            bytesPerLine: Int(bytesPerLine))
    }

    /// The builder of `capture`'s manifest, with every camera as it stood.
    func manifestBuilder(for capture: CaptureHandle, estimates: [ClockEstimate]) -> ManifestBuilder {
        ManifestBuilder(
            id: capture.id,
            kind: capture.kind,
            created: Self.timestamp(),
            sessionID: sessionID,
            cameras: cameraEntries(estimates)
        )
    }
}

extension RigSession {
    /// The session as a capture needs it; throws when there is nothing to capture with.
    func captureRig(formats: [WireFormat?]? = nil) throws -> CaptureRig {
        guard !inputs.isEmpty else {
            throw CommitError(
                description: "the session has no cameras; add inputs first (see `camrig devices`)", failures: [],
                rollbackFailures: [])
        }
        var readPhases: (@Sendable () async -> [CameraPhase])?
        if phaseGrid != nil {
            readPhases = { [self] in await self.phaseStatus() }
        }
        return CaptureRig(
            sessionID: id, inputs: inputs, formats: formats ?? Array(repeating: nil, count: inputs.count), grid: phaseGrid,
            readPhases: readPhases, lastFanOut: lastFanOut)
    }
}

/// An agent could not put a result in the capture's object store; its message names the agent, the
/// store and why. The result stays in the agent's spool.
struct UploadFailure: Error, CustomStringConvertible {
    var description: String
}
