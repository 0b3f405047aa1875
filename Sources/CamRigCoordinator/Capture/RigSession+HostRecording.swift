import CamRigCapture
import CamRigClock
import CamRigDeviceModel
import CamRigWire
import CamRigWireModel
import Foundation
import Logging
import NIOConcurrencyHelpers

/// How an on-host recording stores each camera's frames.
public enum RecordingCodec: String, Sendable, CaseIterable, Codable {
    /// The camera's compressed frames as they are where it delivers them, MJPEG made on the host
    /// otherwise (lossless FFV1 for Bayer mosaics).
    case auto
    case copy, mjpeg, ffv1, h264, raw

    var wire: WireRecordingCodec {
        switch self {
        case .auto: .unspecified
        case .copy: .copy
        case .mjpeg: .mjpeg
        case .ffv1: .ffv1
        case .h264: .h264
        case .raw: .raw
        }
    }
}

/// What an on-host recording is asked to do besides its duration.
public struct HostRecordingOptions: Sendable {
    public var codec: RecordingCodec = .auto
    /// For codecs that make JPEGs: 1…100.
    public var jpegQuality = 90
    /// A new file after this many bytes (0: the agent's default, 4 GiB)…
    public var segmentBytes: UInt64 = 0
    /// …or after this long (nil: no limit by length).
    public var segmentDuration: Duration?
    /// Offload the files as soon as the recording ends (otherwise `camrig captures offload` does).
    public var offload = true
    /// Per agent, while offloading; 0: as fast as the link goes.
    public var offloadBytesPerSecond: UInt64 = 0

    public init() {}
}

extension RigSession {
    /// Records every camera on its own host, into one video file per camera, from one grid instant T to
    /// another, then offloads the files into `sink` (unless told not to) and builds the sync sets from
    /// their frame tables.
    ///
    /// Before anything starts, every agent checks that its cameras can record with the codec and that
    /// its disk holds the recording: one that cannot refuses the whole recording, naming the host.
    /// While recording only progress crosses the network. The files stay on their hosts until they are
    /// here and checked: a coordinator that stops during the recording or the offload loses nothing
    /// (`camrig captures recover` or `offload` finishes it).
    public func recordOnHosts(
        duration: Duration,
        options: HostRecordingOptions = HostRecordingOptions(),
        into sink: some CaptureSink,
        progress: (@Sendable (RecordingProgress) -> Void)? = nil
    ) async throws -> CaptureReport {
        let rig = try captureRig(formats: inputs.indices.map { activeFormats.indices.contains($0) ? activeFormats[$0] : nil })
        guard let frameDuration = activeFrameDuration else {
            throw CommitError(description: "commit a configuration with one frame rate before recording", failures: [], rollbackFailures: [])
        }
        return try await Self.recordOnHosts(
            rig, frameDuration: frameDuration, duration: duration, options: options, into: sink, pool: pool, logger: logger, progress: progress)
    }

    private static func tracks(_ rig: CaptureRig, options: HostRecordingOptions) -> [String: [(camera: Int, track: WireRecordingTrack)]] {
        var byAgent: [String: [(Int, WireRecordingTrack)]] = [:]
        for camera in rig.inputs.indices {
            var track = WireRecordingTrack()
            track.deviceID = rig.inputs[camera].deviceID
            track.codec = options.codec.wire
            track.fileStem = rig.fileStem(camera: camera)
            track.jpegQuality = UInt32(clamping: options.jpegQuality)
            byAgent[rig.inputs[camera].agentID, default: []].append((camera, track))
        }
        return byAgent
    }

