import CamRigClock
import CamRigDeviceModel
import CamRigDevices
import CamRigImage
import CamRigWire
import CamRigWireModel
import NIOCore

/// The processing stage of a photo: what its captured frames become, decided and made without files,
/// locks or the network, so it runs wherever the caller puts it (the spool's thread) and is tested alone.
///
/// A capture becomes one of three things: a single photo (merged, sized and encoded by its plan), an
/// exposure bracket (one photo per bias), or a deferred photo (a half-size proxy now, the frames kept
/// for the final).
enum PhotoProcessor {
    /// A photo as its capture stage delivered it.
    struct Input: Sendable {
        /// What every result of the photo says about where it came from (`template(…)`).
        var template: WirePhotoResult
        /// The frames, the reference first.
        var frames: [CapturedFrame]
        var plan: PhotoPlan
        /// An exposure bracket's biases (EV), one image each; empty for a single photo.
        var bracket: [Float] = []
        /// How a bracket moved the exposure (`nil` when not bracketed).
        var bracketMethod: CaptureDevice.BracketMethod? = nil
        /// Delivered as a proxy now, made in full later.
        var deferred = false
    }

    /// An image to store and what it is.
    struct Made: Sendable {
        var result: WirePhotoResult
        var image: ByteBuffer
    }

    /// What a photo's processing made.
    enum Output: Sendable {
        /// One photo.
        case single(Made)
        /// One photo per bias, in the bracket's order.
        case bracket([Made])
        /// The proxy to deliver now, and what the final is made from later.
        case deferred(proxy: Made, job: DeferredPhotoStore.Job)

        /// The results to store, in order.
        var made: [Made] {
            switch self {
            case .single(let made): [made]
            case .bracket(let images): images
            case .deferred(let proxy, _): [proxy]
            }
        }

        /// The processing time the device's estimate learns from (none for a deferred photo's proxy).
        var processingDuration: Int64 {
            switch self {
            case .single(let made): made.result.resolved.processingDurationNs
            case .bracket(let images): images.map(\.result.resolved.processingDurationNs).reduce(0, +)
            case .deferred: 0
            }
        }
    }

    /// What a photo's results say about where they came from: its ids, its reference frame, whether the
    /// device was prepared, how long the capture waited to begin and how long its capture stage took
    /// (`AgentCapture.Captured.duration`).
    static func template(
        reference: CapturedFrame, photoID: String, session: String, triggerID: String, settingsID: UInt64,
        prepared: Bool, waited: Int64, captureDuration: Int64
    ) -> WirePhotoResult {
        var template = WirePhotoResult(
            reference, resultID: photoID, sessionID: session, triggerID: triggerID, photoSettingsID: settingsID)
        template.photoID = photoID
        template.resolved.prepared = prepared
        template.resolved.waitedNs = waited
        template.resolved.captureDurationNs = captureDuration
        return template
    }

    /// Processes a captured photo: a bracket, a deferred photo's proxy, or a single photo.
    static func process(_ input: Input) throws -> Output {
        if !input.bracket.isEmpty { return .bracket(try bracket(input)) }
        if input.deferred {
            let proxy = try proxy(
                template: input.template, reference: input.frames[0], plan: input.plan,
                started: HostClock.monotonicNow())
            return .deferred(
                proxy: proxy,
                job: DeferredPhotoStore.Job(template: input.template, frames: input.frames, plan: input.plan))
        }
        return .single(
            try final(
                template: input.template, frames: input.frames, plan: input.plan, started: HostClock.monotonicNow()))
    }

    /// An exposure bracket's images: one per bias, each its own photo and result (`PHOTO-1`, `PHOTO-2`…), each
    /// saying how long the bracket's one capture stage took.
    static func bracket(_ input: Input) throws -> [Made] {
        var images: [Made] = []
        for (index, (frame, bias)) in zip(input.frames, input.bracket).enumerated() {
            let template = input.template
            var image = WirePhotoResult(
                frame, resultID: "\(template.photoID)-\(index + 1)", sessionID: template.sessionID,
                triggerID: template.triggerID,
                photoSettingsID: template.photoSettingsID)
            image.photoID = image.resultID
            image.resolved = template.resolved
            var made = try final(template: image, frames: [frame], plan: input.plan, started: HostClock.monotonicNow())
            made.result.resolved.bracketIndex = UInt32(index + 1)
            made.result.resolved.exposureBias = bias
            if let method = input.bracketMethod {
                let how =
                    method == .none
                    ? "this camera cannot bracket its automatic exposure (no target bias): the image is exposed as the others; set a custom exposure to bracket its duration"
                    : "exposure bracket \(index + 1) of \(input.bracket.count): \(String(format: "%+.1f", bias)) EV by its \(method.rawValue)"
                made.result.resolved.note =
                    made.result.resolved.note.isEmpty ? how : made.result.resolved.note + "; " + how
            }
            images.append(made)
        }
        return images
    }

