import CamRigCapture
import CamRigClock
import CamRigDeviceModel
import CamRigWire
import CamRigWireModel
import NIOCore

extension RigSession {
    /// Fires every camera at one coordinator instant T and gathers one photo per camera into a sync set.
    ///
    /// Each agent receives T converted to its own clock and fires at it; each result carries its
    /// timestamp in the coordinator's clock, its uncertainty and how late the agent fired. Results are
    /// acknowledged (and so deleted from the agents' spools) only once `sink` has stored them. The
    /// capture runs off the session's actor, and `sink` encodes and writes the photos concurrently.
    public func capturePhoto(into sink: some CaptureSink, settings: WirePhotoSettings = WirePhotoSettings())
        async throws
        -> CaptureReport
    {
        let rig = try captureRig()
        let report = try await Self.capturePhoto(rig, settings: settings, into: sink)
        if let fanOut = report.triggerFanOut { lastFanOut = fanOut.nanoseconds }
        return report
    }

    /// What firing one agent's trigger gave: when the agent accepted it, and how it fired.
    private struct Firing: Sendable {
        var agentID: String
        var scheduledAt: Int64?
        var result: Result<WireTriggerFired, any Error>
    }

    /// One photo of an agent's results, stored or not, with its contact sheet thumbnail.
    private typealias PhotoWrite = (
        camera: Int, resultID: String, frame: Result<SyncFrame<StoredFrame>, any Error>,
        thumbnail: Result<ContactSheet.Thumbnail, ContactSheet.ThumbnailRefusal>?
    )

    /// What gathering one agent's photos gave.
    private struct Gathered: Sendable {
        var frames: [Int: SyncFrame<StoredFrame>] = [:]
        /// Per camera without a photo: why.
        var cameraFailures: [Int: String] = [:]
        /// About the agent as a whole.
        var failure: String?
        /// Results stored whose acknowledgement did not reach the agent.
        var unacknowledged: [String] = []
        /// Each stored photo's thumbnail for the contact sheet, or why it has none.
        var thumbnails: [Int: Result<ContactSheet.Thumbnail, ContactSheet.ThumbnailRefusal>] = [:]
    }