    private static func recordOnHosts(
        _ rig: CaptureRig, frameDuration: FrameDuration, duration: Duration, options: HostRecordingOptions, into sink: some CaptureSink,
        pool: AgentPool, logger: Logger, progress: (@Sendable (RecordingProgress) -> Void)?
    ) async throws -> CaptureReport {
        let estimates = try rig.clockEstimates()
        let byAgent = tracks(rig, options: options)
        // An agent serves one or more of the inputs: one entry each.
        let agentOf = Dictionary(rig.inputs.map { ($0.agentID, $0.agent) }, uniquingKeysWith: { first, _ in first })

        // Pre-flight: every host can record its cameras with the codec, and has the room.
        // Each check is timed: StartRecording repeats it before the agent starts its cameras.
        let checkDurations = NIOLockedValueBox<[Int64]>([])
        let checks = await withTaskGroup(of: (String, Result<WireRecordingCheck, any Error>).self) { group in
            for (agentID, tracks) in byAgent {
                group.addTask {
                    var check = WireCheckRecording()
                    check.tracks = tracks.map(\.track)
                    check.durationNs = duration.nanoseconds
                    do {
                        let asked = HostClock.monotonicNow()
                        let reply = try await agentOf[agentID]!.client().request(.checkRecording(check))
                        let took = HostClock.monotonicNow() - asked
                        checkDurations.withLockedValue { $0.append(took) }
                        guard case .recordingCheck(let answer) = reply.frame.envelope.body else {
                            throw AgentClientError(.protocolViolation, agent: agentID, "answered CheckRecording with \(reply.frame.envelope.messageName)")
                        }
                        return (agentID, .success(answer))
                    } catch {
                        return (agentID, .failure(error))
                    }
                }
            }
            var results: [String: Result<WireRecordingCheck, any Error>] = [:]
            for await (agent, result) in group { results[agent] = result }
            return results
        }
        var refusals: [String] = []
        var resolved: [String: WireRecordingCheck] = [:]
        for (agent, result) in checks.sorted(by: { $0.key < $1.key }) {
            switch result {
            case .success(let check) where check.refusal.isEmpty: resolved[agent] = check
            case .success(let check): refusals.append("  \(agent): \(check.refusal)")
            case .failure(let error): refusals.append("  \(agent): \(message(error))")
            }
        }
        guard refusals.isEmpty else {
            throw CommitError(description: "the recording cannot be made; nothing was started:\n" + refusals.joined(separator: "\n"), failures: [], rollbackFailures: [])
        }

        let period = Double(frameDuration.numerator) * 1e9 / Double(frameDuration.denominator)
        let count = max(1, Int((Double(duration.nanoseconds) / period).rounded()))
        // The cameras' phase locks as the recording starts, in the manifest before the agents are asked to
        // record: a coordinator killed at any point later leaves them for `captures recover`. Read before
        // the start is chosen, so the round trips do not eat into its lead.
        let phasesAtStart = await rig.phases()

        let capture = try await sink.begin(.recording)
        // Chosen once the capture exists, so that only the manifest's write and the request lie between
        // the choice and the agents (the allowance covers them).
        let start = HostRecordingStart(
            now: HostClock.monotonicNow(), triggerLead: CapturePlan.lead(roundTrips: rig.roundTrips, agents: byAgent.count, lastFanOut: rig.lastFanOut),
            checkDurations: checkDurations.withLockedValue { $0 }, tracksPerAgent: byAgent.values.map(\.count).max() ?? 1, framePeriod: period,
            grid: rig.grid
        ).startAt
        let recordingID = "\(capture.id)"
        var manifest = rig.manifestBuilder(for: capture, estimates: estimates).recording(
            frameDuration: frameDuration, sets: [], unmatched: [], streams: [])
        manifest.state = .inProgress
        manifest.hostRecording = CaptureManifest.HostRecording(
            recordingId: recordingID, startNs: start, gridPeriodNs: period, gridCount: count,
            tracks: rig.inputs.indices.map { camera in
                let codec = resolved[rig.inputs[camera].agentID]?.tracks.first { $0.deviceID == rig.inputs[camera].deviceID }?.codec
                return CaptureManifest.HostRecording.Track(
                    camera: camera, agent: rig.inputs[camera].agentID, device: rig.inputs[camera].deviceID, stem: rig.fileStem(camera: camera),
                    codec: (codec ?? options.codec.wire).name, state: .unknown)
            })
        manifest.record(phases: phasesAtStart)
        do {
            try await sink.started(manifest, in: capture)
        } catch {
            await sink.abandon(capture)
            throw error
        }

        // Every agent records from T on its own clock; progress comes back on each one's request.
        let tally = HostRecordingTally(cameras: rig.inputs.count)
        let ended = await withTaskGroup(of: (String, Result<WireRecordingEnded, any Error>).self) { group in
            for (agentID, tracks) in byAgent {
                let estimate = estimates[tracks[0].camera]
                var request = WireStartRecording()
                request.recordingID = recordingID
                request.sessionID = rig.sessionID
                request.tracks = tracks.map(\.track)
                request.startAtNs = estimate.agentTime(atCoordinator: start)
                // The grid period on the agent's clock, which runs at its own rate.
                request.gridPeriodNs = period * (1 + estimate.driftPPM * 1e-6)
                request.frameCount = UInt64(count)
                request.frameDuration = WireRational(frameDuration)
                request.segmentBytes = options.segmentBytes
                if let length = options.segmentDuration {
                    request.segmentFrames = UInt64(max(1, (Double(length.nanoseconds) / period).rounded()))
                }
                request.progressIntervalMs = 500
                var clock = WireClockMapping()
                clock.rigReferenceNs = start
                clock.agentReferenceNs = request.startAtNs
                clock.rigPerAgent = 1 / (1 + estimate.driftPPM * 1e-6)
                clock.uncertaintyNs = estimate.errorBound(atCoordinator: start)
                clock.uncertaintyGrowthPpm = estimate.driftUncertaintyPPM
                request.clock = clock
                let cameraOf = Dictionary(uniqueKeysWithValues: tracks.map { ($0.track.deviceID, $0.camera) })
                group.addTask {
                    do {
                        for try await frame in try agentOf[agentID]!.client().stream(.startRecording(request)) {
                            switch frame.envelope.body {
                            case .recordingProgress(let report):
                                for track in report.tracks {
                                    if let camera = cameraOf[track.deviceID] { tally.update(camera: camera, frames: Int(track.frames)) }
                                }
                                if let progress {
                                    let elapsed = Duration.nanoseconds(max(0, HostClock.monotonicNow() - start))
                                    progress(RecordingProgress(elapsed: min(elapsed, duration), duration: duration, framesPerCamera: tally.frames, sets: 0))
                                }
                            case .recordingEnded(let ended):
                                return (agentID, .success(ended))
                            default:
                                continue
                            }
                        }
                        throw AgentClientError(.connectionClosed, agent: agentID, "the recording's answers ended without RecordingEnded")
                    } catch {
                        return (agentID, .failure(error))
                    }
                }
            }
            var results: [String: Result<WireRecordingEnded, any Error>] = [:]
            for await (agent, result) in group { results[agent] = result }
            return results
        }
        var recording = manifest.hostRecording!
        for index in recording.tracks.indices {
            let track = recording.tracks[index]
            switch ended[track.agent] {
            case .success(let end)?:
                if let held = end.tracks.first(where: { $0.deviceID == track.device }) {
                    recording.tracks[index].update(from: held)
                } else {
                    recording.tracks[index].state = .failed
                    recording.tracks[index].error = "agent \(track.agent) ended the recording without this camera's track"
                }
            case .failure(let error as AgentClientError)? where error.kind == .remoteError:
                // The agent refused the recording: nothing was recorded there.
                recording.tracks[index].state = .failed
                recording.tracks[index].error = "agent \(track.agent) refused the recording: \(error.message)"
            case .failure(let error)?:
                // The agent may well have recorded: its files are asked for at the offload.
                recording.tracks[index].error = "the coordinator lost the recording's answers: \(message(error)); the host's files are fetched when it is reachable"
                logger.warning("lost touch with an agent during an on-host recording", metadata: ["agent": "\(track.agent)", "error": "\(message(error))"])
            case nil:
                break
            }
        }
        manifest.hostRecording = recording
        manifest.record(phases: await rig.phases())
        manifest.state = .offloading
        do {
            try await sink.finish(manifest, in: capture)
        } catch {
            await sink.abandon(capture)
            // The files are whole on their hosts, which keep them until an offload has recorded them.
            throw CommitError(
                description: "the recording \(capture.id) is made, but its manifest cannot be written to \(capture.location.captureLocation) "
                    + "(\(message(error))); its files stay on their hosts: run `camrig captures offload \(capture.id)` once the store is back",
                failures: [], rollbackFailures: [])
        }
        if options.offload {
            guard let claim = await sink.claim(capture) else {
                return CaptureReport(manifest: manifest, directory: capture.location)
            }
            defer { claim.release() }
            let offload = RecordingOffload(pool: pool, sink: sink, logger: logger, maxBytesPerSecond: options.offloadBytesPerSecond)
            let frames = tally.frames
            let outcome: OffloadOutcome
            (manifest, outcome) = await offload.offload(manifest, capture: capture) { done, total in
                progress?(
                    RecordingProgress(
                        elapsed: duration, duration: duration, framesPerCamera: frames, sets: 0, offloadedBytes: done, offloadTotalBytes: total))
            }
            if let failure = outcome.manifestError {
                // What is stored but not recorded stays on its host; the error says what to run.
                throw CommitError(description: "the recording \(capture.id) is made, but \(failure)", failures: [], rollbackFailures: [])
            }
        }
        let tracks = manifest.hostRecording?.tracks ?? recording.tracks
        if tracks.allSatisfy({ $0.frames == 0 && $0.state.hasEnded }) {
            let failures = tracks.map { "  \(rig.inputs[$0.camera].name): \($0.error ?? "no frame")" }
            throw CommitError(description: "no camera recorded a frame:\n" + failures.joined(separator: "\n"), failures: [], rollbackFailures: [])
        }
        return CaptureReport(manifest: manifest, directory: capture.location)
    }
}

/// Frames each camera has written so far, from the agents' progress reports.
final class HostRecordingTally: Sendable {
    private let counts: NIOLockedValueBox<[Int]>

    init(cameras: Int) { counts = NIOLockedValueBox(Array(repeating: 0, count: cameras)) }

    func update(camera: Int, frames: Int) { counts.withLockedValue { $0[camera] = frames } }
    var frames: [Int] { counts.withLockedValue { $0 } }
}
