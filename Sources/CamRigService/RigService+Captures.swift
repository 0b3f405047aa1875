import CamRigCapture
import CamRigClock
import CamRigCoordinator
import CamRigDeviceModel
import CamRigSecurity
import CamRigStorage
import CamRigViews
import CamRigWire
import CamRigWireModel
import Foundation
import NIOConcurrencyHelpers

extension RigService {
    // MARK: Captures

    /// Starts a synchronized photo of every camera of the session; its progress is the returned job.
    public func startPhoto(_ request: PhotoRequest, by access: Access) throws -> CaptureJob {
        let settings = try Self.photoSettings(request)
        let session = try sessionForCapture()
        let job = try begin(.photo, access: access)
        let store = self.store
        let previews = self.previews
        submit(job) { service in
            // Previews pause for the photo: a camera that can be triggered exposes at the instant only
            // when it is not already streaming for someone's preview.
            await previews.pause()
            defer { previews.resume() }
            await service.progress(job.id, 0.1, "firing every camera at one instant")
            return try await session.capturePhoto(into: store, settings: settings)
        }
        return job
    }

    /// The photo settings `request` asks for, or why they cannot be had.
    static func photoSettings(_ request: PhotoRequest) throws -> WirePhotoSettings {
        var settings = WirePhotoSettings()
        switch request.quality ?? "balanced" {
        case "speed": settings.qualityPrioritization = .speed
        case "balanced": settings.qualityPrioritization = .balanced
        case "quality": settings.qualityPrioritization = .quality
        case let other: throw ServiceError(.badRequest, "quality '\(other)' is not one of speed, balanced, quality")
        }
        switch request.output ?? "frame" {
        case "frame": settings.outputType = .frame
        case "jpeg": settings.outputType = .jpeg
        case "dng": settings.outputType = .dng
        case let other: throw ServiceError(.badRequest, "output '\(other)' is not one of frame, jpeg, dng")
        }
        if let bracket = request.bracket {
            guard bracket.count <= 16, bracket.allSatisfy({ (-8...8).contains($0) }) else {
                throw ServiceError(.badRequest, "bracket takes at most 16 biases within -8…8 EV")
            }
            settings.bracketExposureBiases = bracket
        }
        settings.uniqueID = UInt64.random(in: 1...UInt64.max)
        return settings
    }

