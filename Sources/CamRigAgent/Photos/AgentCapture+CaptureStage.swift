import CamRigDeviceModel
import CamRigDevices
import CamRigWire
import CamRigWireModel
import Foundation

/// The capture stage: which frames a photo is made from, taken when its device's pipeline lets it begin.
extension AgentCapture {
    /// A device's part of a photo between being prepared and being stored.
    struct PendingPhoto: Sendable {
        let deviceID: String
        let plan: PhotoPlan
        /// Whether the device was prepared with matching settings.
        let prepared: Bool
        /// Delivered as a proxy now, made in full later.
        let deferred: Bool
        let photoID: String
        /// An exposure bracket's biases (EV), one image each; empty for a single photo.
        let bracket: [Float]
        let pipeline: DevicePhotoPipeline
        let frames: Task<Captured, any Error>
    }

    /// A photo's capture stage's outcome: its frames (the reference first), how long it waited to begin and
    /// how long it took.
    struct Captured: Sendable {
        var frames: [CapturedFrame]
        var waited: Int64
        /// From the moment the stage began to the moment its frames were taken, both read from the agent's
        /// clock in that order, so never negative (the photo's `capture_duration_ns`).
        var duration: Int64
        /// How a bracket moved the exposure (`nil` when not bracketed).
        var bracketMethod: CaptureDevice.BracketMethod?
    }

    /// Starts each device's capture stage for a photo at instant `t`: it waits for the device's previous
    /// capture (`DevicePhotoPipeline`), then takes the frames the photo's quality prioritization says
    /// (starting the camera if needed): the frame exposed nearest `t` (speed), the first exposed from `t`
    /// on (balanced), or several (quality): on a prepared camera the frame nearest `t` and those the
    /// camera exposed just before it (zero shutter lag), otherwise frames from `t` on. For a free-running
    /// camera held on a grid, "from `t` on" starts half a grid period before `t`.
    func beginPhotos(
        _ devices: [String], at t: Int64, settings: WirePhotoSettings, triggerID: String, reply: @escaping @Sendable (WireEnvelope.OneOf_Body) -> Void
    ) -> [PendingPhoto] {
        devices.map { deviceID in
            let device = streams.devices.discovery.device(uniqueID: deviceID)
            let output = device?.photoOutput ?? PhotoOutputSettings()
            var plan = PhotoPlan(
                requested: PhotoQualityPrioritization(settings.qualityPrioritization), output: PhotoOutputType(settings.outputType),
                maxDimensions: settings.maxPhotoDimensions.dimensions, format: device?.activeFormat, output: output)
            let (previous, preparation) = state.withLockedValue { $0.requested(deviceID: deviceID, at: t) }
            if settings.fastCapturePrioritization, plan.level == .quality, let previous {
                let stage = Double(PhotoPlan.qualityFrames) * Self.framePeriod(nil, device)
                if Double(t - previous) < stage { plan.stepDown(since: t - previous) }
            }
            let bracket = Array(settings.bracketExposureBiases.prefix(Self.maxBracket))
            if !bracket.isEmpty { plan.bracket(count: bracket.count) }
            let pipeline = pipeline(for: deviceID)
            let deferred = output.deferredDelivery && plan.level == .quality
            let photoID = "\(agentID)-\(UUID().uuidString.lowercased())"
            let stages = StageReporter(
                enabled: settings.stageEvents, triggerID: triggerID, deviceID: deviceID, settingsID: settings.uniqueID, photoID: photoID, clock: clock,
                reply: reply)
            // Five seconds for the camera to start, plus the frames' own time at its slowest rate.
            let framesTime = Double(plan.frames) * (device?.activeMaxFrameDuration.seconds ?? 0)
            let timeout = Duration.seconds(5) + .milliseconds(Int64(framesTime * 1000))
            let announced = WireResolvedPhotoSettings(plan: plan, dimensions: plan.dimensions)
            let estimate = pipeline.estimate(level: plan.level)
            let task = Task { [plan] () throws -> Captured in
                stages.send(.willBeginCapture) {
                    $0.resolved = announced
                    $0.processingEstimateMinNs = estimate.min
                    $0.processingEstimateMaxNs = estimate.max
                }
                await pipeline.beginCapture(responsive: output.responsiveCapture)
                self.touch()
                let began = self.clock.now()
                // A capture that could not begin until after its instant takes its frames from when it began.
                let waited = began > t + 1_000_000 ? began - t : 0
                let instant = t + waited
                stages.send(.willCapture)
                do {
                    var method: CaptureDevice.BracketMethod?
                    let frames: [CapturedFrame]
                    if let device, !bracket.isEmpty {
                        (frames, method) = try await self.takeBracket(
                            deviceID: deviceID, device: device, biases: bracket, at: instant, after: pipeline.lastReference, timeout: timeout)
                    } else {
                        frames = try await self.takeFrames(
                            deviceID: deviceID, device: device, plan: plan, at: instant, after: pipeline.lastReference, preparation: preparation,
                            timeout: timeout)
                    }
                    // Not the frames' exposure starts: a frame may have started exposing before the stage
                    // began (zero shutter lag, a grid's frame for T exposed just before T).
                    let taken = self.clock.now()
                    pipeline.setLastReference(frames.map(\.exposureStart).max() ?? .min)
                    stages.send(.didCapture)
                    // Stamped before the capture stage is let go: the next photo's willCapture comes after it.
                    stages.send(.didFinishCapture)
                    pipeline.endCapture(processing: !deferred)
                    self.touch()
                    return Captured(frames: frames, waited: waited, duration: taken - began, bracketMethod: method)
                } catch {
                    pipeline.endCapture(processing: false)
                    throw error
                }
            }
            return PendingPhoto(
                deviceID: deviceID, plan: plan, prepared: preparation?.settings.contains { Self.matches(settings, $0) } ?? false, deferred: deferred,
                photoID: photoID, bracket: bracket, pipeline: pipeline, frames: task)
        }
    }

