import CamRigCapture
import CamRigClock
import CamRigWire
import CamRigWireModel
import NIOCore
import Foundation
import Logging

/// Finishes captures that lack results: photos whose agents were cut off, restarted or unreachable
/// while the capture gathered, and captures a coordinator left `in_progress` when it died.
///
/// For each unfinished capture of `sink`: the manifest is first brought up to date with the capture's
/// journal (every result stored before its agent deleted it), then every result the manifest lists as
/// collectable is fetched from its agent, when the agent is connected in `pool`: stored under the
/// capture's file name, journaled, acknowledged, and put into the capture's sync set. When the agent
/// holds nothing of the trigger, the result is marked lost with the reason. The manifest and the
/// catalog then say `complete`, or `incomplete` with what is still missing and why.
///
/// A capture another process is writing (its sink holds the capture's lock) is left alone.
public struct MissingResultCollector<Sink: CaptureSink>: Sendable {
    public let pool: AgentPool
    public let sink: Sink
    public let logger: Logger

    public init(pool: AgentPool, sink: Sink, logger: Logger) {
        self.pool = pool
        self.sink = sink
        self.logger = logger
    }

    /// What one capture got.
    public typealias CaptureOutcome = CollectedCapture
    /// What a collection did.
    public typealias Report = CollectionReport

    /// Collects what can be collected now. Never throws for one capture's or one agent's failure: those
    /// stay missing, logged, for the next time.
    public func collect(only captureID: String? = nil) async throws -> Report {
        var report = Report()
        for unfinished in try await sink.unfinished() where captureID == nil || unfinished.handle.id == captureID {
            guard let outcome = await collect(unfinished) else { continue }
            report.captures.append(outcome)
        }
        return report
    }

