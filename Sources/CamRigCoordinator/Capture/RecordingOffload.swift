import CamRigCapture
import CamRigClock
import CamRigObjectStore
import CamRigWire
import CamRigWireModel
import Foundation
import Logging
import NIOConcurrencyHelpers

/// Gathers an on-host recording's files from the hosts that made them, exactly once.
///
/// Each file is fetched from where the capture's copy ends (an interrupted offload resumes), or put in
/// the capture's object store by its agent, and checked against the SHA-256 its agent recorded; the
/// manifest then records it as stored, durably, and only then is its agent told to delete it
/// (`RecordedFileOffload` decides each step; this shell performs them). Agents are offloaded in
/// parallel, each one's files one after another, at most `maxBytesPerSecond` from each when set (so an
/// offload never starves a running capture). Once every file is here, the sync sets are built from the
/// frame tables.
public struct RecordingOffload<Sink: CaptureSink>: Sendable {
    public let pool: AgentPool
    public let sink: Sink
    public let logger: Logger
    /// Per agent, fetched or put in the store; 0: as fast as the link goes.
    public var maxBytesPerSecond: UInt64
    public var chunkBytes: UInt32

    public init(pool: AgentPool, sink: Sink, logger: Logger, maxBytesPerSecond: UInt64 = 0, chunkBytes: UInt32 = 1 << 20) {
        self.pool = pool
        self.sink = sink
        self.logger = logger
        self.maxBytesPerSecond = maxBytesPerSecond
        self.chunkBytes = chunkBytes
    }

    /// What an offload did.
    public typealias Outcome = OffloadOutcome

    /// Offload progress: bytes here of bytes to fetch.
    public typealias Progress = @Sendable (_ done: UInt64, _ total: UInt64) -> Void