    /// A photo made from its frames by its plan: merged, sized and encoded, with its resolved settings.
    /// `template` says what it is of; its photo id becomes the result id.
    static func final(template: WirePhotoResult, frames: [CapturedFrame], plan: PhotoPlan, started: Int64) throws
        -> Made
    {
        // 4:2:0 planar frames are packed as YUYV for what takes that (merging, binning, JPEG); one frame
        // delivered as it is keeps the camera's format.
        let asItIs = frames.count == 1 && plan.output == .frame && plan.dimensions == frames[0].format.dimensions
        let frames = try asItIs ? frames : frames.map { frame in
            guard let packed = PhotoProcessing.packed(frame) else { throw PhotoFrameTooShort(frame: frame) }
            return packed
        }
        let merged = plan.level == .quality ? PhotoProcessing.merge(frames) : nil
        var photo = merged?.frame ?? frames[0]
        if plan.dimensions != photo.format.dimensions, let binned = PhotoProcessing.bin(photo) { photo = binned }
        let (file, pixelFormat) = try PhotoEncoder.encode(photo, as: plan.output, model: photo.deviceID)
        var result = template
        result.resultID = template.photoID
        let kept = template.resolved
        result.resolved = WireResolvedPhotoSettings(
            plan: plan, photo: photo, framesMerged: merged?.frames ?? 1, captureDuration: kept.captureDurationNs,
            processingDuration: HostClock.monotonicNow() - started)
        result.resolved.prepared = kept.prepared
        result.resolved.waitedNs = kept.waitedNs
        result.dimensions = WireDimensions(photo.format.dimensions)
        result.bytesPerLine = photo.format.bytesPerLine
        result.pixelFormat = pixelFormat.rawValue
        if pixelFormat != photo.format.pixelFormat { result.bytesPerLine = 0 }
        return Made(result: result, image: file)
    }

    /// A deferred photo's proxy: its reference frame, binned to half size where the format allows,
    /// delivered as the plan's output, under the photo id with ".proxy" appended.
    static func proxy(template: WirePhotoResult, reference: CapturedFrame, plan: PhotoPlan, started: Int64) throws
        -> Made
    {
        guard let reference = PhotoProcessing.packed(reference) else { throw PhotoFrameTooShort(frame: reference) }
        let photo = PhotoProcessing.bin(reference) ?? reference
        let (file, pixelFormat) = try PhotoEncoder.encode(photo, as: plan.output, model: photo.deviceID)
        var result = template
        result.resultID = template.photoID + ".proxy"
        var resolved = WireResolvedPhotoSettings(
            plan: plan, photo: photo, framesMerged: 1, captureDuration: template.resolved.captureDurationNs,
            processingDuration: HostClock.monotonicNow() - started)
        resolved.prepared = template.resolved.prepared
        resolved.waitedNs = template.resolved.waitedNs
        resolved.deferredProxy = true
        let why =
            "deferred: a proxy of the reference frame; the final (\(plan.level), \(plan.dimensions)) comes later under photo id \(template.photoID)"
        resolved.note = resolved.note.isEmpty ? why : resolved.note + "; " + why
        result.resolved = resolved
        result.dimensions = WireDimensions(photo.format.dimensions)
        result.bytesPerLine = pixelFormat == photo.format.pixelFormat ? photo.format.bytesPerLine : 0
        result.pixelFormat = pixelFormat.rawValue
        return Made(result: result, image: file)
    }

    /// A deferred photo's proxy made its final, when the final cannot be made: the same image under the
    /// photo id, saying why.
    static func proxyAsFinal(_ proxy: WirePhotoResult, photoID: String, why: String) -> WirePhotoResult {
        var final = proxy
        final.resultID = photoID
        final.resolved.deferredProxy = false
        let note = why + "; delivered as its proxy"
        final.resolved.note = final.resolved.note.isEmpty ? note : final.resolved.note + "; " + note
        return final
    }
}

/// A frame shorter than its format says (a 4:2:0 frame without all its chroma).
struct PhotoFrameTooShort: Error, CustomStringConvertible {
    var frame: CapturedFrame
    var description: String {
        "a \(frame.format.pixelFormat) \(frame.format.dimensions) frame of \(frame.deviceID) has \(frame.bytes.readableBytes) bytes, fewer than its format needs"
    }
}