    private static func capturePhoto(_ rig: CaptureRig, settings: WirePhotoSettings, into sink: some CaptureSink)
        async throws
        -> CaptureReport
    {
        let triggerID = "photo-" + String(UInt64.random(in: 0...UInt64.max), radix: 36)
        // The capture's manifest is on disk before any agent is asked to fire: a coordinator that dies
        // from here on leaves a manifest naming the trigger whose results the agents keep.
        let capture = try await sink.begin(.photo)
        let startEstimates = try rig.clockEstimates()
        var started = rig.manifestBuilder(for: capture, estimates: startEstimates).photo(
            Array(repeating: nil, count: rig.inputs.count), fireAt: 0, failures: [:])
        started.state = .inProgress
        started.triggerId = triggerID
        started.missing = rig.inputs.indices.map { camera in
            rig.missing(camera: camera, triggerID: triggerID, cause: .captureUnderWay, reason: "the capture was under way", collectable: true)
        }
        do {
            try await sink.started(started, in: capture)
        } catch {
            await sink.abandon(capture)
            throw error
        }

        let plan = CapturePlan.photo(
            at: HostClock.monotonicNow(), roundTrips: rig.roundTrips, agents: rig.camerasByAgent.count,
            lastFanOut: rig.lastFanOut, grid: rig.grid)
        let (firings, sent) = await fire(rig, plan: plan, triggerID: triggerID, settings: settings)
        let estimates: [ClockEstimate]
        do {
            estimates = try rig.clockEstimates()
        } catch {
            await sink.abandon(capture)
            throw error
        }

        var frames: [SyncFrame<StoredFrame>?] = Array(repeating: nil, count: rig.inputs.count)
        var cameraFailures: [Int: String] = [:]
        var failures: [String] = []
        let gathered = await withTaskGroup(of: (String, Gathered).self) { group in
            for (agentID, cameras) in rig.camerasByAgent {
                switch firings[agentID]?.result {
                case .success(let firing)?:
                    group.addTask {
                        let gathered = await gather(
                            rig, cameras: cameras, triggerID: triggerID, firing: firing, estimates: estimates,
                            sink: sink, capture: capture)
                        return (agentID, gathered)
                    }
                case .failure(let error)?:
                    failures.append("agent \(agentID): \(message(error))")
                    // Even a trigger the agent answered with an error may have stored some of its
                    // cameras' photos first: every camera stays collectable, and a collector that finds
                    // nothing of it on the agent marks it lost.
                    for camera in cameras { cameraFailures[camera] = "trigger failed: \(message(error))" }
                case nil:
                    break
                }
            }
            var all: [(String, Gathered)] = []
            for await outcome in group { all.append(outcome) }
            return all.sorted { $0.0 < $1.0 }
        }
        var unacknowledged: [CaptureManifest.Unacknowledged] = []
        var thumbnails: [Int: Result<ContactSheet.Thumbnail, ContactSheet.ThumbnailRefusal>] = [:]
        for (agentID, outcome) in gathered {
            thumbnails.merge(outcome.thumbnails) { first, _ in first }
            unacknowledged += outcome.unacknowledged.map {
                CaptureManifest.Unacknowledged(agent: agentID, sessionId: rig.sessionID, resultId: $0)
            }
            for (camera, frame) in outcome.frames { frames[camera] = frame }
            cameraFailures.merge(outcome.cameraFailures) { first, _ in first }
            if let failure = outcome.failure { failures.append("agent \(agentID): \(failure)") }
        }

        let builder = rig.manifestBuilder(for: capture, estimates: estimates)
        var manifest = builder.photo(frames, fireAt: plan.fireAt, onGrid: rig.grid != nil, failures: cameraFailures)
        manifest.record(phases: await rig.phases())
        manifest.triggerId = triggerID
        manifest.fireAtNs = plan.fireAt
        manifest.onGrid = rig.grid != nil
        let missing = rig.inputs.indices.filter { frames[$0] == nil }.map { camera in
            rig.missing(
                camera: camera, triggerID: triggerID, cause: .captureFailed, reason: cameraFailures[camera] ?? "no photo in the agent's results",
                collectable: true)
        }
        manifest.missing = missing
        manifest.unacknowledged = unacknowledged.isEmpty ? nil : unacknowledged
        manifest.state = missing.isEmpty ? .complete : .incomplete
        // A sheet that cannot be written leaves the capture without one; its photos are what matter.
        manifest.contactSheet = try? await sink.writeContactSheet(contactSheet(manifest, thumbnails: thumbnails, failures: cameraFailures), in: capture)
        do {
            try await sink.finish(manifest, in: capture)
        } catch {
            await sink.abandon(capture)
            throw error
        }
        if !failures.isEmpty && frames.allSatisfy({ $0 == nil }) {
            throw CommitError(
                description: "no camera delivered a photo:\n" + failures.map { "  \($0)" }.joined(separator: "\n"),
                failures: [],
                rollbackFailures: []
            )
        }
        let lastScheduled = firings.values.compactMap(\.scheduledAt).max()
        return CaptureReport(
            manifest: manifest,
            directory: capture.location,
            triggersSent: sent.map { .nanoseconds($0.at - plan.plannedAt) },
            triggerWritingCPU: sent.map { .nanoseconds($0.cpuNanoseconds) },
            triggerFanOut: lastScheduled.map { .nanoseconds($0 - plan.plannedAt) },
            gatheredAfterTrigger: .nanoseconds(HostClock.monotonicNow() - plan.fireAt)
        )
    }