    private func collect(_ unfinished: UnfinishedCapture) async -> CaptureOutcome? {
        guard let claim = await sink.claim(unfinished.handle) else {
            logger.debug("capture in use elsewhere; left alone", metadata: ["capture": "\(unfinished.handle.id)"])
            return nil
        }
        defer { claim.release() }
        // Read again now that it is ours: its writer may have finished it since the list was made.
        guard let current = try? await sink.reread(unfinished.handle) else { return nil }
        var manifest = current.manifest
        let resumed = manifest.state == .inProgress
        var collectedNames: [String] = []
        let kind = unfinished.handle.kind
        if kind == .recording, manifest.hostRecording != nil {
            // An on-host recording: its files wait on their hosts until they are fetched.
            if resumed {
                for index in manifest.hostRecording!.tracks.indices where manifest.hostRecording!.tracks[index].state == .unknown {
                    manifest.hostRecording!.tracks[index].error = "the coordinator stopped during the recording; asking the host how it ended"
                }
            }
            let (offloaded, result) = await RecordingOffload(pool: pool, sink: sink, logger: logger).offload(manifest, capture: unfinished.handle)
            return CaptureOutcome(
                id: offloaded.id, directory: unfinished.handle.location.captureLocation, state: result.state, collected: result.offloaded,
                waiting: result.waiting, lost: result.lost, resumed: resumed)
        }
        guard kind == .photo else {
            // A recording's frames were streamed: none can be collected. One left in progress is closed
            // as incomplete, saying why.
            if resumed {
                manifest.state = .incomplete
                manifest.missing = []
                for index in manifest.cameras.indices where manifest.cameras[index].error == nil {
                    manifest.cameras[index].error = "the coordinator stopped during the recording; its frames were not matched into sets"
                }
                await finish(manifest, unfinished.handle)
            }
            return outcome(manifest, unfinished.handle, collected: [], resumed: resumed)
        }

        // Start from the journal: every photo stored, whatever the manifest got to say.
        var frames: [Int: CaptureManifest.Frame] = [:]
        for frame in manifest.sets.first?.frames ?? [] { frames[frame.camera] = frame }
        for entry in current.journal where manifest.cameras.indices.contains(entry.frame.camera) {
            let camera = entry.frame.camera
            guard let existing = frames[camera] else {
                frames[camera] = entry.frame
                continue
            }
            // Known already: the frame itself, one of its bracket's images, or the proxy its final replaced.
            if existing.holds(file: entry.frame.file) || existing.photo?.proxyFile == entry.frame.file { continue }
            if existing.photo?.bracketIndex != nil, entry.frame.photo?.bracketIndex != nil {
                frames[camera] = existing.addingBracketImage(entry.frame)
                continue
            }
            var replacement = entry.frame
            if existing.photo?.proxy == true, replacement.photo?.proxy != true, replacement.photo?.photoId == existing.photo?.photoId {
                replacement.photo?.proxyFile = existing.file
            }
            frames[camera] = replacement
        }
        var missing = (manifest.missing ?? []).filter { frames[$0.camera] == nil }
        if resumed {
            for index in missing.indices {
                switch missing[index].cause {
                case .captureUnderWay:
                    missing[index].cause = .coordinatorStopped
                    missing[index].reason = "the coordinator stopped before gathering it"
                case .coordinatorStopped, .captureFailed, .notHeld, nil:
                    break
                }
            }
        }

        // Results stored earlier whose agents were not told: acknowledge them now. A coordinator that
        // died may have journaled results it never acknowledged: all of its journal is acknowledged
        // again (what the agent no longer holds is answered NOT_FOUND, and done).
        var unacknowledged = manifest.unacknowledged ?? []
        if resumed {
            for entry in current.journal where !unacknowledged.contains(where: { $0.agent == entry.agent && $0.resultId == entry.resultId }) {
                unacknowledged.append(.init(agent: entry.agent, sessionId: manifest.sessionId, resultId: entry.resultId))
            }
        }
        for (agentID, entries) in Dictionary(grouping: unacknowledged, by: \.agent).sorted(by: { $0.key < $1.key }) {
            guard let client = try? pool.agents.first(where: { $0.snapshot.agentID == agentID })?.client() else { continue }
            do {
                try await client.acknowledge(entries.map(\.resultId))
                unacknowledged.removeAll { $0.agent == agentID }
            } catch let error as AgentClientError where error.code == .notFound {
                // Deleted already (the agent names what it no longer had): nothing to acknowledge.
                unacknowledged.removeAll { $0.agent == agentID }
            } catch {
                logger.warning("cannot acknowledge stored results yet", metadata: ["agent": "\(agentID)", "error": "\(error)"])
            }
        }

        // Fetch what the agents that are back still hold.
        let byAgent = Dictionary(grouping: missing.indices.filter { missing[$0].collectable }, by: { missing[$0].agent })
        for (agentID, indices) in byAgent.sorted(by: { $0.key < $1.key }) {
            guard let agent = pool.agents.first(where: { $0.snapshot.agentID == agentID }),
                let client = try? agent.client(), let estimate = try? agent.clockEstimate()
            else { continue }
            for sessionID in Set(indices.map { missing[$0].sessionId }).sorted() {
                let wanted = indices.filter { missing[$0].sessionId == sessionID }
                let fetched = await fetch(
                    from: client, agentID: agentID, sessionID: sessionID,
                    wanted: wanted.map { index in
                        let entry = missing[index]
                        return Wanted(camera: entry.camera) { $0.triggerID == entry.triggerId && $0.deviceID == entry.device }
                    },
                    estimate: estimate, manifest: manifest, capture: unfinished.handle)
                unacknowledged += fetched.notAcknowledged.map {
                    CaptureManifest.Unacknowledged(agent: agentID, sessionId: sessionID, resultId: $0)
                }
                for index in wanted {
                    let camera = missing[index].camera
                    if let frame = fetched.found[camera] {
                        frames[camera] = frame
                        collectedNames.append(manifest.cameras[camera].name)
                    } else if fetched.complete, !fetched.failedToStore.contains(camera), !Self.recent(manifest) {
                        // The agent offered every result of the session it holds, and not this one.
                        missing[index].collectable = false
                        missing[index].cause = .notHeld
                        missing[index].reason =
                            "agent \(agentID) holds no result of trigger \(missing[index].triggerId) for \(missing[index].device); at the capture: \(missing[index].reason)"
                    }
                }
            }
        }
        missing.removeAll { frames[$0.camera] != nil }

        // Deferred photos' finals their agents have made since: each replaces its proxy in the set.
        var finalNames: [String] = []
        let proxies = frames.filter { $0.value.photo?.proxy == true }
        for (agentID, cameras) in Dictionary(grouping: proxies.keys, by: { manifest.cameras[$0].agent }).sorted(by: { $0.key < $1.key }) {
            guard let agent = pool.agents.first(where: { $0.snapshot.agentID == agentID }),
                let client = try? agent.client(), let estimate = try? agent.clockEstimate()
            else { continue }
            let wanted = cameras.sorted().compactMap { camera -> Wanted? in
                guard let photoID = frames[camera]?.photo?.photoId else { return nil }
                return Wanted(camera: camera) { $0.photoID == photoID && !$0.resolved.deferredProxy }
            }
            let fetched = await fetch(
                from: client, agentID: agentID, sessionID: manifest.sessionId, wanted: wanted, estimate: estimate, manifest: manifest,
                capture: unfinished.handle)
            unacknowledged += fetched.notAcknowledged.map {
                CaptureManifest.Unacknowledged(agent: agentID, sessionId: manifest.sessionId, resultId: $0)
            }
            for (camera, final) in fetched.found {
                var final = final
                final.photo?.proxyFile = frames[camera]?.file
                frames[camera] = final
                finalNames.append(manifest.cameras[camera].name)
            }
        }

        // The capture's set again, with every photo it now has.
        var cameras = manifest.cameras
        for index in cameras.indices where frames[index] != nil { cameras[index].error = nil }
        let builder = ManifestBuilder(
            id: manifest.id, kind: .photo, created: manifest.created, sessionID: manifest.sessionId, cameras: cameras)
        let syncFrames: [SyncFrame<StoredFrame>?] = cameras.indices.map { frames[$0].map(SyncFrame.init) }
        let times = frames.values.map(\.timestampNs).sorted()
        let fireAt = manifest.fireAtNs ?? (times.isEmpty ? 0 : times[times.count / 2])
        var rebuilt = builder.photo(
            syncFrames, fireAt: fireAt, onGrid: manifest.onGrid ?? false,
            failures: Dictionary(missing.map { ($0.camera, $0.reason) }, uniquingKeysWith: { first, _ in first }))
        rebuilt.triggerId = manifest.triggerId
        rebuilt.contactSheet = manifest.contactSheet
        rebuilt.fireAtNs = manifest.fireAtNs
        rebuilt.onGrid = manifest.onGrid
        rebuilt.missing = missing
        rebuilt.unacknowledged = unacknowledged.isEmpty ? nil : unacknowledged
        rebuilt.state = missing.isEmpty ? .complete : .incomplete
        if rebuilt != manifest {
            await finish(rebuilt, unfinished.handle)
        }
        var result = outcome(rebuilt, unfinished.handle, collected: collectedNames, resumed: resumed)
        result.finals = finalNames.sorted()
        return result
    }

