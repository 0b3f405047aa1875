import CamRigDevices
import CamRigStorage
import CamRigWire
import CamRigWireModel
import Foundation
import NIOConcurrencyHelpers
import NIOCore

/// What a finished capture produced: its manifest (also written as `manifest.json`) and where.
public struct CaptureReport: Sendable {
    public var manifest: CaptureManifest
    public var directory: URL
    /// How long the phases took (photos only): every agent's trigger accepted, counted from the first
    /// trigger sent; and the sync set on disk, counted from the trigger instant T.
    public var triggerFanOut: Duration?
    public var gatheredAfterTrigger: Duration?
}

/// Progress of a recording, reported about twice a second.
public struct RecordingProgress: Sendable {
    public var elapsed: Duration
    public var duration: Duration
    public var framesPerCamera: [Int]
    public var sets: Int
    /// After the recording: image files written so far, of how many.
    public var imagesWritten = 0
    public var imagesTotal = 0
}

/// A frame on its way into a sync set.
struct PendingFrame: Sendable {
    var agentTimestamp: Int64
    var marks: String
    var rawFile: URL
    var pixelFormat: PixelFormat
    var dimensions: Dimensions
    var bytesPerLine: Int
    var lateness: Int64?
}

extension RigSession {
    /// The lead before a trigger instant: enough for the slowest agent's round trip, several times over,
    /// plus a margin for scheduling on the coordinator.
    nonisolated static func triggerLead(for inputs: [RigDevice]) -> Duration {
        let worst = inputs.flatMap(\.agent.recentRoundTrips).max() ?? 1_000_000
        return .nanoseconds(max(50_000_000, 4 * worst + 40_000_000))
    }

    /// Per input: its agent's clock estimate, or an error naming the agent.
    private func clockEstimates() throws -> [ClockEstimate] {
        try inputs.map { try $0.agent.clockEstimate() }
    }