    /// The set on one sheet: every camera's photo under its name and how far its exposure started from
    /// the trigger instant (coordinator clock), under a title naming the capture and the set's skew.
    private static func contactSheet(
        _ manifest: CaptureManifest, thumbnails: [Int: Result<ContactSheet.Thumbnail, ContactSheet.ThumbnailRefusal>], failures: [Int: String]
    ) -> ContactSheet {
        let frames = Dictionary(manifest.sets.first?.frames.map { ($0.camera, $0) } ?? [], uniquingKeysWith: { first, _ in first })
        let fireAt = manifest.fireAtNs ?? 0
        let tiles = manifest.cameras.indices.map { camera -> ContactSheet.Tile in
            let name = manifest.cameras[camera].name
            guard let frame = frames[camera] else {
                return ContactSheet.Tile(label: name, thumbnail: nil, placeholder: failures[camera] == nil ? "NO PHOTO" : "NO PHOTO: \(failures[camera]!)")
            }
            let offset = String(format: "%+.1f µs", Double(frame.timestampNs - fireAt) / 1000)
            let label = "\(name) \(offset)\(frame.photo?.proxy == true ? " PROXY" : "")"
            switch thumbnails[camera] {
            case .success(let thumbnail)?: return ContactSheet.Tile(label: label, thumbnail: thumbnail)
            case .failure(let refusal)?: return ContactSheet.Tile(label: label, thumbnail: nil, placeholder: refusal.reason)
            case nil: return ContactSheet.Tile(label: label, thumbnail: nil)
            }
        }
        let skew = manifest.sets.first.map { String(format: "skew %.1f µs", Double($0.skewNs) / 1000) } ?? ""
        return ContactSheet(title: "\(manifest.id)  \(skew)", tiles: tiles)
    }

    /// One trigger per agent, naming its cameras, all at T; returns how each agent fired, by agent, and
    /// when the last trigger was handed to its socket.
    ///
    /// Everything per agent (its clock estimate, T in its clock, the message) is worked out before the
    /// first trigger leaves; then each event loop writes the triggers of all its connections in one go.
    private static func fire(_ rig: CaptureRig, plan: CapturePlan, triggerID: String, settings: WirePhotoSettings) async
        -> (firings: [String: Firing], sent: AgentClient.BatchWritten?)
    {
        var firings: [String: Firing] = [:]
        var requests: [(client: AgentClient, body: WireEnvelope.OneOf_Body)] = []
        var requestAgents: [String] = []
        for (agentID, cameras) in rig.camerasByAgent {
            let agent = rig.inputs[cameras[0]].agent
            do {
                let client = try agent.client()
                let estimate = try agent.clockEstimate()
                var trigger = WireScheduleTrigger()
                trigger.triggerID = triggerID
                trigger.action = .capturePhoto
                trigger.deviceIds = cameras.map { rig.inputs[$0].deviceID }
                trigger.fireAtNs = estimate.agentTime(atCoordinator: plan.fireAt)
                trigger.sessionID = rig.sessionID
                trigger.photoSettings = settings
                requests.append((client, .scheduleTrigger(trigger)))
                requestAgents.append(agentID)
            } catch {
                firings[agentID] = Firing(agentID: agentID, scheduledAt: nil, result: .failure(error))
            }
        }
        let (streams, written) = AgentClient.openStreams(requests)
        let fired = await withTaskGroup(of: Firing.self) { group in
            for (agentID, stream) in zip(requestAgents, streams) {
                group.addTask {
                    var scheduledAt: Int64?
                    do {
                        for try await frame in stream {
                            switch frame.envelope.body {
                            case .triggerScheduled: scheduledAt = HostClock.monotonicNow()
                            case .triggerFired(let fired):
                                return Firing(agentID: agentID, scheduledAt: scheduledAt, result: .success(fired))
                            default: continue
                            }
                        }
                        throw AgentClientError(
                            .connectionClosed, agent: agentID, "trigger \(triggerID) ended without firing")
                    } catch {
                        return Firing(agentID: agentID, scheduledAt: scheduledAt, result: .failure(error))
                    }
                }
            }
            var firings: [Firing] = []
            for await firing in group { firings.append(firing) }
            return firings
        }
        for firing in fired { firings[firing.agentID] = firing }
        return (firings, try? await written?.get())
    }