    /// Brings `manifest`'s tracks up to date with their agents, fetches every file still on a host, and
    /// writes the manifest (with its sync sets once every file is here).
    ///
    /// What the hosts hold (file names, sizes, checksums) is written to the manifest before any file is
    /// moved, and each file is recorded there as stored before its agent may delete it: a coordinator
    /// (or a store) stopped at any point later finds every file, in the capture or on its host. A
    /// manifest that cannot be written is said in `Outcome.manifestError`, with what to run once the
    /// store is back.
    public func offload(_ manifest: CaptureManifest, capture: CaptureHandle, progress: Progress? = nil) async -> (CaptureManifest, Outcome) {
        guard var recording = manifest.hostRecording else {
            return (manifest, Outcome(id: manifest.id, directory: capture.location.captureLocation, state: (manifest.state ?? .complete).rawValue))
        }
        var manifest = manifest
        var outcome = Outcome(id: manifest.id, directory: capture.location.captureLocation, state: "")
        let started = ContinuousClock.now
        let agents = Array(Set(recording.tracks.map(\.agent))).sorted()
        let (recordingID, sessionID) = (recording.recordingId, manifest.sessionId)

        // What each host holds now.
        let before = recording.tracks
        let refreshed = await Self.perAgent(agents) { agent in
            await self.refresh(agent: agent, tracks: before.filter { $0.agent == agent }, recordingID: recordingID, sessionID: sessionID)
        }
        for result in refreshed {
            recording.replace(result.tracks)
            outcome.waiting += result.waiting
        }
        manifest.hostRecording = recording
        if recording.tracks != before || manifest.state != .offloading {
            manifest.state = .offloading
            do {
                try await sink.finish(manifest, in: capture)
            } catch {
                let failure = manifestFailure(error, id: manifest.id, capture: capture, what: "nothing was moved")
                logger.error("cannot write the manifest; nothing is fetched", metadata: ["capture": "\(manifest.id)", "error": "\(error)"])
                outcome.manifestError = failure
                outcome.waiting.append(failure)
                outcome.state = (manifest.state ?? .offloading).rawValue
                return (manifest, outcome)
            }
        }

        // Their files, every host at once; each file recorded as stored in the manifest before its
        // agent deletes it.
        let total = recording.tracks.flatMap(\.files).filter { !$0.offloaded && $0.lost == nil }.reduce(UInt64(0)) { $0 + $1.size }
        let counter = ByteCounter(total: total, progress: progress)
        let recorder = ManifestRecorder(manifest: manifest, sink: sink, capture: capture)
        let reachable = Dictionary(uniqueKeysWithValues: refreshed.compactMap { result in result.client.map { (result.agent, $0) } })
        let tracks = recording.tracks
        let results = await Self.perAgent(reachable.keys.sorted()) { agent in
            await self.transfer(
                agent: agent, client: reachable[agent]!, tracks: tracks.filter { $0.agent == agent }, recordingID: recordingID, capture: capture,
                counter: counter, recorder: recorder)
        }
        for result in results {
            recording.replace(result.tracks)
            outcome.offloaded += result.offloaded
            outcome.waiting += result.waiting
            outcome.lost += result.lost
            outcome.bytes += result.bytes
        }
        outcome.seconds = (ContinuousClock.now - started).seconds
        if recording.isOffloaded {
            await buildSets(&manifest, recording: &recording, capture: capture)
        } else {
            manifest.state = .offloading
        }
        manifest.hostRecording = recording
        for track in recording.tracks where manifest.cameras.indices.contains(track.camera) {
            manifest.cameras[track.camera].framesDelivered = track.frames
            manifest.cameras[track.camera].framesDropped = track.gaps
            manifest.cameras[track.camera].framesLost = (track.lost ?? 0) > 0 ? track.lost : nil
            let problems = [track.error].compactMap { $0 } + track.files.compactMap { file in file.lost.map { "\(file.name) is lost: \($0)" } }
            manifest.cameras[track.camera].error = problems.isEmpty ? nil : problems.joined(separator: "; ")
        }
        do {
            try await sink.finish(manifest, in: capture)
        } catch {
            let failure = manifestFailure(error, id: manifest.id, capture: capture, what: "every file its record does not list stays on its host")
            logger.error("cannot write the manifest", metadata: ["capture": "\(manifest.id)", "error": "\(error)"])
            outcome.manifestError = failure
            outcome.waiting.append(failure)
            // What the store says until the next offload writes it.
            manifest.state = .offloading
        }
        outcome.state = (manifest.state ?? .complete).rawValue
        return (manifest, outcome)
    }

    /// Why the manifest was not written, and what to run: the next offload finds every stored file.
    private func manifestFailure(_ error: any Error, id: String, capture: CaptureHandle, what: String) -> String {
        "the manifest of \(id) cannot be written to \(capture.location.captureLocation) (\(RigSession.message(error))); \(what): run "
            + "`camrig captures offload \(id)` once the store is back"
    }

    /// `work` for every agent at once; the results in no particular order.
    private static func perAgent<Result: Sendable>(_ agents: [String], _ work: @escaping @Sendable (String) async -> Result) async -> [Result] {
        await withTaskGroup(of: Result.self) { group in
            for agent in agents { group.addTask { await work(agent) } }
            var results: [Result] = []
            for await result in group { results.append(result) }
            return results
        }
    }

    struct AgentResult: Sendable {
        var tracks: [CaptureManifest.HostRecording.Track]
        var offloaded: [String] = []
        var waiting: [String] = []
        var lost: [String] = []
        var bytes: UInt64 = 0
    }

    /// One host's tracks as it holds them now, and its connection when its files can be fetched.
    struct Refresh: Sendable {
        var agent: String
        var tracks: [CaptureManifest.HostRecording.Track]
        var waiting: [String] = []
        var client: AgentClient?
    }