    /// A result a fetch looks for, and the camera it is for.
    private struct Wanted: Sendable {
        var camera: Int
        var matches: @Sendable (WirePhotoResult) -> Bool
    }

    /// What one fetch from an agent gave.
    private struct Fetched {
        var found: [Int: CaptureManifest.Frame] = [:]
        /// Stored and journaled, but the acknowledgement did not reach the agent.
        var notAcknowledged: [String] = []
        /// Offered, but not stored here (a local failure): still the agent's.
        var failedToStore: Set<Int> = []
        /// The agent offered everything it holds of the session (the fetch ended normally).
        var complete = false
    }

    /// Whether the capture's agents may still be about to store its photos: an agent fires a trigger it
    /// accepted even after its coordinator is gone, so what it does not hold yet is not lost yet. Until
    /// 3 s after the trigger instant; for a capture whose coordinator died before writing that instant,
    /// until 10 s after the capture began (the trigger instant is at most a lead after it).
    static func recent(_ manifest: CaptureManifest) -> Bool {
        if let fireAt = manifest.fireAtNs {
            let now = HostClock.monotonicNow()
            // An instant ahead of now is from before this machine restarted: long past.
            return fireAt <= now && now - fireAt < 3_000_000_000
        }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        guard let created = formatter.date(from: manifest.created) else { return false }
        return Date().timeIntervalSince(created) < 10
    }