    /// One agent's photos of the trigger: fetched, each stored by `sink` as it arrives (concurrently),
    /// then acknowledged once stored. Results not stored stay in the agent's spool.
    private static func gather(
        _ rig: CaptureRig,
        cameras: [Int],
        triggerID: String,
        firing: WireTriggerFired,
        estimates: [ClockEstimate],
        sink: some CaptureSink,
        capture: CaptureHandle
    ) async -> Gathered {
        let agent = rig.inputs[cameras[0]].agent
        var gathered = Gathered()
        var stored: [String] = []
        do {
            let client = try agent.client()
            let tileWidth = ContactSheet.tileWidth(cameras: rig.inputs.count)
            let fetch = CaptureRig.fetchRequest(
                sessionID: rig.sessionID, triggerID: triggerID, cameras: cameras.map { (rig.inputs[$0].deviceID, rig.fileStem(camera: $0)) },
                thumbnailWidth: tileWidth, sink: sink, capture: capture)
            let (writes, fetchFailure) = await withTaskGroup(of: PhotoWrite.self) {
                group -> ([PhotoWrite], (any Error)?) in
                var fetchFailure: (any Error)?
                do {
                    for try await frame in client.stream(.fetchResults(fetch)) {
                        guard case .photoResult(let result) = frame.envelope.body, result.triggerID == triggerID,
                            let camera = cameras.first(where: { rig.inputs[$0].deviceID == result.deviceID }),
                            frame.payload != nil || result.hasStored || !result.uploadError.isEmpty
                        else { continue }
                        let payload = frame.payload ?? ByteBuffer()
                        let estimate = estimates[camera]
                        group.addTask {
                            do {
                                let stored = try await CaptureRig.store(
                                    result, payload: payload, camera: camera, stem: rig.fileStem(camera: camera), estimate: estimate,
                                    lateness: firing.latenessNs, into: sink, capture: capture)
                                // Journaled before it is acknowledged: once the agent deletes its copy,
                                // the capture's folder says everything the manifest needs of it.
                                try await sink.journal(
                                    JournalEntry(resultId: result.resultID, agent: rig.inputs[camera].agentID, frame: stored), in: capture)
                                let thumbnail = CaptureRig.thumbnail(of: result, payload: frame.payload, width: tileWidth, sink: sink)
                                return (camera, result.resultID, .success(SyncFrame(stored)), thumbnail)
                            } catch {
                                return (camera, result.resultID, .failure(error), nil)
                            }
                        }
                    }
                } catch {
                    fetchFailure = error
                }
                var all: [PhotoWrite] = []
                for await write in group { all.append(write) }
                return (all, fetchFailure)
            }
            for write in writes {
                switch write.frame {
                case .success(let frame):
                    // An exposure bracket delivers several images of one camera: its first is the set's frame.
                    if let earlier = gathered.frames[write.camera] {
                        // A bracket's images, or a deferred photo's proxy and final made already.
                        let combined = ManifestBuilder.entry(earlier).combining(ManifestBuilder.entry(frame))
                        if combined.file == frame.payload.file { gathered.thumbnails[write.camera] = write.thumbnail }
                        gathered.frames[write.camera] = SyncFrame(combined)
                    } else {
                        gathered.frames[write.camera] = frame
                        gathered.thumbnails[write.camera] = write.thumbnail
                    }
                    stored.append(write.resultID)
                case .failure(let error):
                    gathered.cameraFailures[write.camera] =
                        "photo not stored: \(message(error)); it stays in the agent's spool"
                    gathered.failure = "photo not stored: \(message(error))"
                }
            }
            if let fetchFailure {
                for camera in cameras where gathered.frames[camera] == nil && gathered.cameraFailures[camera] == nil {
                    gathered.cameraFailures[camera] =
                        "results not fetched: \(message(fetchFailure)); they stay in the agent's spool"
                }
                gathered.failure = "\(message(fetchFailure)) (its results stay in its spool)"
            }
            if !stored.isEmpty {
                do {
                    try await client.acknowledge(stored)
                } catch {
                    // Stored and journaled, but the agent still holds them: acknowledged later by a
                    // collector (`camrig captures recover`, or the next capture).
                    gathered.unacknowledged = stored
                    throw error
                }
            }
        } catch {
            // Not connected, or the acknowledgement failed: stored photos stay in the capture (and in
            // the agent's spool, to be fetched again).
            for camera in cameras where gathered.frames[camera] == nil {
                gathered.cameraFailures[camera] =
                    "results not fetched: \(message(error)); they stay in the agent's spool"
            }
            gathered.failure = "\(message(error)) (its results stay in its spool)"
        }
        return gathered
    }
}