    /// What a recording request asks for, or why it cannot be had.
    static func recording(_ request: RecordRequest) throws -> (rate: FrameDuration?, dimensions: Dimensions?) {
        guard request.duration > 0, request.duration <= 600 else { throw ServiceError(.badRequest, "duration must be within (0, 600] seconds") }
        if let codec = request.codec {
            guard RecordingCodec(rawValue: codec) != nil else {
                throw ServiceError(.badRequest, "codec '\(codec)' is not one of \(RecordingCodec.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            guard request.stream != true else { throw ServiceError(.badRequest, "codec is for on-host recordings, not streamed ones") }
        }
        var rate: FrameDuration?
        if let fps = request.fps {
            guard fps >= 1, fps <= 240, fps == fps.rounded() else { throw ServiceError(.badRequest, "fps must be a whole number within 1…240") }
            rate = FrameDuration(framesPerSecond: UInt32(fps))
        }
        var dimensions: Dimensions?
        if let size = request.size {
            let parts = size.lowercased().split(separator: "x", omittingEmptySubsequences: false)
            guard parts.count == 2, let width = DeviceSettingsParser.positive(parts[0]), let height = DeviceSettingsParser.positive(parts[1]) else {
                throw ServiceError(.badRequest, "size '\(size)' is not WxH, e.g. 640x480")
            }
            dimensions = Dimensions(width: width, height: height)
        }
        return (rate, dimensions)
    }

    /// Starts a synchronized recording of every camera of the session (at `fps` and `size` when given).
    public func startRecording(_ request: RecordRequest, by access: Access) async throws -> CaptureJob {
        let (rate, dimensions) = try Self.recording(request)
        let session = try sessionForCapture()
        if let dimensions {
            // A size a camera has no format of would fail the recording once started: refused now.
            let lacking = await session.inputs.filter { input in !input.formats.contains { $0.dimensions == dimensions } }
            if let first = lacking.first {
                let sizes = Set(first.formats.map { "\($0.dimensions.width)x\($0.dimensions.height)" }).sorted()
                throw ServiceError(
                    .conflict, agent: first.agentID, device: first.name,
                    "size \(dimensions.width)x\(dimensions.height) is not a format of " + lacking.map(\.name).joined(separator: ", ")
                        + " (\(first.name) has \(sizes.joined(separator: ", ")))")
            }
        }
        let job = try begin(.recording, access: access)
        let store = self.store
        let duration = Duration.milliseconds(Int64(request.duration * 1000))
        let lockPhase = configuration.phaseLock
        let previews = self.previews
        var hostOptions = HostRecordingOptions()
        hostOptions.codec = request.codec.flatMap(RecordingCodec.init(rawValue:)) ?? .auto
        let options = hostOptions
        let onHosts = request.stream != true
        submit(job) { service in
            if rate != nil || dimensions != nil {
                await service.progress(job.id, 0.02, "configuring every camera")
                try await service.reconfigure(session, quiesce: true) {
                    await session.beginConfiguration()
                    // A size asked for picks each camera's format; a rate alone keeps their formats.
                    await session.setPreset(dimensions == nil ? .inputPriority : .high)
                    await session.setFrameRate(.init(dimensions: dimensions, frameDuration: rate))
                    try await session.commitConfiguration()
                }
                if lockPhase { _ = await session.waitForPhaseLock(timeout: .seconds(5)) }
            }
            // Previews pause until the cameras record (the first progress): cameras that start on
            // command then start on the recording's instant, on every host alike, and the previews join
            // the streams being recorded.
            await previews.pause()
            let resume = Self.once { previews.resume() }
            defer { resume() }
            // Progress reaches the job table in the order the recording reports it: one consumer, the
            // newest report waiting at most.
            let (reports, reporter) = AsyncStream.makeStream(of: (Double, String).self, bufferingPolicy: .bufferingNewest(1))
            async let reported: Void = {
                for await (fraction, message) in reports { await service.progress(job.id, fraction, message) }
            }()
            defer { reporter.finish() }
            let report =
                if onHosts {
                    try await session.recordOnHosts(duration: duration, options: options, into: store) { progress in
                        if progress.framesPerCamera.contains(where: { $0 > 0 }) { resume() }
                        reporter.yield(Self.describe(progress, onHosts: true))
                    }
                } else {
                    try await session.record(duration: duration, into: store) { progress in
                        if progress.elapsed > .zero { resume() }
                        reporter.yield(Self.describe(progress, onHosts: false))
                    }
                }
            reporter.finish()
            await reported
            return report
        }
        return job
    }

    /// A recording's progress as the job shows it: the fraction done and a line of text.
    static func describe(_ progress: RecordingProgress, onHosts: Bool) -> (Double, String) {
        if progress.offloadTotalBytes > 0 {
            let fraction = Double(progress.offloadedBytes) / Double(progress.offloadTotalBytes)
            return (0.6 + 0.38 * fraction, String(format: "offloading %.1f of %.1f MB", Double(progress.offloadedBytes) / 1e6, Double(progress.offloadTotalBytes) / 1e6))
        }
        let (seconds, total) = (progress.elapsed.seconds, progress.duration.seconds)
        let fraction = total > 0 ? min(1, seconds / total) : 0
        guard onHosts else { return (0.05 + 0.9 * fraction, String(format: "recording %.1f of %.1f s, %d sets", seconds, total, progress.sets)) }
        let frames = progress.framesPerCamera.map(String.init).joined(separator: "/")
        return (0.05 + 0.55 * fraction, String(format: "recording on the hosts %.1f of %.1f s, frames %@", seconds, total, frames))
    }

    /// `action`, to be called any number of times and carried out the first time only.
    static func once(_ action: @escaping @Sendable () -> Void) -> @Sendable () -> Void {
        let done = NIOLockedValueBox(false)
        return { if done.withLockedValue({ value in defer { value = true }; return !value }) { action() } }
    }

    func sessionForCapture() throws -> RigSession {
        if let activity = supervisor.activity { throw ServiceError(.conflict, "\(activity) is under way; start the capture when it has finished") }
        guard let session else {
            throw ServiceError(.unavailable, "no session: " + (supervisor.sessionError ?? "no camera is connected yet"))
        }
        return session
    }

    func begin(_ kind: JobKind, access: Access) throws -> CaptureJob {
        let id = "job-" + String(UInt64.random(in: 0...UInt64.max), radix: 36)
        if let refusal = supervisor.begin(.capturing(job: id, kind: kind)) {
            throw ServiceError(.conflict, "\(refusal); start the capture when it has finished")
        }
        let (job, event) = jobTable.start(id: id, kind: kind, by: access.name, at: Date())
        events.publish(event)
        return job
    }

    /// Runs `capture` as a job of `jobs`, and records its end.
    func submit(_ job: CaptureJob, _ capture: @escaping @Sendable (RigService) async throws -> CaptureReport) {
        let submitted = jobs.submit { [self] in
            let start = ContinuousClock.now
            do {
                let report = try await capture(self)
                await self.finish(job.id, report: report, elapsed: ContinuousClock.now - start)
            } catch {
                await self.fail(job.id, error: error, elapsed: ContinuousClock.now - start)
            }
        }
        if !submitted { fail(job.id, error: ServiceError(.unavailable, "the service is stopping"), elapsed: .zero) }
    }

    func progress(_ id: String, _ fraction: Double, _ message: String) {
        if let event = jobTable.progress(id, fraction: fraction, message: message) { events.publish(event) }
    }

    func finish(_ id: String, report: CaptureReport, elapsed: Duration) {
        guard let job = jobTable.job(id) else { return }
        let summary = CaptureOutput(report.manifest, directory: report.directory.captureLocation)
        supervisor.end(.capturing(job: id, kind: job.kind))
        for camera in summary.cameras { droppedFrames[camera.camera, default: 0] += camera.droppedFrames }
        metrics.captureEnded(job.kind, finished: true, seconds: elapsed.seconds)
        if let event = jobTable.finish(id, summary: summary, contactSheet: report.manifest.contactSheet, at: Date()) { events.publish(event) }
    }

    func fail(_ id: String, error: any Error, elapsed: Duration) {
        guard let job = jobTable.job(id) else { return }
        supervisor.end(.capturing(job: id, kind: job.kind))
        metrics.captureEnded(job.kind, finished: false, seconds: elapsed.seconds)
        if let event = jobTable.fail(id, reason: Self.message(error), at: Date()) { events.publish(event) }
    }
}
