import CamRigCapture
import CamRigClock
import CamRigDeviceModel
import CamRigWire
import CamRigWireModel
import Foundation

/// A recording's frame spilled by the sink, waiting for its set and its image file.
struct PendingFrame: Sendable {
    var spilled: SpilledFrame
    var agentTimestamp: Int64
    var marks: String
}

/// One camera's part of a recording: a START_STREAM trigger at T, every frame handed to the sink as it
/// comes, `StopStream` at the plan's stop time, drops counted from sequence gaps and the agent's reports.
///
/// It consumes its stream only as fast as the sink spills, so a slow disk slows the stream (and the
/// agent drops frames with a count) instead of piling frames up in memory.
struct CameraRecorder<Sink: CaptureSink>: Sendable {
    var camera: Int
    var device: RigDevice
    var estimate: ClockEstimate
    var sessionID: String
    var fireAt: Int64
    var cutOffs: CapturePlan.Recording
    /// What the camera's files are called before their sequence number (`cam0-NAME`).
    var fileStem: String
    var sink: Sink
    var capture: CaptureHandle

    /// Streams until the agent ends the stream; every outcome, including failures, is an event.
    func run(reporting events: AsyncStream<RecordingEvent<PendingFrame>>.Continuation) async {
        var lastSequence: UInt64?
        var droppedReported: UInt64 = 0
        var stopper: Task<Void, Never>?
        var started: (streamID: String, client: AgentClient)?
        defer { stopper?.cancel() }
        do {
            let client = try device.agent.client()
            var trigger = WireScheduleTrigger()
            trigger.triggerID = "rec-\(sessionID)-\(camera)"
            trigger.action = .startStream
            trigger.deviceIds = [device.deviceID]
            trigger.fireAtNs = estimate.agentTime(atCoordinator: fireAt)
            trigger.sessionID = sessionID
            for try await frame in client.stream(.scheduleTrigger(trigger)) {
                switch frame.envelope.body {
                case .streamStarted(let stream):
                    started = (stream.streamID, client)
                    stopper = Self.stop(stream.streamID, at: cutOffs.stopStreamsAt, on: client)
                case .videoFrame(let video):
                    guard let payload = frame.payload else { continue }
                    if let last = lastSequence, video.sequence > last + 1 + video.droppedBefore {
                        // Frames the camera itself never produced.
                        events.yield(
                            .dropped(camera: camera, count: Int(video.sequence - last - 1 - video.droppedBefore)))
                    }
                    if video.droppedBefore > 0 {
                        events.yield(.dropped(camera: camera, count: Int(video.droppedBefore)))
                    }
                    droppedReported += video.droppedBefore
                    lastSequence = video.sequence
                    let (timestamp, uncertainty) = CaptureRig.coordinatorTime(of: video.hasExposureStart ? video.exposureStart : video.timestamp, estimate: estimate)
                    if cutOffs.isAfterEnd(exposedAt: timestamp) {
                        // The stop takes a moment to reach the agent.
                        events.yield(.afterEnd(camera: camera))
                        continue
                    }
                    let spilled = try await sink.spill(
                        PayloadBytes(payload),
                        layout: CaptureRig.layout(
                            pixelFormat: video.pixelFormat, dimensions: video.dimensions,
                            bytesPerLine: video.bytesPerLine),
                        named: fileStem + "/" + String(format: "%06llu", video.sequence),
                        in: capture
                    )
                    let pending = PendingFrame(
                        spilled: spilled, agentTimestamp: video.timestamp.nanoseconds, marks: video.timestamp.marks.name
                    )
                    events.yield(
                        .frame(
                            SyncFrame(
                                camera: camera, sequence: video.sequence, timestamp: timestamp,
                                uncertainty: uncertainty,
                                payload: pending)
                        )
                    )
                case .streamEnded(let ended):
                    if ended.framesDropped > droppedReported {
                        events.yield(.dropped(camera: camera, count: Int(ended.framesDropped - droppedReported)))
                    }
                    let failure =
                        ended.reason == .stopped ? nil : "stream ended early (\(ended.reason)): \(ended.message)"
                    events.yield(.ended(camera: camera, failure: failure))
                    return
                default:
                    continue
                }
            }
            events.yield(.ended(camera: camera, failure: "the stream closed without StreamEnded"))
        } catch {
            events.yield(.ended(camera: camera, failure: RigSession.message(error)))
            // Leaving the stream (the sink failed) would leave the camera streaming to nobody.
            if let started {
                var stop = WireStopStream()
                stop.streamID = started.streamID
                _ = try? await started.client.request(.stopStream(stop), timeout: .seconds(2))
            }
        }
    }

    /// Sends `StopStream` at `stopAt` (coordinator clock), unless cancelled first.
    private static func stop(_ streamID: String, at stopAt: Int64, on client: AgentClient) -> Task<Void, Never> {
        Task {
            let wait = stopAt - HostClock.monotonicNow()
            if wait > 0 { try? await Task.sleep(for: .nanoseconds(wait)) }
            guard !Task.isCancelled else { return }
            var stop = WireStopStream()
            stop.streamID = streamID
            _ = try? await client.request(.stopStream(stop))
        }
    }
}
