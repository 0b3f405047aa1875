import CamRigCapture
import CamRigClock
import CamRigDeviceModel
import Foundation

extension RigSession {
    /// Starts every camera at one instant T, records for `duration`, and matches the frames into sync
    /// sets. Incomplete sets, drops and unmatched frames are reported per camera, never discarded.
    ///
    /// Frames are spilled to `sink` as they arrive and turned into image files after the recording, on
    /// every core. The recording runs off the session's actor, which keeps renewing leases.
    public func record(
        duration: Duration,
        into sink: some CaptureSink,
        progress: (@Sendable (RecordingProgress) -> Void)? = nil
    ) async throws -> CaptureReport {
        let rig = try captureRig(
            formats: inputs.indices.map { activeFormats.indices.contains($0) ? activeFormats[$0] : nil })
        guard let frameDuration = activeFrameDuration else {
            throw CommitError(
                description: "commit a configuration with one frame rate before recording", failures: [],
                rollbackFailures: [])
        }
        return try await Self.record(
            rig, frameDuration: frameDuration, duration: duration, into: sink, progress: progress)
    }

    private static func record(
        _ rig: CaptureRig,
        frameDuration: FrameDuration,
        duration: Duration,
        into sink: some CaptureSink,
        progress: (@Sendable (RecordingProgress) -> Void)?
    ) async throws -> CaptureReport {
        let estimates = try rig.clockEstimates()
        let capture = try await sink.begin(.recording)
        var started = rig.manifestBuilder(for: capture, estimates: estimates).recording(
            frameDuration: frameDuration, sets: [], unmatched: [], streams: [])
        started.state = .inProgress
        do {
            try await sink.started(started, in: capture)
        } catch {
            await sink.abandon(capture)
            throw error
        }
        let plan = CapturePlan.recording(
            at: HostClock.monotonicNow(), roundTrips: rig.roundTrips, agents: rig.camerasByAgent.count, lastFanOut: rig.lastFanOut, duration: duration, frameDuration: frameDuration, grid: rig.grid)
        guard let cutOffs = plan.recording else { preconditionFailure("a recording plan has cut-offs") }

        let (events, continuation) = AsyncStream.makeStream(of: RecordingEvent<PendingFrame>.self)
        async let streaming: Void = {
            await withTaskGroup(of: Void.self) { group in
                for camera in rig.inputs.indices {
                    let recorder = CameraRecorder(
                        camera: camera,
                        device: rig.inputs[camera],
                        estimate: estimates[camera],
                        sessionID: rig.sessionID,
                        fireAt: plan.fireAt,
                        cutOffs: cutOffs,
                        fileStem: rig.fileStem(camera: camera),
                        sink: sink,
                        capture: capture
                    )
                    group.addTask { await recorder.run(reporting: continuation) }
                }
            }
            continuation.finish()
        }()

        var tally = RecordingTally<PendingFrame>(
            cameraCount: rig.inputs.count, framePeriod: cutOffs.framePeriod, closeSetsAfter: cutOffs.closeSetsAfter, grid: rig.grid)
        var lastProgress = ContinuousClock.now
        for await event in events {
            tally.record(event)
            if let progress, ContinuousClock.now - lastProgress > .milliseconds(500) {
                lastProgress = ContinuousClock.now
                let elapsed = Duration.nanoseconds(max(0, HostClock.monotonicNow() - plan.fireAt))
                progress(
                    RecordingProgress(
                        elapsed: min(elapsed, duration), duration: duration, framesPerCamera: tally.delivered,
                        sets: tally.sets.count))
            }
        }
        await streaming
        let phases = await rig.phases()
        tally.finish(cutOffs, onGrid: rig.inputs.indices.map { camera in
            rig.grid != nil && phases.indices.contains(camera) && phases[camera].failure == nil && phases[camera].status.state == .locked
        })

        let (delivered, setCount) = (tally.delivered, tally.sets.count)
        let files = await convert(
            tally.payloads.map(\.spilled),
            sink: sink,
            capture: capture,
            progress: progress.map { report in
                { @Sendable done, total in
                    report(
                        RecordingProgress(
                            elapsed: duration, duration: duration, framesPerCamera: delivered, sets: setCount,
                            imagesWritten: done, imagesTotal: total))
                }
            }
        )
        let (sets, unmatched) = tally.mapPayloads { pending in
            StoredFrame(
                file: files[pending.spilled.file] ?? pending.spilled.file, agentTimestamp: pending.agentTimestamp,
                marks: pending.marks)
        }
        let builder = rig.manifestBuilder(for: capture, estimates: estimates)
        var manifest = builder.recording(
            frameDuration: frameDuration, grid: rig.grid, sets: sets, unmatched: unmatched, streams: tally.streams)
        manifest.record(phases: phases)
        // A recording's frames are streamed, never kept by the agents: nothing of it can be collected
        // later. It is incomplete when a set lacks a frame or a camera's stream fell short.
        manifest.missing = []
        let fellShort = manifest.summary.incompleteSets > 0 || manifest.summary.droppedFrames > 0
            || manifest.cameras.contains { $0.error != nil }
        manifest.state = fellShort ? .incomplete : .complete
        do {
            try await sink.finish(manifest, in: capture)
        } catch {
            await sink.abandon(capture)
            throw error
        }
        if delivered.allSatisfy({ $0 == 0 }) {
            let failures = tally.streams.indices.compactMap { camera in
                tally.streams[camera].failure.map { "  \(rig.inputs[camera].name): \($0)" }
            }
            throw CommitError(
                description: "no camera delivered a frame:\n" + failures.joined(separator: "\n"), failures: [],
                rollbackFailures: [])
        }
        return CaptureReport(manifest: manifest, directory: capture.location)
    }

    /// Turns spilled frames into image files, one per core at a time; returns each spilled file's
    /// image file. A frame that cannot be converted keeps its spilled file.
    private static func convert(
        _ frames: [SpilledFrame],
        sink: some CaptureSink,
        capture: CaptureHandle,
        progress: (@Sendable (Int, Int) -> Void)?
    ) async -> [String: String] {
        let width = max(1, ProcessInfo.processInfo.activeProcessorCount)
        var files: [String: String] = [:]
        await withTaskGroup(of: (String, String?).self) { group in
            var next = 0
            func submit() {
                guard next < frames.count else { return }
                let frame = frames[next]
                next += 1
                group.addTask { (frame.file, try? await sink.convert(frame, in: capture)) }
            }
            for _ in 0..<width { submit() }
            var done = 0
            for await (spilled, written) in group {
                if let written { files[spilled] = written }
                done += 1
                if done % 16 == 0 || done == frames.count { progress?(done, frames.count) }
                submit()
            }
        }
        return files
    }
}