    /// Asks `agent` how its tracks ended and what files it holds, when the manifest does not know yet.
    private func refresh(agent: String, tracks: [CaptureManifest.HostRecording.Track], recordingID: String, sessionID: String) async -> Refresh {
        var result = Refresh(agent: agent, tracks: tracks)
        let client: AgentClient
        do {
            guard let remote = pool.agent(named: agent) ?? pool.agents.first(where: { $0.snapshot.agentID == agent }) else {
                throw AgentClientError(.connectionClosed, agent: agent, "is not in this rig's agent list")
            }
            client = try remote.client()
        } catch {
            result.waiting = tracks.flatMap { track in
                track.files.filter { !$0.isSettled && $0.lost == nil }.map { "\(agent): \($0.name) (\(RigSession.message(error)))" }
            }
            if result.waiting.isEmpty, tracks.contains(where: { !$0.state.hasEnded }) {
                result.waiting = ["\(agent): how the recording ended (\(RigSession.message(error)))"]
            }
            return result
        }
        guard tracks.contains(where: { !$0.state.hasEnded }) else {
            result.client = client
            return result
        }
        var list = WireListRecordings()
        list.sessionID = sessionID
        do {
            let reply = try await client.request(.listRecordings(list))
            guard case .recordingList(let recordings) = reply.frame.envelope.body else {
                throw AgentClientError(.protocolViolation, agent: agent, "answered ListRecordings with \(reply.frame.envelope.messageName)")
            }
            if let summary = recordings.recordings.first(where: { $0.recordingID == recordingID }) {
                for index in result.tracks.indices {
                    guard let held = summary.tracks.first(where: { $0.deviceID == result.tracks[index].device }) else { continue }
                    result.tracks[index].update(from: held)
                }
                if summary.state == .recording {
                    result.waiting.append("\(agent): still recording (or closing a recording cut short)")
                    return result
                }
            } else {
                for index in result.tracks.indices where !result.tracks[index].state.hasEnded {
                    result.tracks[index].state = .failed
                    result.tracks[index].error =
                        result.tracks[index].error ?? "agent \(agent) holds no recording '\(recordingID)': it never started there"
                }
            }
        } catch {
            result.waiting.append("\(agent): how the recording ended (\(RigSession.message(error)))")
            return result
        }
        result.client = client
        return result
    }