    /// Fetches `sessionID`'s results from one agent and stores those `wanted`. A result is acknowledged
    /// only once stored and journaled.
    private func fetch(
        from client: AgentClient,
        agentID: String,
        sessionID: String,
        wanted: [Wanted],
        estimate: ClockEstimate,
        manifest: CaptureManifest,
        capture: CaptureHandle
    ) async -> Fetched {
        let fetch = CaptureRig.fetchRequest(
            sessionID: sessionID, triggerID: manifest.triggerId,
            cameras: Set(wanted.map(\.camera)).sorted().map {
                (manifest.cameras[$0].device, CaptureRig.fileStem(camera: $0, name: manifest.cameras[$0].name))
            },
            thumbnailWidth: 0, sink: sink, capture: capture)
        var fetched = Fetched()
        var stored: [String] = []
        do {
            for try await frame in client.stream(.fetchResults(fetch)) {
                guard case .photoResult(let result) = frame.envelope.body,
                    let payload = frame.payload ?? (result.hasStored || !result.uploadError.isEmpty ? ByteBuffer() : nil),
                    let entry = wanted.first(where: { $0.matches(result) }),
                    fetched.found[entry.camera] == nil || result.resolved.bracketIndex > 0 || !result.photoID.isEmpty
                else { continue }
                let camera = entry.camera
                do {
                    let stamp = try await CaptureRig.store(
                        result, payload: payload, camera: camera,
                        stem: CaptureRig.fileStem(camera: camera, name: manifest.cameras[camera].name), estimate: estimate, lateness: nil,
                        into: sink, capture: capture)
                    try await sink.journal(JournalEntry(resultId: result.resultID, agent: agentID, frame: stamp), in: capture)
                    // An exposure bracket's images join its first one.
                    fetched.found[camera] = fetched.found[camera].map { $0.combining(stamp) } ?? stamp
                    stored.append(result.resultID)
                } catch {
                    fetched.failedToStore.insert(camera)
                    logger.warning(
                        "a collected photo could not be stored; it stays in the agent's spool",
                        metadata: ["capture": "\(capture.id)", "agent": "\(agentID)", "error": "\(error)"])
                }
            }
            fetched.complete = true
        } catch {
            logger.warning(
                "cannot collect results yet", metadata: ["capture": "\(capture.id)", "agent": "\(agentID)", "error": "\(error)"])
        }
        if !stored.isEmpty {
            do {
                try await client.acknowledge(stored)
            } catch {
                fetched.notAcknowledged = stored
            }
        }
        return fetched
    }

    private func finish(_ manifest: CaptureManifest, _ capture: CaptureHandle) async {
        do {
            try await sink.finish(manifest, in: capture)
        } catch {
            logger.error("cannot update the manifest", metadata: ["capture": "\(capture.id)", "error": "\(error)"])
        }
    }

    private func outcome(_ manifest: CaptureManifest, _ capture: CaptureHandle, collected: [String], resumed: Bool) -> CaptureOutcome {
        let missing = manifest.missing ?? []
        return CaptureOutcome(
            id: manifest.id,
            directory: capture.location.captureLocation,
            state: (manifest.state ?? .complete).rawValue,
            collected: collected,
            waiting: missing.filter(\.collectable).map { "\(manifest.cameras[$0.camera].name): \($0.reason)" },
            lost: missing.filter { !$0.collectable }.map { "\(manifest.cameras[$0.camera].name): \($0.reason)" },
            resumed: resumed,
            awaitingFinals: manifest.awaitingFinals.map { manifest.cameras[$0.camera].name }
        )
    }
}

/// What one capture got.
public struct CollectedCapture: Sendable, Encodable {
    public var id: String
    public var directory: String
    /// `complete` or `incomplete`, after collecting.
    public var state: String
    /// Cameras (`AGENT/DEVICE`) whose results were collected now.
    public var collected: [String]
    /// Results still missing that their agents may hold (agent not connected now).
    public var waiting: [String]
    /// Results known to be lost, with why.
    public var lost: [String]
    /// The coordinator had died during this capture: its manifest was rebuilt from the journal.
    public var resumed: Bool
    /// Cameras (`AGENT/DEVICE`) whose deferred photos' finals were collected now.
    public var finals: [String] = []
    /// Cameras whose deferred photos' finals their agents have still to deliver.
    public var awaitingFinals: [String] = []
}

/// What a collection did.
public struct CollectionReport: Sendable, Encodable {
    public var captures: [CollectedCapture] = []
    public var collected: Int { captures.map(\.collected.count).reduce(0, +) }
    public var waiting: Int { captures.map(\.waiting.count).reduce(0, +) }
    public var lost: Int { captures.map(\.lost.count).reduce(0, +) }

    enum CodingKeys: String, CodingKey { case captures, collected, waiting, lost }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(captures, forKey: .captures)
        try container.encode(collected, forKey: .collected)
        try container.encode(waiting, forKey: .waiting)
        try container.encode(lost, forKey: .lost)
    }
}