    /// The most images an exposure bracket takes.
    static let maxBracket = 16

    /// An exposure bracket's frames, one per bias: each the first frame exposed a frame period after its
    /// bias was applied (so the camera exposed it with that bias), the device's own exposure restored
    /// afterwards.
    func takeBracket(
        deviceID: String, device: CaptureDevice, biases: [Float], at instant: Int64, after: Int64, timeout: Duration
    ) async throws -> ([CapturedFrame], CaptureDevice.BracketMethod) {
        var frames: [CapturedFrame] = []
        var method = CaptureDevice.BracketMethod.none
        var previous = max(after, instant - 1)
        // The camera streams for the whole bracket: a camera started again would expose with its own settings.
        let keepAlive = NewestFrameSink { _ in }
        if case .failed(let error) = await streams.startAfterPreviousStream(deviceID: deviceID, subscriber: keepAlive) {
            throw WireProtocolError(error.code, error.message)
        }
        defer { streams.stop(streamID: keepAlive.streamID, reason: .stopped) }
        do {
            for bias in biases {
                method = try device.applyExposureBracket(bias: bias)
                let applied = clock.now()
                let period = Int64(Self.framePeriod(frames.last, device))
                let frame = try await streams.frames(deviceID: deviceID, selection: .from(max(applied + period, previous + 1), count: 1), timeout: timeout)[0]
                frames.append(frame)
                previous = frame.exposureStart
            }
        } catch let error as DeviceError {
            try? device.endExposureBracket()
            throw WireProtocolError(.internal, "\(deviceID) could not take its exposure bracket: \(error)")
        } catch {
            try? device.endExposureBracket()
            throw error
        }
        try? device.endExposureBracket()
        return (frames, method)
    }

    /// The frames a photo at `instant` is made from, the reference first. The reference is always exposed
    /// after the previous photo's (`after`): photos asked for faster than the camera's frame rate take
    /// successive frames rather than the same one twice.
    func takeFrames(
        deviceID: String, device: CaptureDevice?, plan: PhotoPlan, at instant: Int64, after: Int64, preparation: PreparedDevice?, timeout: Duration
    ) async throws -> [CapturedFrame] {
        let newest = preparation?.sink.newest
        let period = Self.framePeriod(newest, device)
        func nearest() async throws -> CapturedFrame {
            let candidate = try await streams.frames(deviceID: deviceID, selection: .nearest(instant, newest: newest, period: period), timeout: timeout)[0]
            guard candidate.exposureStart <= after else { return candidate }
            return try await streams.frames(deviceID: deviceID, selection: .from(after + 1, count: 1), timeout: timeout)[0]
        }
        switch plan.level {
        case .speed:
            return [try await nearest()]
        case .quality where preparation != nil:
            let reference = try await nearest()
            var frames = [reference] + preparation!.sink.recent(before: reference, count: plan.frames - 1)
            if frames.count < plan.frames {
                // A camera prepared moments ago has not exposed enough yet: the rest are its next frames.
                frames += try await streams.frames(
                    deviceID: deviceID, selection: .from(reference.exposureStart + 1, count: plan.frames - frames.count), timeout: timeout)
            }
            return frames
        case .balanced, .quality:
            let from = max(firstExposure(deviceID: deviceID, at: instant), after == .min ? .min : after + 1)
            return try await streams.frames(deviceID: deviceID, selection: .from(from, count: plan.frames), timeout: timeout)
        }
    }



    /// A camera's frame period in nanoseconds: as measured on its frames, or else its fastest configured rate's.
    static func framePeriod(_ frame: CapturedFrame?, _ device: CaptureDevice?) -> Double {
        if let measured = frame?.measuredFramePeriod, measured > 0 { return measured }
        return Double(device?.activeMinFrameDuration.nanoseconds ?? 0)
    }

    /// Whether a capture with `settings` matches settings a device was prepared with: the same quality
    /// prioritization, output type and size (a capture's unique id is always its own).
    static func matches(_ settings: WirePhotoSettings, _ prepared: WirePhotoSettings) -> Bool {
        settings.qualityPrioritization == prepared.qualityPrioritization && settings.outputType == prepared.outputType
            && settings.maxPhotoDimensions == prepared.maxPhotoDimensions
    }
}