    /// One host's files that are not settled yet: each moved, checked, recorded and acknowledged as its
    /// `RecordedFileOffload` says.
    private func transfer(
        agent: String, client: AgentClient, tracks: [CaptureManifest.HostRecording.Track], recordingID: String, capture: CaptureHandle,
        counter: ByteCounter, recorder: ManifestRecorder<Sink>
    ) async -> AgentResult {
        var result = AgentResult(tracks: tracks)
        // The files one after another over the agent's link; each one's check, record and acknowledgement
        // run while the next one moves, so the link never waits for the disk or the manifest.
        let files = result.tracks.indices.flatMap { track in
            result.tracks[track].files.indices.filter { !result.tracks[track].files[$0].isSettled && result.tracks[track].files[$0].lost == nil }
                .map { (track, $0, result.tracks[track].files[$0]) }
        }
        let store = sink.directUpload(for: capture)
        let finished = await withTaskGroup(of: (Int, Int, RecordedFileOffload.Outcome).self) { group in
            for (trackIndex, fileIndex, file) in files {
                let camera = result.tracks[trackIndex].camera
                var machine = RecordedFileOffload(recorded: .init(file))
                var action = machine.start()
                // Whether the folder's copy still has to be checked and renamed (off the link's path).
                var toComplete = false
                if action == .transfer {
                    do {
                        if let store {
                            // The agent puts it in the store itself; the bytes never come here.
                            try await upload(file, recordingID: recordingID, by: client, to: store, capture: capture)
                            counter.add(file.size)
                            result.bytes += file.size
                            action = machine.transferred()
                        } else {
                            result.bytes += try await download(file, recordingID: recordingID, from: client, capture: capture, counter: counter)
                            toComplete = true
                        }
                    } catch let error as AgentClientError where error.code == .notFound {
                        action = machine.transferFailed(.notHeld(RigSession.message(error)))
                    } catch {
                        action = machine.transferFailed(.failed(RigSession.message(error)))
                    }
                }
                group.addTask { [machine, action, toComplete] in
                    var machine = machine
                    var action = action
                    if toComplete {
                        do {
                            try await self.sink.completeFile(file.name, size: file.size, sha256: file.sha256, in: capture)
                            action = machine.transferred()
                        } catch {
                            action = machine.transferFailed(.failed(RigSession.message(error)))
                        }
                    }
                    let outcome = await self.settle(
                        &machine, action, file: file, camera: camera, recordingID: recordingID, client: client, capture: capture, recorder: recorder)
                    return (trackIndex, fileIndex, outcome)
                }
            }
            var outcomes: [(Int, Int, RecordedFileOffload.Outcome)] = []
            for await outcome in group { outcomes.append(outcome) }
            return outcomes.sorted { ($0.0, $0.1) < ($1.0, $1.1) }
        }
        for (trackIndex, fileIndex, outcome) in finished {
            let name = result.tracks[trackIndex].files[fileIndex].name
            switch outcome {
            case .offloaded:
                result.tracks[trackIndex].files[fileIndex].offloaded = true
                result.tracks[trackIndex].files[fileIndex].acknowledged = true
                result.offloaded.append("\(agent): \(name)")
            case .unacknowledged(let reason):
                result.tracks[trackIndex].files[fileIndex].offloaded = true
                result.tracks[trackIndex].files[fileIndex].acknowledged = false
                logger.warning("a stored file's agent was not told to delete it", metadata: ["agent": "\(agent)", "file": "\(name)", "error": "\(reason)"])
                result.waiting.append("\(agent): \(name) is stored, but its host was not told to delete it (\(reason)); the next offload tells it")
            case .waiting(let reason):
                logger.warning("offload of a file failed", metadata: ["agent": "\(agent)", "file": "\(name)", "error": "\(reason)"])
                result.waiting.append("\(agent): \(name) (\(reason))")
            case .lost(let reason):
                result.tracks[trackIndex].files[fileIndex].lost = reason
                logger.error("a recorded file is lost", metadata: ["agent": "\(agent)", "file": "\(name)", "reason": "\(reason)"])
                result.lost.append("\(agent): \(name) (\(reason))")
            }
        }
        return result
    }

    /// Performs `action` and the ones that follow it for one file, until its machine finishes.
    private func settle(
        _ machine: inout RecordedFileOffload, _ first: RecordedFileOffload.Action, file: CaptureManifest.HostRecording.File, camera: Int,
        recordingID: String, client: AgentClient, capture: CaptureHandle, recorder: ManifestRecorder<Sink>
    ) async -> RecordedFileOffload.Outcome {
        var action = first
        while true {
            switch action {
            case .transfer:
                preconditionFailure("a file is moved before it is settled")
            case .lookUp:
                action = machine.looked(await lookUp(file, agent: client.welcome.agentID, capture: capture))
            case .record(let acknowledged):
                do {
                    try await recorder.stored(camera: camera, name: file.name, acknowledged: acknowledged)
                    action = machine.recordWritten()
                } catch {
                    action = machine.recordFailed(
                        "stored in \(capture.location.captureLocation) but the manifest that says so cannot be written (\(RigSession.message(error))); "
                            + "its host keeps it: run `camrig captures offload \(capture.id)` once the store is back")
                }
            case .acknowledge:
                var acknowledge = WireAcknowledgeRecording()
                acknowledge.recordingID = recordingID
                acknowledge.names = [file.name]
                do {
                    _ = try await client.request(.acknowledgeRecording(acknowledge))
                    action = machine.acknowledged()
                } catch let error as AgentClientError where error.code == .notFound {
                    // Acknowledged before (an offload cut off after its acknowledgement): nothing to delete.
                    action = machine.acknowledgeFailed(notHeld: true, RigSession.message(error))
                } catch {
                    action = machine.acknowledgeFailed(notHeld: false, RigSession.message(error))
                }
            case .finish(let outcome):
                return outcome
            }
        }
    }