    private func cameraEntries(_ estimates: [ClockEstimate], formats: [WireFormat?]) -> [CaptureManifest.Camera] {
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

    private func ensureInputs() throws {
        guard !inputs.isEmpty else {
            throw CommitError(description: "the session has no cameras; add inputs first (see `camrig devices`)", failures: [], rollbackFailures: [])
        }
    }

    // MARK: Photo

    /// Fires every camera at one coordinator instant T and gathers one photo per camera into a sync set.
    ///
    /// Each agent receives T converted to its own clock and fires at it; each result carries its
    /// timestamp in the coordinator's clock, its uncertainty and how late the agent fired. Results are
    /// acknowledged (and so deleted from the agents' spools) only once written to disk.
    public func capturePhoto(into store: CaptureStore, settings: WirePhotoSettings = WirePhotoSettings()) async throws -> CaptureReport {
        try ensureInputs()
        let inputs = self.inputs
        let sessionID = id
        let byAgent = Dictionary(grouping: inputs.indices, by: { inputs[$0].agentID })
        let lead = Self.triggerLead(for: inputs)
        let triggerID = "photo-" + String(UInt64.random(in: 0...UInt64.max), radix: 36)
        let sentAt = MonotonicClock.now()
        let fireAt = sentAt + lead.nanosecondsValue
        let lastScheduled = NIOLockedValueBox<Int64?>(nil)

        // Fire: one trigger per agent naming its cameras.
        let fired = await withTaskGroup(of: (String, Result<WireTriggerFired, any Error>).self) { group in
            for (agentID, indices) in byAgent {
                group.addTask {
                    let agent = inputs[indices[0]].agent
                    do {
                        let estimate = try agent.clockEstimate()
                        var trigger = WireScheduleTrigger()
                        trigger.triggerID = triggerID
                        trigger.action = .capturePhoto
                        trigger.deviceIds = indices.map { inputs[$0].deviceID }
                        trigger.fireAtNs = estimate.agentTime(atCoordinator: fireAt)
                        trigger.sessionID = sessionID
                        trigger.photoSettings = settings
                        for try await frame in try agent.client().stream(.scheduleTrigger(trigger)) {
                            if case .triggerScheduled = frame.envelope.body {
                                let now = MonotonicClock.now()
                                lastScheduled.withLockedValue { $0 = max($0 ?? now, now) }
                            }
                            if case .triggerFired(let fired) = frame.envelope.body { return (agentID, .success(fired)) }
                        }
                        throw AgentClientError(.connectionClosed, agent: agentID, "trigger \(triggerID) ended without firing")
                    } catch {
                        return (agentID, .failure(error))
                    }
                }
            }
            var results: [String: Result<WireTriggerFired, any Error>] = [:]
            for await (agent, result) in group { results[agent] = result }
            return results
        }

        let (captureID, directory) = try store.makeCaptureDirectory(kind: "photo")
        let estimates = try clockEstimates()
        var frames: [CaptureManifest.Frame?] = Array(repeating: nil, count: inputs.count)
        var failures: [String] = []
        var cameraFailures: [String: String] = [:]
        for (agentID, indices) in byAgent.sorted(by: { $0.key < $1.key }) {
            guard case .success(let firing) = fired[agentID] else {
                if case .failure(let error) = fired[agentID] {
                    failures.append("agent \(agentID): \(Self.message(error))")
                    cameraFailures[agentID] = "trigger failed: \(Self.message(error))"
                }
                continue
            }
            let agent = inputs[indices[0]].agent
            do {
                var fetch = WireFetchResults()
                fetch.sessionID = sessionID
                var stored: [String] = []
                for try await frame in try agent.client().stream(.fetchResults(fetch)) {
                    guard case .photoResult(let result) = frame.envelope.body, result.triggerID == triggerID,
                        let index = indices.first(where: { inputs[$0].deviceID == result.deviceID }), var payload = frame.payload
                    else { continue }
                    let estimate = estimates[index]
                    let captured = result.captureTime.nanoseconds
                    let onCoordinator = estimate.coordinatorTime(atAgent: captured)
                    let file = try payload.withUnsafeReadableBytes { bytes in
                        try CaptureStore.writeFrame(
                            bytes,
                            pixelFormat: PixelFormat(rawValue: result.pixelFormat),
                            dimensions: result.dimensions.dimensions,
                            bytesPerLine: Int(result.bytesPerLine),
                            named: "cam\(index)-\(Self.fileSafe(inputs[index].name))",
                            in: directory
                        )
                    }
                    payload.moveReaderIndex(to: payload.writerIndex)
                    frames[index] = CaptureManifest.Frame(
                        camera: index,
                        sequence: result.sequence,
                        file: file,
                        timestampNs: onCoordinator,
                        agentTimestampNs: captured,
                        marks: Self.marksName(result.captureTime.marks),
                        uncertaintyNs: Int64(estimate.errorBound(atCoordinator: onCoordinator)) + Int64(clamping: result.captureTime.uncertaintyNs),
                        latenessNs: firing.latenessNs
                    )
                    stored.append(result.resultID)
                }
                if !stored.isEmpty {
                    var acknowledge = WireAcknowledgeResults()
                    acknowledge.resultIds = stored
                    _ = try await agent.client().request(.acknowledgeResults(acknowledge))
                }
            } catch {
                failures.append("agent \(agentID): \(Self.message(error)) (its results stay in its spool)")
                cameraFailures[agentID] = "results not fetched: \(Self.message(error)); they stay in the agent's spool"
            }
        }

        let present = frames.compactMap { $0 }
        let times = present.map(\.timestampNs)
        let set = CaptureManifest.SyncSet(
            index: 0,
            complete: present.count == inputs.count,
            referenceTimeNs: fireAt,
            skewNs: (times.max() ?? 0) - (times.min() ?? 0),
            missingCameras: inputs.indices.filter { frames[$0] == nil },
            frames: present
        )
        var cameras = cameraEntries(estimates, formats: Array(repeating: nil, count: inputs.count))
        for index in cameras.indices {
            cameras[index].framesDelivered = frames[index] == nil ? 0 : 1
            if frames[index] == nil { cameras[index].error = cameraFailures[inputs[index].agentID] ?? "no photo in the agent's results" }
        }
        let manifest = CaptureManifest(
            id: captureID,
            kind: "photo",
            created: Self.timestamp(),
            sessionId: sessionID,
            cameras: cameras,
            sets: [set],
            unmatched: [],
            summary: CaptureManifest.Summary(sets: [set], framesDelivered: present.count, droppedFrames: 0, unmatchedFrames: 0)
        )
        try store.finish(manifest, in: directory)
        if !failures.isEmpty && present.isEmpty {
            throw CommitError(description: "no camera delivered a photo:\n" + failures.map { "  \($0)" }.joined(separator: "\n"), failures: [], rollbackFailures: [])
        }
        return CaptureReport(
            manifest: manifest,
            directory: directory,
            triggerFanOut: lastScheduled.withLockedValue { $0 }.map { .nanoseconds($0 - sentAt) },
            gatheredAfterTrigger: .nanoseconds(MonotonicClock.now() - fireAt)
        )
    }

    // MARK: Recording

    /// Starts every camera at one instant T, records for `duration`, and matches the frames into sync
    /// sets. Incomplete sets, drops and unmatched frames are reported per camera, never discarded.
    public func record(
        duration: Duration,
        into store: CaptureStore,
        progress: (@Sendable (RecordingProgress) -> Void)? = nil
    ) async throws -> CaptureReport {
        try ensureInputs()
        guard let frameDuration = activeFrameDuration else {
            throw CommitError(description: "commit a configuration with one frame rate before recording", failures: [], rollbackFailures: [])
        }
        let inputs = self.inputs
        let sessionID = id
        let estimates = try clockEstimates()
        let (captureID, directory) = try store.makeCaptureDirectory(kind: "recording")
        let lead = Self.triggerLead(for: inputs)
        let fireAt = MonotonicClock.now() + lead.nanosecondsValue
        let stopAt = fireAt + duration.nanosecondsValue
        // Frames exposed from T on, up to the end: exposures on T's grid fall half a period clear of the cut.
        let lastExposure = stopAt - frameDuration.nanoseconds / 2
        // The last frame is read out a period after its exposure began: stop only once it is delivered
        // (frames after the end that slip through are counted, not recorded).
        let stopStreamsAt = stopAt + frameDuration.nanoseconds + 20_000_000
        let (events, sink) = AsyncStream.makeStream(of: StreamEvent.self)

        let streams = Task {
            await withTaskGroup(of: Void.self) { group in
                for index in inputs.indices {
                    group.addTask {
                        await Self.recordCamera(index, device: inputs[index], estimate: estimates[index], sessionID: sessionID, fireAt: fireAt, stopAt: stopStreamsAt, lastExposure: lastExposure, directory: directory, sink: sink)
                    }
                }
            }
            sink.finish()
        }

        // A set waits for a lagging camera up to a second (or four frame periods): frames from a busy
        // agent arrive late, and a set closed too early would turn them into unmatched frames.
        let period = frameDuration.nanoseconds
        var matcher = SyncSetMatcher<PendingFrame>(configuration: .init(cameraCount: inputs.count, framePeriod: period, closeAfter: max(4 * period, 1_000_000_000)))
        var sets: [SyncSet<PendingFrame>] = []
        var unmatched: [(SyncFrame<PendingFrame>, String)] = []
        var delivered = Array(repeating: 0, count: inputs.count)
        var dropped = Array(repeating: 0, count: inputs.count)
        var afterEnd = Array(repeating: 0, count: inputs.count)
        var failures: [Int: String] = [:]
        var lastProgress = ContinuousClock.now
        func take(_ outputs: [SyncMatcherOutput<PendingFrame>]) {
            for output in outputs {
                switch output {
                case .set(let set): sets.append(set)
                case .unmatched(let frame, let reason): unmatched.append((frame, reason))
                }
            }
        }
        for await event in events {
            switch event {
            case .frame(let frame):
                delivered[frame.camera] += 1
                take(matcher.add(frame))
            case .dropped(let camera, let count):
                dropped[camera] += count
            case .afterEnd(let camera):
                afterEnd[camera] += 1
            case .ended(let camera, let failure):
                if let failure { failures[camera] = failure }
                take(matcher.finish(camera: camera))
            }
            if let progress, ContinuousClock.now - lastProgress > .milliseconds(500) {
                lastProgress = ContinuousClock.now
                let elapsed = Duration.nanoseconds(max(0, MonotonicClock.now() - fireAt))
                progress(RecordingProgress(elapsed: min(elapsed, duration), duration: duration, framesPerCamera: delivered, sets: sets.count))
            }
        }
        await streams.value
        take(matcher.finishAll())

        // Frames were spilled raw while recording; now each becomes its image file, off the session's
        // actor (which keeps renewing leases) and on every core.
        let spilled = sets.flatMap(\.presentFrames).map(\.payload) + unmatched.map(\.0.payload)
        let (deliveredSoFar, setCount) = (delivered, sets.count)
        let files = await Self.convertSpilled(spilled, in: directory, progress: progress.map { report in
            { @Sendable (done: Int, total: Int) in report(RecordingProgress(elapsed: duration, duration: duration, framesPerCamera: deliveredSoFar, sets: setCount, imagesWritten: done, imagesTotal: total)) }
        })
        func entry(_ frame: SyncFrame<PendingFrame>, reason: String? = nil) -> CaptureManifest.Frame {
            CaptureManifest.Frame(
                camera: frame.camera,
                sequence: frame.sequence,
                file: files[frame.payload.rawFile] ?? String(frame.payload.rawFile.path.dropFirst(directory.path.count + 1)),
                timestampNs: frame.timestamp,
                agentTimestampNs: frame.payload.agentTimestamp,
                marks: frame.payload.marks,
                uncertaintyNs: frame.uncertainty,
                latenessNs: frame.payload.lateness,
                reason: reason
            )
        }
        let manifestSets = sets.enumerated().map { number, set in
            CaptureManifest.SyncSet(
                index: number,
                complete: set.isComplete,
                referenceTimeNs: set.referenceTime,
                skewNs: set.skew,
                missingCameras: set.missingCameras,
                frames: set.presentFrames.map { entry($0) }
            )
        }
        let manifestUnmatched = unmatched.map { entry($0.0, reason: $0.1) }
        var cameras = cameraEntries(estimates, formats: inputs.indices.map { activeFormats.indices.contains($0) ? activeFormats[$0] : nil })
        for index in cameras.indices {
            cameras[index].framesDelivered = delivered[index]
            cameras[index].framesDropped = dropped[index]
            cameras[index].framesUnmatched = manifestUnmatched.filter { $0.camera == index }.count
            cameras[index].error = failures[index]
            cameras[index].framesAfterEnd = afterEnd[index]
        }
        let manifest = CaptureManifest(
            id: captureID,
            kind: "recording",
            created: Self.timestamp(),
            sessionId: sessionID,
            framesPerSecond: frameDuration.frameRate,
            frameDuration: .init(numerator: frameDuration.numerator, denominator: frameDuration.denominator),
            cameras: cameras,
            sets: manifestSets,
            unmatched: manifestUnmatched,
            summary: CaptureManifest.Summary(
                sets: manifestSets,
                framesDelivered: delivered.reduce(0, +),
                droppedFrames: dropped.reduce(0, +),
                unmatchedFrames: manifestUnmatched.count
            )
        )
        try store.finish(manifest, in: directory)
        if delivered.allSatisfy({ $0 == 0 }) {
            throw CommitError(description: "no camera delivered a frame:\n" + failures.sorted { $0.key < $1.key }.map { "  \(inputs[$0.key].name): \($0.value)" }.joined(separator: "\n"), failures: [], rollbackFailures: [])
        }
        return CaptureReport(manifest: manifest, directory: directory, triggerFanOut: nil, gatheredAfterTrigger: nil)
    }

    /// Turns spilled raw frames into image files (PNG for raw formats); returns each raw file's
    /// replacement, relative to `directory`. A frame that cannot be converted keeps its raw file.
    private nonisolated static func convertSpilled(
        _ frames: [PendingFrame],
        in directory: URL,
        progress: (@Sendable (Int, Int) -> Void)?
    ) async -> [URL: String] {
        let width = max(1, ProcessInfo.processInfo.activeProcessorCount)
        var files: [URL: String] = [:]
        var next = 0
        await withTaskGroup(of: (URL, String?).self) { group in
            func submit() {
                guard next < frames.count else { return }
                let frame = frames[next]
                next += 1
                group.addTask {
                    guard let data = try? Data(contentsOf: frame.rawFile) else { return (frame.rawFile, nil) }
                    let stem = String(frame.rawFile.deletingPathExtension().path.dropFirst(directory.path.count + 1))
                    let written = try? data.withUnsafeBytes { bytes in
                        try CaptureStore.writeFrame(bytes, pixelFormat: frame.pixelFormat, dimensions: frame.dimensions, bytesPerLine: frame.bytesPerLine, named: stem, in: directory)
                    }
                    if written != nil { try? FileManager.default.removeItem(at: frame.rawFile) }
                    return (frame.rawFile, written)
                }
            }
            for _ in 0..<width { submit() }
            var done = 0
            for await (raw, written) in group {
                if let written { files[raw] = written }
                done += 1
                if done % 16 == 0 || done == frames.count { progress?(done, frames.count) }
                submit()
            }
        }
        return files
    }

    enum StreamEvent: Sendable {
        case frame(SyncFrame<PendingFrame>)
        case dropped(camera: Int, count: Int)
        /// A frame exposed after the recording's end: counted, not recorded.
        case afterEnd(camera: Int)
        case ended(camera: Int, failure: String?)
    }

    /// One camera's part of a recording: a START_STREAM trigger at T, frames spilled to disk as they
    /// come, StopStream at the end, drops counted from sequence gaps and the agent's reports.
    private static func recordCamera(
        _ camera: Int,
        device: RigDevice,
        estimate: ClockEstimate,
        sessionID: String,
        fireAt: Int64,
        stopAt: Int64,
        lastExposure: Int64,
        directory: URL,
        sink: AsyncStream<StreamEvent>.Continuation
    ) async {
        let folder = directory.appendingPathComponent("cam\(camera)-\(fileSafe(device.name))")
        var lastSequence: UInt64?
        var droppedReported: UInt64 = 0
        var stopper: Task<Void, Never>?
        defer { stopper?.cancel() }
        do {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            let client = try device.agent.client()
            var trigger = WireScheduleTrigger()
            trigger.triggerID = "rec-\(sessionID)-\(camera)"
            trigger.action = .startStream
            trigger.deviceIds = [device.deviceID]
            trigger.fireAtNs = estimate.agentTime(atCoordinator: fireAt)
            trigger.sessionID = sessionID
            for try await frame in client.stream(.scheduleTrigger(trigger)) {
                switch frame.envelope.body {
                case .streamStarted(let started):
                    let streamID = started.streamID
                    stopper = Task {
                        let wait = stopAt - MonotonicClock.now()
                        if wait > 0 { try? await Task.sleep(for: .nanoseconds(wait)) }
                        guard !Task.isCancelled else { return }
                        var stop = WireStopStream()
                        stop.streamID = streamID
                        _ = try? await client.request(.stopStream(stop))
                    }
                case .videoFrame(let video):
                    guard let payload = frame.payload else { continue }
                    if let last = lastSequence, video.sequence > last + 1 + video.droppedBefore {
                        // Frames the camera itself never produced.
                        sink.yield(.dropped(camera: camera, count: Int(video.sequence - last - 1 - video.droppedBefore)))
                    }
                    if video.droppedBefore > 0 { sink.yield(.dropped(camera: camera, count: Int(video.droppedBefore))) }
                    droppedReported += video.droppedBefore
                    lastSequence = video.sequence
                    let agentTime = video.timestamp.nanoseconds
                    let onCoordinator = estimate.coordinatorTime(atAgent: agentTime)
                    if onCoordinator >= lastExposure {
                        // Exposed after the recording's end (the stop takes a moment to reach the agent).
                        sink.yield(.afterEnd(camera: camera))
                        continue
                    }
                    let file = folder.appendingPathComponent(String(format: "%06llu.raw", video.sequence))
                    try payload.withUnsafeReadableBytes { bytes in try spill(bytes, to: file) }
                    sink.yield(.frame(SyncFrame(
                        camera: camera,
                        sequence: video.sequence,
                        timestamp: onCoordinator,
                        uncertainty: Int64(estimate.errorBound(atCoordinator: onCoordinator)) + Int64(clamping: video.timestamp.uncertaintyNs),
                        payload: PendingFrame(
                            agentTimestamp: agentTime,
                            marks: marksName(video.timestamp.marks),
                            rawFile: file,
                            pixelFormat: PixelFormat(rawValue: video.pixelFormat),
                            dimensions: video.dimensions.dimensions,
                            bytesPerLine: Int(video.bytesPerLine),
                            lateness: nil
                        )
                    )))
                case .streamEnded(let ended):
                    if ended.framesDropped > droppedReported {
                        sink.yield(.dropped(camera: camera, count: Int(ended.framesDropped - droppedReported)))
                    }
                    let failure = ended.reason == .stopped ? nil : "stream ended early (\(ended.reason)): \(ended.message)"
                    sink.yield(.ended(camera: camera, failure: failure))
                    return
                default:
                    continue
                }
            }
            sink.yield(.ended(camera: camera, failure: "the stream closed without StreamEnded"))
        } catch {
            sink.yield(.ended(camera: camera, failure: message(error)))
        }
    }

    /// Writes a frame's bytes straight from the receive buffer (no copy on the way to the kernel).
    private static func spill(_ bytes: UnsafeRawBufferPointer, to file: URL) throws {
        let fd = open(file.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw StorageError("cannot create \(file.path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var offset = 0
        while offset < bytes.count {
            let written = write(fd, bytes.baseAddress! + offset, bytes.count - offset)
            if written < 0 {
                if errno == EINTR { continue }
                throw StorageError("cannot write \(file.path): \(String(cString: strerror(errno)))")
            }
            offset += written
        }
    }

    nonisolated static func marksName(_ marks: WireTimestampMarks) -> String {
        switch marks {
        case .startOfExposure: "start_of_exposure"
        case .endOfFrame: "end_of_frame"
        case .dequeue: "dequeue"
        case .triggerFire: "trigger_fire"
        default: "unspecified"
        }
    }

    nonisolated static func fileSafe(_ name: String) -> String {
        String(name.map { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" || $0 == "." ? $0 : "_" })
    }

    nonisolated static func timestamp() -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: Date())
    }
}

extension Duration {
    /// The duration in whole nanoseconds.
    var nanosecondsValue: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