    /// What the capture holds of a file its agent no longer has.
    private func lookUp(_ file: CaptureManifest.HostRecording.File, agent: String, capture: CaptureHandle) async -> RecordedFileOffload.Lookup {
        guard let destination = sink as? any RecordedFileLookup else {
            return .missing("agent \(agent) no longer holds it, and this capture's store cannot be asked whether it has it")
        }
        do {
            switch try await destination.lookUp(file.name, size: file.size, sha256: file.sha256, in: capture) {
            case .matches:
                return .matches
            case .absent:
                return .missing("agent \(agent) no longer holds it, and \(capture.location.captureLocation) has no \(file.name)")
            case .differs(let what):
                return .missing("agent \(agent) no longer holds it, and \(what)")
            }
        } catch {
            return .failed("agent \(agent) no longer holds it, and \(capture.location.captureLocation) cannot be asked for it now (\(RigSession.message(error)))")
        }
    }

    /// Has the agent put `file` in the capture's object store (at most `maxBytesPerSecond`), then checks
    /// what the store holds against what the host recorded.
    private func upload(
        _ file: CaptureManifest.HostRecording.File, recordingID: String, by client: AgentClient, to store: ObjectStoreLocation, capture: CaptureHandle
    ) async throws {
        guard client.welcome.capabilities.contains(WireProtocol.Capability.objectStore) else {
            throw AgentClientError(
                .remoteError, agent: client.welcome.agentID,
                "\(client.welcome.agentSoftware) cannot put its files in an object store; update camrig-agent on that host, or offload to a captures folder")
        }
        var request = WireUploadRecordingFile()
        request.recordingID = recordingID
        request.name = file.name
        request.store = WireObjectStoreTarget(store)
        request.maxBytesPerSecond = maxBytesPerSecond
        let reply = try await client.request(.uploadRecordingFile(request))
        guard case .storedObject(let object) = reply.frame.envelope.body else {
            throw AgentClientError(.protocolViolation, agent: client.welcome.agentID, "answered UploadRecordingFile with \(reply.frame.envelope.messageName)")
        }
        let stored = object.stored
        guard stored.size == file.size, stored.sha256 == file.sha256, stored.key == store.key(file.name) else {
            throw AgentClientError(
                .protocolViolation, agent: client.welcome.agentID,
                "stored \(file.name) as \(stored.key), \(stored.size) bytes with SHA-256 \(stored.sha256.prefix(16))…, not the \(file.size) bytes with \(file.sha256.prefix(16))… it recorded")
        }
        _ = try await sink.adopt(stored, in: capture)
    }

    /// Fetches `file`'s bytes into the capture from where its copy ends; returns the bytes fetched. The
    /// file is not complete until `completeFile` has checked it.
    private func download(
        _ file: CaptureManifest.HostRecording.File, recordingID: String, from client: AgentClient, capture: CaptureHandle, counter: ByteCounter
    ) async throws -> UInt64 {
        var offset = try await sink.receivedBytes(of: file.name, in: capture)
        if offset > file.size { offset = 0 }
        counter.add(offset)
        if file.size == 0 {
            try await sink.receive([UInt8](), into: file.name, at: 0, in: capture)
            return 0
        }
        guard offset < file.size else { return 0 }
        var fetched: UInt64 = 0
        var request = WireFetchRecordingFile()
        request.recordingID = recordingID
        request.name = file.name
        request.offset = offset
        request.maxBytesPerSecond = maxBytesPerSecond
        request.chunkBytes = chunkBytes
        for try await frame in client.stream(.fetchRecordingFile(request)) {
            guard case .fileChunk(let chunk) = frame.envelope.body else { continue }
            if let payload = frame.payload, payload.readableBytes > 0 {
                try await sink.receive(PayloadBytes(payload), into: file.name, at: chunk.offset, in: capture)
                fetched += UInt64(payload.readableBytes)
                counter.add(UInt64(payload.readableBytes))
            }
        }
        return fetched
    }

    /// Every file is here (or known lost): the sets, from each camera's frame table, each track's gaps
    /// and lost instants counted from it, and the capture's final state.
    private func buildSets(_ manifest: inout CaptureManifest, recording: inout CaptureManifest.HostRecording, capture: CaptureHandle) async {
        var tables: [(camera: Int, videos: [String], table: RecordedFrameTable)] = []
        var problems: [String] = []
        for index in recording.tracks.indices {
            let track = recording.tracks[index]
            let name = "\(track.stem).frames.csv"
            guard let table = track.files.first(where: { $0.name == name }), table.lost == nil else { continue }
            // A track with a lost video has frames nowhere: none of its frames is put in a set.
            guard !track.files.contains(where: { $0.lost != nil }) else {
                problems.append("camera \(track.camera)'s files are not all here")
                continue
            }
            do {
                let bytes = try await sink.readFile(name, in: capture)
                let parsed = try RecordedFrameTable(parsing: String(decoding: bytes, as: UTF8.self))
                // The frame table tells gaps (no frame fell there) and lost instants (a track cut short) apart.
                recording.tracks[index].gaps = parsed.gapCount
                recording.tracks[index].lost = parsed.lostCount
                tables.append((track.camera, track.videos.map(\.name), parsed))
            } catch {
                problems.append("\(name): \(error)")
            }
        }
        manifest.sets = RecordedFrameTable.sets(tables: tables, cameraCount: manifest.cameras.count, recording: recording)
        manifest.summary = CaptureManifest.Summary(
            sets: manifest.sets, framesDelivered: recording.tracks.map(\.frames).reduce(0, +), droppedFrames: recording.tracks.map(\.gaps).reduce(0, +),
            unmatchedFrames: 0)
        let lost = recording.tracks.map { $0.lost ?? 0 }.reduce(0, +)
        manifest.summary.lostFrames = lost > 0 ? lost : nil
        let whole = problems.isEmpty && recording.tracks.allSatisfy { $0.state == .complete } && manifest.summary.incompleteSets == 0
        manifest.state = whole ? .complete : .incomplete
        for problem in problems { logger.error("cannot read a frame table", metadata: ["capture": "\(manifest.id)", "problem": "\(problem)"]) }
    }
}

/// The capture's manifest as an offload records stored files in it: one write at a time, in order, each
/// of the manifest as it is then (so a write made while others waited records them all, and theirs is
/// skipped). A caller returns once a write that includes its file is durable, or with the write's error.
actor ManifestRecorder<Sink: CaptureSink> {
    private var manifest: CaptureManifest
    private let sink: Sink
    private let capture: CaptureHandle
    /// Changes made, and the last of them a durable write includes.
    private var changes = 0
    private var written = 0
    /// The last write asked for: each waits for the one before.
    private var tail: Task<Result<Void, any Error>, Never>?

    init(manifest: CaptureManifest, sink: Sink, capture: CaptureHandle) {
        self.manifest = manifest
        self.sink = sink
        self.capture = capture
    }

    /// Records file `name` of camera `camera` as stored (and whether its agent still holds it), durably.
    func stored(camera: Int, name: String, acknowledged: Bool) async throws {
        guard let track = manifest.hostRecording?.tracks.firstIndex(where: { $0.camera == camera }),
            let file = manifest.hostRecording?.tracks[track].files.firstIndex(where: { $0.name == name })
        else {
            throw RecordingManifestError("the manifest of \(manifest.id) lists no file \(name) of camera \(camera)")
        }
        manifest.hostRecording!.tracks[track].files[file].offloaded = true
        manifest.hostRecording!.tracks[track].files[file].acknowledged = acknowledged
        manifest.hostRecording!.tracks[track].files[file].lost = nil
        changes += 1
        let wanted = changes
        let previous = tail
        let write = Task { () -> Result<Void, any Error> in
            _ = await previous?.value
            return await self.write(through: wanted)
        }
        tail = write
        try await write.value.get()
    }

    private func write(through wanted: Int) async -> Result<Void, any Error> {
        guard written < wanted else { return .success(()) }
        let (snapshot, version) = (manifest, changes)
        do {
            try await sink.finish(snapshot, in: capture)
            written = max(written, version)
            return .success(())
        } catch {
            return .failure(error)
        }
    }
}

/// The manifest does not say what an offload needs.
struct RecordingManifestError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Bytes of an offload so far, across agents, for its progress: reported at most five times a second,
/// and at the end.
final class ByteCounter: Sendable {
    private struct State {
        var done: UInt64 = 0
        var lastReport: ContinuousClock.Instant?
    }

    private let state = NIOLockedValueBox(State())
    private let total: UInt64
    private let progress: (@Sendable (UInt64, UInt64) -> Void)?

    init(total: UInt64, progress: (@Sendable (UInt64, UInt64) -> Void)?) {
        self.total = total
        self.progress = progress
    }

    func add(_ bytes: UInt64) {
        guard bytes > 0 else { return }
        let now = ContinuousClock.now
        let report = state.withLockedValue { state -> UInt64? in
            state.done += bytes
            let due = state.done >= total || state.lastReport.map { now - $0 >= .milliseconds(200) } ?? true
            guard due else { return nil }
            state.lastReport = now
            return state.done
        }
        if let report { progress?(min(report, total), total) }
    }
}

extension CaptureManifest.HostRecording {
    /// Puts `tracks` in place of the tracks of the same cameras.
    mutating func replace(_ tracks: [Track]) {
        for track in tracks {
            if let index = self.tracks.firstIndex(where: { $0.camera == track.camera }) { self.tracks[index] = track }
        }
    }
}

extension CaptureManifest.HostRecording.Track {
    /// Takes what the agent says of the track, keeping what the manifest knows of each file already (here,
    /// acknowledged, lost).
    mutating func update(from held: WireRecordedTrack) {
        state = State(rawValue: held.state.name)
        frames = Int(held.frames)
        gaps = Int(held.gaps)
        duplicates = Int(held.duplicates)
        firstGridIndex = held.firstGridIndex >= 0 ? Int(held.firstGridIndex) : nil
        lastGridIndex = held.lastGridIndex >= 0 ? Int(held.lastGridIndex) : nil
        error = held.error.isEmpty ? nil : held.error
        let known = Dictionary(files.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        files = held.files.map {
            var file = CaptureManifest.HostRecording.File(name: $0.name, size: $0.size, sha256: $0.sha256.map { String(format: "%02x", $0) }.joined())
            if let here = known[file.name], here.offloaded || here.lost != nil {
                (file.offloaded, file.acknowledged, file.lost) = (here.offloaded, here.acknowledged, here.lost)
            }
            return file
        } + files.filter { file in (file.offloaded || file.lost != nil) && !held.files.contains { $0.name == file.name } }
        if held.codec != .unspecified { codec = held.codec.name }
    }
}

/// What an offload did.
public struct OffloadOutcome: Sendable, Encodable {
    public var id: String
    public var directory: String
    /// The manifest's state after it: `complete`, `incomplete`, or `offloading` while files remain on hosts.
    public var state: String
    /// Files fetched now (`AGENT: NAME`).
    public var offloaded: [String] = []
    /// Files still on their hosts, with why they were not fetched (and the manifest's failure, when it
    /// could not be written).
    public var waiting: [String] = []
    /// Files neither on their hosts nor in the capture (`AGENT: NAME (why)`).
    public var lost: [String] = []
    /// Why the manifest could not be written, and what to run once its store is back; nil when it was.
    public var manifestError: String?
    /// Bytes fetched now, and how long the fetching took.
    public var bytes: UInt64 = 0
    public var seconds: Double = 0

    public init(id: String, directory: String, state: String) {
        self.id = id
        self.directory = directory
        self.state = state
    }
}
