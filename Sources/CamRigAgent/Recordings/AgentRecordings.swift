import CamRigClock
import CamRigDeviceModel
import CamRigDevices
import CamRigFiles
import CamRigMedia
import CamRigCapture
import CamRigWire
import CamRigWireModel
import Foundation
import Logging
import NIOCore
import NIOPosix

/// On-host recordings: each recording is a folder under `directory` holding its request
/// (`request.pb`), its state (`state.pb`) and, per camera, video segments and sidecars. Files stay until
/// the client acknowledges them; a recording the agent did not finish (killed, powered off) is closed by
/// the next start and marked cut short.
///
/// One owner: this actor holds every running recording and its `RecordingMachine`, which decides; the
/// actor carries out what it decides. Events reach it through one stream (`run()`): tracks closing (from
/// their writers' queues), deadlines (timers on an event loop, at the times the machine asks for), state
/// files on disk, progress ticks. Every disk operation (state files, the tree's first walk, reading
/// state for listings and fetches, deletions) runs on the process's one disk thread pool, never on the
/// cooperative pool or an event loop.
public actor AgentRecordings {
    public nonisolated let directory: URL
    /// The most the recordings may take on disk (nil: the disk's free space less `reserveBytes`).
    nonisolated let capacityBytes: UInt64?
    /// Free space a recording leaves on the disk for everything else.
    nonisolated let reserveBytes: UInt64
    nonisolated let agentID: String
    private nonisolated let streams: AgentStreams
    private nonisolated let clock: HostClock
    nonisolated let threadPool: NIOThreadPool
    private nonisolated let eventLoop: any EventLoop
    nonisolated let logger: Logger

    /// What the actor is told, from wherever it happens.
    enum Event: Sendable {
        case trackClosed(recording: String, WireRecordedTrack)
        case wake(recording: String, generation: UInt64)
        case stateWritten(recording: String, written: Bool)
        case progress(recording: String)
        /// The bytes the recordings' folder holds, walked once when the agent starts.
        case scanned(bytes: UInt64)
        /// Recordings cut short were closed, their files rewritten: the folder changed by this much.
        case repaired(bytesAdded: Int64)
    }

    private nonisolated let events: AsyncStream<Event>.Continuation
    private let eventStream: AsyncStream<Event>

    struct Watcher {
        var requestID: UInt64
        var connection: AgentRequestRouter.Connection
    }

    /// A running recording: what was asked, its tracks' writers, and the machine that decides its life.
    struct Recording {
        var request: WireStartRecording
        var folder: URL
        var recorders: [TrackRecorder]
        var machine: RecordingMachine
        var watchers: [Watcher]
        var wake: Scheduled<Void>?
        var wakeGeneration: UInt64 = 0
        var progress: RepeatedTask?
    }

    private var recordings: [String: Recording] = [:]
    /// Ids being started (their folders being made): a second start of one is refused.
    private var starting: Set<String> = []
    /// Stops that came while their recording was still starting: applied as it is registered.
    private var pendingStops: [String: Int64] = [:]
    /// The agent is shutting down: no recording starts, and those starting end at once.
    private var shuttingDown = false
    /// Bytes of the finished recordings' files on disk, kept as recordings end and files are
    /// acknowledged (nil until the first walk); running tracks add their own count.
    private var settledBytes: UInt64?
    private var scanWaiters: [CheckedContinuation<Void, Never>] = []
    /// Waiting for every recording to end (shutdown).
    private var idleWaiters: [CheckedContinuation<Void, Never>] = []
    /// Files acknowledged lately (`RECORDING/NAME`): acknowledging one again is Ok, as for photos.
    private var acknowledged = RecentIDs(capacity: 4096)

    init(
        directory: URL, capacityBytes: UInt64?, reserveBytes: UInt64 = 256 << 20, agentID: String, streams: AgentStreams,
        threadPool: NIOThreadPool, eventLoop: any EventLoop, logger: Logger
    ) throws {
        self.directory = directory
        self.capacityBytes = capacityBytes
        self.reserveBytes = reserveBytes
        self.agentID = agentID
        self.streams = streams
        self.clock = streams.devices.clock
        self.threadPool = threadPool
        self.eventLoop = eventLoop
        self.logger = logger
        (eventStream, events) = AsyncStream.makeStream(of: Event.self)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    /// Handles the recordings' events until `finish()`; the agent runs it as a service of its group.
    func run() async {
        for await event in eventStream { handle(event) }
    }

    /// Ends `run()` once the events sent before are handled.
    nonisolated func finish() { events.finish() }

    /// Closes the recordings a previous run left open (until each is closed it lists as recording, and its
    /// files are not offered, so nobody fetches them half-made); the folder's size is walked first.
    nonisolated func closeCutShortRecordingsInBackground() {
        threadPool.submit { [self] _ in
            // Counted before the repair so that checks need not wait for it; its change is added after.
            events.yield(.scanned(bytes: Self.size(of: directory)))
        }
        // Rewriting a cut-short segment can take minutes on a slow card: on a thread of its own, once, so the
        // disk thread stays free for photos, recordings and fetches meanwhile.
        Thread.detachNewThread { [self] in
            events.yield(.repaired(bytesAdded: closeCutShortRecordings()))
        }
    }

    nonisolated static func size(of folder: URL) -> UInt64 {
        guard let walker = FileManager.default.enumerator(at: folder, includingPropertiesForKeys: [.fileSizeKey]) else { return 0 }
        var total: UInt64 = 0
        for case let url as URL in walker {
            total += UInt64((try? url.resourceValues(forKeys: [.fileSizeKey]).fileSize) ?? 0)
        }
        return total
    }

    // MARK: Checking

    /// The codec a track gets on a device in `format`, or why it cannot.
    static func resolve(_ codec: WireRecordingCodec, format: DeviceFormat) -> Result<WireRecordingCodec, CodecRefusal> {
        let compressed = format.pixelFormat == .mjpeg || format.pixelFormat == .jpeg
        // 4:2:0 planar frames (libcamera's NV12 and YUV420) are written packed as YUYV (TrackRecorder).
        let rawFormats: [PixelFormat] = [.yuyv, .rgb24, .grey, .bayerRGGB8, .nv12, .yuv420]
        guard compressed || rawFormats.contains(format.pixelFormat) else {
            return .failure(CodecRefusal(
                "its format \(format.pixelFormat.fourCC) cannot be recorded on the host (MJPEG, YUYV, NV12, YU12, RGB, grey and 8-bit Bayer can): choose one of those formats, or record with --stream"))
        }
        switch codec {
        case .unspecified:
            if compressed { return .success(.copy) }
            // A Bayer mosaic loses its meaning in a lossy JPEG: it is kept losslessly.
            return .success(format.pixelFormat == .bayerRGGB8 ? .ffv1 : .mjpeg)
        case .copy:
            return compressed
                ? .success(.copy)
                : .failure(CodecRefusal("copy stores the camera's compressed frames, and this camera delivers \(format.pixelFormat.fourCC): choose mjpeg, ffv1, h264 or raw"))
        case .mjpeg:
            if compressed { return .success(.copy) }  // the camera's JPEGs already are MJPEG
            return [.yuyv, .rgb24, .grey, .nv12, .yuv420].contains(format.pixelFormat)
                ? .success(.mjpeg)
                : .failure(CodecRefusal("mjpeg is made from YUYV, NV12, YU12, RGB or grey frames, not \(format.pixelFormat.fourCC): choose ffv1 or raw"))
        case .ffv1, .h264, .raw:
            return rawFormats.contains(format.pixelFormat)
                ? .success(codec)
                : .failure(CodecRefusal("\(codec.name) records uncompressed frames, and this camera delivers \(format.pixelFormat.fourCC): choose copy"))
        case .UNRECOGNIZED(let value):
            return .failure(CodecRefusal("codec \(value) is not one this agent knows"))
        }
    }

    /// Bytes a second of a track takes, estimated on the high side.
    static func bytesPerSecond(_ codec: WireRecordingCodec, format: DeviceFormat, frameDuration: FrameDuration) -> UInt64 {
        let fps = Double(frameDuration.denominator) / Double(frameDuration.numerator)
        let pixels = Double(format.dimensions.width) * Double(format.dimensions.height)
        let written = TrackFiles.writtenFormat(format)
        let raw = Double(max(written.bytesPerLine, 1)) * Double(written.dimensions.height)
        let perFrame: Double =
            switch codec {
            case .raw: raw
            case .ffv1: raw * 0.75
            case .h264: pixels * 0.1
            default: format.pixelFormat == .mjpeg ? Double(format.imageSize) * 0.5 : pixels * 0.5
            }
        return UInt64((perFrame * fps).rounded(.up)) + 4096
    }

    static func megabytes(_ bytes: UInt64) -> String {
        bytes >= 10 << 30 ? "\(bytes >> 30) GiB" : "\(bytes >> 20) MiB"
    }


    /// Bytes the recordings take now: finished ones as counted, running tracks as written so far.
    private func usedBytes() async -> UInt64 {
        if settledBytes == nil {
            await withCheckedContinuation { scanWaiters.append($0) }
        }
        let running = recordings.values.flatMap(\.recorders).reduce(UInt64(0)) { $0 + $1.progress.bytes }
        return (settledBytes ?? 0) + running
    }

    /// Free space the recordings may still use.
    func availableBytes() async -> UInt64 {
        var stats = statvfs()
        let free: UInt64 = statvfs(directory.path, &stats) == 0 ? UInt64(stats.f_bavail) * UInt64(stats.f_frsize) : 0
        let disk = free > reserveBytes ? free - reserveBytes : 0
        guard let capacityBytes else { return disk }
        let used = await usedBytes()
        return min(disk, capacityBytes > used ? capacityBytes - used : 0)
    }

    /// Whether `tracks` fit for `duration`: the check, or an error for a device or codec that cannot record.
    func check(_ tracks: [WireRecordingTrack], duration: Int64) async -> WireEnvelope.OneOf_Body {
        guard !tracks.isEmpty else { return .error(WireError(.invalidArgument, agent: agentID, "a recording needs at least one track")) }
        guard duration > 0, duration <= Self.longestRecording else {
            return .error(WireError(.invalidArgument, agent: agentID, "a recording needs a positive duration of at most a year"))
        }
        var check = WireRecordingCheck()
        var perSecond: UInt64 = 0
        for track in tracks {
            guard let device = streams.devices.discovery.device(uniqueID: track.deviceID) else {
                return .error(WireError(.deviceNotFound, agent: agentID, device: track.deviceID, "agent \(agentID) has no device '\(track.deviceID)'"))
            }
            let format = device.activeFormat
            switch Self.resolve(track.codec, format: format) {
            case .failure(let refusal):
                return .error(WireError(.unsupported, agent: agentID, device: track.deviceID, "\(device.identity.localizedName) on agent \(agentID): \(refusal.reason)"))
            case .success(let codec):
                var item = WireTrackCheck()
                item.deviceID = track.deviceID
                item.codec = codec
                item.format = WireFormat(format)
                item.bytesPerSecond = Self.bytesPerSecond(codec, format: format, frameDuration: device.activeMinFrameDuration)
                perSecond += item.bytesPerSecond
                check.tracks.append(item)
            }
        }
        check.neededBytes = UInt64((Double(perSecond) * Double(duration) / 1e9 * 1.1).rounded(.up)) + (1 << 20)
        check.availableBytes = await availableBytes()
        if check.neededBytes > check.availableBytes {
            check.refusal =
                "agent \(agentID) has room for \(Self.megabytes(check.availableBytes)) of recordings in \(directory.path) and this recording needs about \(Self.megabytes(check.neededBytes)): free space there (acknowledge or offload earlier recordings), record for less time, or choose a smaller codec"
        }
        return .recordingCheck(check)
    }

    // MARK: Recording

    /// The longest recording an agent takes (a year): longer ones are refused, never computed with.
    static let longestRecording: Int64 = 365 * 86_400 * 1_000_000_000

    static func isSafeName(_ name: String) -> Bool {
        !name.isEmpty && name.count <= 128 && !name.hasPrefix(".")
            && name.unicodeScalars.allSatisfy { CharacterSet.alphanumerics.contains($0) || "-_.".unicodeScalars.contains($0) }
            && name.unicodeScalars.allSatisfy(\.isASCII)
    }

    /// Starts a recording: `RecordingStarted`, progress, then `RecordingEnded` on `requestID`.
    func start(_ request: WireStartRecording, requestID: UInt64, connection: AgentRequestRouter.Connection) async {
        let reply: @Sendable (WireEnvelope.OneOf_Body) -> Void = { connection.write(WireFrame(requestID: requestID, $0), nil) }
        guard Self.isSafeName(request.recordingID) else {
            return reply(.error(WireError(.invalidArgument, agent: agentID, "recording id '\(request.recordingID)' must be letters, digits, '-', '_' or '.', not starting with '.'")))
        }
        guard request.frameCount > 0, request.gridPeriodNs.isFinite, request.gridPeriodNs > 0,
            request.gridPeriodNs * Double(request.frameCount) <= Double(Self.longestRecording), request.startAtNs.magnitude < 1 << 62,
            let frameDuration = FrameDuration(numerator: request.frameDuration.numerator, denominator: request.frameDuration.denominator)
        else {
            return reply(.error(WireError(.invalidArgument, agent: agentID, "a recording needs frame_count ≥ 1, a positive grid_period_ns, a frame_duration, and to last at most a year")))
        }
        let stems = request.tracks.map(\.fileStem)
        guard stems.allSatisfy(Self.isSafeName), Set(stems).count == stems.count else {
            return reply(.error(WireError(.invalidArgument, agent: agentID, "every track needs its own file_stem of letters, digits, '-', '_' or '.'")))
        }
        let id = request.recordingID
        guard !shuttingDown else { return reply(.error(RecordingError.shuttingDown(agent: agentID).wire)) }
        guard recordings[id] == nil, !starting.contains(id) else {
            return reply(.error(WireError(.invalidArgument, agent: agentID, "agent \(agentID) already has a recording '\(id)'")))
        }
        starting.insert(id)
        defer {
            // Registered, or refused: either way no longer starting.
            starting.remove(id)
            pendingStops[id] = nil
            resumeIdleWaitersIfIdle()
        }
        let duration = Int64(request.gridPeriodNs * Double(request.frameCount))
        let answer = await self.check(request.tracks, duration: duration)
        guard case .recordingCheck(let check) = answer else { return reply(answer) }
        guard check.refusal.isEmpty else { return reply(.error(WireError(.spoolFull, agent: agentID, check.refusal))) }
        var resolved = request
        for index in resolved.tracks.indices { resolved.tracks[index].codec = check.tracks[index].codec }
        let grid = RecordingGrid(start: request.startAtNs, period: request.gridPeriodNs, count: Int64(request.frameCount))
        var plans: [TrackRecorder.Plan] = []
        let folder = directory.appendingPathComponent(id)
        for (index, track) in resolved.tracks.enumerated() {
            guard let device = streams.devices.discovery.device(uniqueID: track.deviceID) else {
                return reply(.error(RecordingError.deviceGone(track.deviceID, agent: agentID).wire))
            }
            plans.append(TrackRecorder.Plan(
                deviceID: track.deviceID, stem: track.fileStem, codec: track.codec, format: device.activeFormat,
                jpegQuality: Int32(track.jpegQuality == 0 ? 90 : min(track.jpegQuality, 100)), grid: grid, clock: RigClockMapping(request.clock),
                frameDuration: frameDuration, segmentBytes: Int64(request.segmentBytes == 0 ? 4 << 30 : request.segmentBytes),
                segmentFrames: Int64(request.segmentFrames), folder: folder,
                metadata: [
                    ("CAMRIG_RECORDING", id), ("CAMRIG_SESSION", request.sessionID), ("CAMRIG_AGENT", agentID),
                    ("CAMRIG_DEVICE", track.deviceID), ("CAMRIG_CAMERA", device.identity.localizedName),
                    ("CAMRIG_TIMESTAMPS", "exposure start on the rig's clock; exact nanoseconds in \(track.fileStem).frames.csv"),
                    ("CAMRIG_TRACK", "\(index)"),
                ]))
        }
        // The folder, the request and the first state (every track recording) are on disk before any
        // track's file is: a crash at any point leaves a recording the next start can close.
        let events = self.events
        let (trackPlans, resolvedRequest) = (plans, resolved)
        let recorders: [TrackRecorder]
        do {
            recorders = try await threadPool.runIfActive { [agentID] in
                guard !FileManager.default.fileExists(atPath: folder.path) else { throw RecordingError.exists(id, agent: agentID) }
                do {
                    try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: false)
                    try DurableFile.write(try resolvedRequest.serializedBytes() as [UInt8], to: folder.appendingPathComponent("request.pb"))
                    try Self.writeState(.recording, tracks: trackPlans.map(Self.recordingTrack), of: resolvedRequest, in: folder)
                } catch {
                    throw RecordingError.cannotCreate(folder.path, agent: agentID, underlying: "\(error)")
                }
                do {
                    return try trackPlans.map { plan in try TrackRecorder(plan: plan) { events.yield(.trackClosed(recording: id, $0)) } }
                } catch {
                    try? FileManager.default.removeItem(at: folder)
                    throw RecordingError.cannotOpenFiles(id, agent: agentID, underlying: "\(error)")
                }
            }
        } catch let error as RecordingError {
            return reply(.error(error.wire))
        } catch {
            return reply(.error(RecordingError.shuttingDown(agent: agentID).wire))
        }
        let end = grid.instant(grid.count) + Int64(grid.period)
        var recording = Recording(
            request: resolved, folder: folder, recorders: recorders,
            machine: RecordingMachine(tracks: plans.map(Self.recordingTrack), end: end, period: grid.period),
            watchers: [Watcher(requestID: requestID, connection: connection)])
        let interval = TimeAmount.milliseconds(Int64(request.progressIntervalMs == 0 ? 1000 : request.progressIntervalMs))
        recording.progress = eventLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { _ in events.yield(.progress(recording: id)) }
        var actions = recording.machine.started()
        // A stop that came while it started, or a shutdown that began meanwhile, applies at once.
        if let at = pendingStops[id] { actions += recording.machine.stop(now: at) }
        if shuttingDown { actions += recording.machine.shutdown() }
        recordings[id] = recording
        starting.remove(id)
        var started = WireRecordingStarted()
        started.recordingID = id
        started.tracks = check.tracks
        reply(.recordingStarted(started))
        perform(actions, recording: id)
        logger.info("recording", metadata: ["recording": "\(id)", "tracks": "\(recorders.count)", "frames": "\(request.frameCount)"])
        for recorder in recorders {
            // A camera that starts exposing on command starts on a grid instant of the recording (the
            // next one a few milliseconds from now), as cameras on the other hosts do: its frames then lie
            // on the rig's grid as a phase-locked camera's do.
            if streams.watcherCount(deviceID: recorder.plan.deviceID) == 0,
                let device = streams.devices.discovery.device(uniqueID: recorder.plan.deviceID)
            {
                let soon = clock.now() + 5_000_000
                let k = Int64((Double(soon - grid.start) / grid.period).rounded(.up))
                device.alignNextStream(toMonotonic: clock.monotonic(atReading: grid.instant(k)))
            }
            // A track closed meanwhile (a stop, the shutdown, its time up) gets no stream.
            guard isOpen(recorder, of: id) else { continue }
            if case .failed(let error) = await streams.startAfterPreviousStream(deviceID: recorder.plan.deviceID, subscriber: recorder) {
                recorder.close(error: "the camera did not stream: \(error.message)")
            } else if !isOpen(recorder, of: id) {
                // It closed while its stream started: the stream stops, as it would have at the close.
                let (streams, streamID) = (self.streams, recorder.streamID)
                streams.devices.queue.async { streams.stop(streamID: streamID, reason: .stopped) }
            }
        }
    }

    private func isOpen(_ recorder: TrackRecorder, of id: String) -> Bool {
        recordings[id]?.machine.openTracks.contains(recorder.plan.deviceID) == true
    }

    /// The agent's clock now: a stop is taken at the moment it arrives, not when the actor gets to it.
    nonisolated func now() -> Int64 { clock.now() }

    /// Ends a recording after the grid instant nearest `at` (agent clock: when the stop arrived).
    func stop(_ recordingID: String, at: Int64) -> WireEnvelope.OneOf_Body {
        if starting.contains(recordingID) {
            pendingStops[recordingID] = at
            return .ok(WireOk())
        }
        guard recordings[recordingID] != nil else {
            return .error(WireError(.notFound, agent: agentID, "agent \(agentID) records nothing called '\(recordingID)'"))
        }
        let actions = recordings[recordingID]!.machine.stop(now: at)
        perform(actions, recording: recordingID)
        return .ok(WireOk())
    }

    /// Ends every recording (agent shutdown): each track closes its files as they are; returns once every
    /// recording's final state is on disk.
    func stopAll() async {
        shuttingDown = true
        for id in recordings.keys {
            let actions = recordings[id]!.machine.shutdown()
            perform(actions, recording: id)
        }
        // Recordings still starting end as they are registered (or are refused); their ends are waited for too.
        guard !recordings.isEmpty || !starting.isEmpty else { return }
        await withCheckedContinuation { idleWaiters.append($0) }
    }

    private func resumeIdleWaitersIfIdle() {
        guard recordings.isEmpty, starting.isEmpty, !idleWaiters.isEmpty else { return }
        let waiting = idleWaiters
        idleWaiters = []
        for waiter in waiting { waiter.resume() }
    }

    // MARK: The machine's events and actions

    private func handle(_ event: Event) {
        switch event {
        case .trackClosed(let id, let track):
            guard recordings[id] != nil else { return }
            perform(recordings[id]!.machine.trackClosed(track), recording: id)
        case .wake(let id, let generation):
            guard let recording = recordings[id], recording.wakeGeneration == generation else { return }
            let monotonic = HostClock.monotonicNow()
            var idle: [String: Int64] = [:]
            for recorder in recording.recorders {
                let last = recorder.progress.lastDelivery
                if last > 0 { idle[recorder.plan.deviceID] = monotonic - last }
            }
            perform(recordings[id]!.machine.deadline(now: clock.now(), idle: idle), recording: id)
        case .stateWritten(let id, let written):
            guard recordings[id] != nil else { return }
            perform(recordings[id]!.machine.stateWritten(written, now: clock.now()), recording: id)
        case .progress(let id):
            guard let recording = recordings[id] else { return }
            var progress = WireRecordingProgress()
            progress.recordingID = id
            progress.timeNs = clock.now()
            progress.tracks = recording.recorders.map { recorder in
                let snapshot = recorder.progress
                var track = WireTrackProgress()
                track.deviceID = recorder.plan.deviceID
                track.frames = snapshot.frames
                track.gaps = snapshot.gaps
                track.bytes = snapshot.bytes
                track.error = snapshot.error ?? ""
                return track
            }
            for watcher in recording.watchers { watcher.connection.write(WireFrame(requestID: watcher.requestID, .recordingProgress(progress)), nil) }
        case .repaired(let added):
            settledBytes = settledBytes.map { UInt64(max(0, Int64($0) + added)) }
        case .scanned(let bytes):
            settledBytes = bytes
            let waiting = scanWaiters
            scanWaiters = []
            for waiter in waiting { waiter.resume() }
        }
    }

    private func perform(_ actions: [RecordingMachine.Action], recording id: String) {
        guard var recording = recordings[id] else { return }
        defer { if recordings[id] != nil { recordings[id] = recording } }
        for action in actions {
            switch action {
            case .writeState(let state, let tracks):
                let (request, folder, logger, events) = (recording.request, recording.folder, logger, events)
                threadPool.submit { work in
                    var written = true
                    do {
                        // Closed tracks are remembered as they close: a crash later leaves them as they are.
                        guard case .active = work else { throw RecordingError.shuttingDown(agent: "") }
                        try Self.writeState(state, tracks: tracks, of: request, in: folder)
                    } catch {
                        written = false
                        logger.error("cannot record a recording's state", metadata: ["recording": "\(id)", "error": "\(error)"])
                    }
                    events.yield(.stateWritten(recording: id, written: written))
                }
            case .stopStream(let deviceID):
                guard let recorder = recording.recorders.first(where: { $0.plan.deviceID == deviceID }) else { continue }
                let (streams, streamID) = (self.streams, recorder.streamID)
                // The device's streams are theirs to stop, on their own queue.
                streams.devices.queue.async { streams.stop(streamID: streamID, reason: .stopped) }
            case .closeTracks(let deviceIDs, let error):
                for recorder in recording.recorders where deviceIDs.contains(recorder.plan.deviceID) { recorder.close(error: error) }
            case .stopTracks(let agentTime):
                for recorder in recording.recorders { recorder.stop(at: agentTime) }
            case .wake(let at):
                recording.wake?.cancel()
                recording.wakeGeneration += 1
                let (generation, events) = (recording.wakeGeneration, events)
                let delay = TimeAmount.nanoseconds(max(0, at - clock.now()))
                recording.wake = eventLoop.scheduleTask(in: delay) { events.yield(.wake(recording: id, generation: generation)) }
            case .announceEnded(let state, let tracks):
                recording.wake?.cancel()
                recording.progress?.cancel()
                recordings[id] = nil
                settledBytes = settledBytes.map { $0 + tracks.flatMap(\.files).reduce(0) { $0 + $1.size } }
                logger.info(
                    "recording ended",
                    metadata: ["recording": "\(id)", "state": "\(state)", "frames": "\(tracks.map(\.frames))", "gaps": "\(tracks.map(\.gaps))"])
                var ended = WireRecordingEnded()
                ended.recordingID = id
                ended.tracks = tracks
                for watcher in recording.watchers { watcher.connection.write(WireFrame(requestID: watcher.requestID, .recordingEnded(ended)), nil) }
                resumeIdleWaitersIfIdle()
            }
        }
    }

    // MARK: State on disk

    /// A track still recording, as the state file and listings show it.
    static func recordingTrack(_ plan: TrackRecorder.Plan) -> WireRecordedTrack {
        var track = WireRecordedTrack()
        track.deviceID = plan.deviceID
        track.fileStem = plan.stem
        track.codec = plan.codec
        track.format = WireFormat(plan.format)
        track.state = .recording
        track.firstGridIndex = -1
        track.lastGridIndex = -1
        return track
    }

    static func writeState(_ recordingState: WireRecordingState, tracks: [WireRecordedTrack], of request: WireStartRecording, in folder: URL) throws {
        var summary = WireRecordingSummary()
        summary.recordingID = request.recordingID
        summary.sessionID = request.sessionID
        summary.state = recordingState
        summary.tracks = tracks
        try DurableFile.write(try summary.serializedBytes() as [UInt8], to: folder.appendingPathComponent("state.pb"))
    }

    /// A finished recording's summary as its state file keeps it (read on the disk thread).
    private nonisolated static func summary(in folder: URL) -> WireRecordingSummary? {
        guard let data = try? Data(contentsOf: folder.appendingPathComponent("state.pb")) else { return nil }
        return try? WireRecordingSummary(serializedBytes: data)
    }

    /// The recordings on disk (of `session` when not empty), running ones with their progress so far.
    func list(session: String) async -> WireRecordingList {
        var running: [String: WireRecordingSummary] = [:]
        for (name, recording) in recordings where session.isEmpty || recording.request.sessionID == session {
            var summary = WireRecordingSummary()
            summary.recordingID = name
            summary.sessionID = recording.request.sessionID
            summary.state = .recording
            summary.tracks = recording.recorders.map { recorder in
                var track = Self.recordingTrack(recorder.plan)
                track.frames = recorder.progress.frames
                track.gaps = recorder.progress.gaps
                return track
            }
            running[name] = summary
        }
        let skip = Set(recordings.keys).union(starting)
        let directory = self.directory
        let stored = (try? await threadPool.runIfActive { () -> [WireRecordingSummary] in
            let names = ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []).filter { !skip.contains($0) }
            return names.compactMap { name in
                guard let summary = Self.summary(in: directory.appendingPathComponent(name)), session.isEmpty || summary.sessionID == session else { return nil }
                return summary
            }
        }) ?? []
        var list = WireRecordingList()
        list.recordings = (Array(running.values) + stored).sorted { $0.recordingID < $1.recordingID }
        return list
    }

    private func isRunning(_ recordingID: String) -> Bool {
        recordings[recordingID] != nil || starting.contains(recordingID)
    }

    /// The file `name` of a finished recording, if the agent holds it.
    nonisolated func file(_ recordingID: String, _ name: String) async -> WireRecordedFile? {
        guard Self.isSafeName(recordingID), Self.isSafeName(name), await !isRunning(recordingID) else { return nil }
        let folder = directory.appendingPathComponent(recordingID)
        // A recording still marked recording on disk is one a previous run left open and the repair has
        // not closed yet: its files are not offered.
        guard let summary = try? await threadPool.runIfActive({ Self.summary(in: folder) }), summary.state != .recording else { return nil }
        return summary.tracks.lazy.flatMap(\.files).first { $0.name == name }
    }

    // MARK: Offload

    /// Room left in a `FileChunk` frame beside its payload: the length and envelope-length fields and the
    /// envelope (request id, a file name of at most 128 characters, offset, size, last).
    static let fileChunkHeadroom = 1024

    /// The chunk a fetch sends: as asked (1 MiB by default, at most 4 MiB), and small enough that its
    /// frame fits the client's announced maximum (§3.1).
    static func chunkBytes(asked: UInt32, clientMaxFrameLength: UInt32) -> Int {
        let asked = Int(asked == 0 ? 1 << 20 : min(asked, 4 << 20))
        let fits = Int(WireProtocol.effectiveMaxFrameLength(announced: clientMaxFrameLength)) - fileChunkHeadroom
        return min(asked, fits)
    }

    /// Sends `name` from `offset` on as `FileChunk`s, reading the next chunk on the disk thread while one
    /// is sent.
    nonisolated func fetch(_ request: WireFetchRecordingFile, requestID: UInt64, connection: AgentRequestRouter.Connection) async {
        let agentID = self.agentID
        func fail(_ error: WireError) async { try? await connection.send(WireFrame(requestID: requestID, .error(error))) }
        guard let file = await file(request.recordingID, request.name) else {
            return await fail(WireError(
                .notFound, agent: agentID,
                "agent \(agentID) holds no finished file '\(request.name)' of recording '\(request.recordingID)' (never recorded here, still recording, or acknowledged)"))
        }
        guard request.offset <= file.size else {
            return await fail(WireError(.outOfRange, agent: agentID, "offset \(request.offset) is past the end of '\(request.name)' (\(file.size) bytes)"))
        }
        let chunkSize = Self.chunkBytes(asked: request.chunkBytes, clientMaxFrameLength: connection.maxFrameLength)
        let url = directory.appendingPathComponent(request.recordingID).appendingPathComponent(request.name)
        let handle: NIOFileHandle
        do {
            handle = try await threadPool.runIfActive { try NIOFileHandle(_deprecatedPath: url.path) }
        } catch {
            return await fail(WireError(.notFound, agent: agentID, "agent \(agentID) cannot open \(url.path): \(error)"))
        }
        let (pool, eventLoop) = (threadPool, connection.eventLoop)
        func read(_ offset: UInt64) -> EventLoopFuture<ByteBuffer> {
            pool.runIfActive(eventLoop: eventLoop) {
                try handle.withUnsafeFileDescriptor { fd in
                    var buffer = ByteBufferAllocator().buffer(capacity: chunkSize)
                    let count = Int(min(UInt64(chunkSize), file.size - offset))
                    let read = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { pointer in
                        PositionalRead.read(fd, into: UnsafeMutableRawBufferPointer(rebasing: pointer.prefix(count)), at: offset)
                    }
                    guard read == count else { throw RecordingError.fileShrank(url.path, agent: agentID) }
                    return buffer
                }
            }
        }
        var offset = request.offset
        // The chunk being read while the one before it is sent; awaited before the file is closed on every
        // way out, so the descriptor is never closed under a read.
        var next: EventLoopFuture<ByteBuffer>? = read(offset)
        let started = ContinuousClock.now
        var sent: UInt64 = 0
        while let reading = next {
            next = nil
            let chunk: ByteBuffer
            do {
                chunk = try await reading.get()
            } catch {
                await fail(WireError(.internal, agent: agentID, "agent \(agentID) could not read '\(request.name)': \(error)"))
                break
            }
            let chunkOffset = offset
            offset += UInt64(chunk.readableBytes)
            let last = offset >= file.size
            if !last { next = read(offset) }
            var message = WireFileChunk()
            message.name = request.name
            message.offset = chunkOffset
            message.size = file.size
            message.last = last
            do {
                try await connection.send(WireFrame(requestID: requestID, .fileChunk(message), payload: chunk))
            } catch let error as WireProtocolError where error.code == .frameTooLarge {
                // Every request gets a reply: a chunk that cannot be sent says why, and the file stays.
                await fail(WireError(.invalidArgument, agent: agentID, "agent \(agentID) cannot send '\(request.name)' in chunks of \(chunkSize) bytes: \(error.message); ask for smaller chunk_bytes"))
                break
            } catch {
                // The connection is gone: the file stays for the next fetch.
                break
            }
            sent += UInt64(chunk.readableBytes)
            if request.maxBytesPerSecond > 0 {
                let due = Duration.nanoseconds(Int64(Double(sent) / Double(request.maxBytesPerSecond) * 1e9))
                let elapsed = ContinuousClock.now - started
                if due > elapsed { try? await Task.sleep(for: due - elapsed) }
            }
        }
        if let next { _ = try? await next.get() }
        do {
            try await threadPool.runIfActive { try handle.close() }
        } catch {
            logger.warning("cannot close a recorded file after sending it", metadata: ["file": "\(url.path)", "error": "\(error)"])
        }
    }

    /// Deletes acknowledged files; the recording's folder goes with its last file. A file or recording
    /// acknowledged before (an acknowledgement repeated after its answer was lost) is Ok again.
    func acknowledge(_ request: WireAcknowledgeRecording) async -> WireEnvelope.OneOf_Body {
        let id = request.recordingID
        guard Self.isSafeName(id) else {
            return .error(WireError(.invalidArgument, agent: agentID, "recording id '\(id)' is not one an agent makes"))
        }
        guard !isRunning(id) else {
            return .error(WireError(.notFound, agent: agentID, "agent \(agentID)'s recording '\(id)' is still recording: acknowledge it once it has ended"))
        }
        let folder = directory.appendingPathComponent(id)
        let agentID = self.agentID
        let remembered = acknowledged
        let outcome: Result<Acknowledged, Error>
        do {
            outcome = .success(try await threadPool.runIfActive { () -> Acknowledged in
                guard var summary = Self.summary(in: folder), summary.state != .recording else {
                    return Acknowledged(unknown: request.names.isEmpty ? [""] : request.names)
                }
                let held = summary.tracks.flatMap(\.files)
                let names = request.names.isEmpty ? Set(held.map(\.name)) : Set(request.names)
                var done = Acknowledged(deleted: held.filter { names.contains($0.name) }, unknown: names.subtracting(held.map(\.name)).sorted())
                for file in done.deleted {
                    try? FileManager.default.removeItem(at: folder.appendingPathComponent(file.name))
                    try? FileManager.default.removeItem(at: folder.appendingPathComponent(".\(file.name).upload"))
                }
                for index in summary.tracks.indices { summary.tracks[index].files.removeAll { names.contains($0.name) } }
                guard summary.tracks.allSatisfy(\.files.isEmpty) else {
                    // The files are gone whatever happens next: what was deleted is reported either way.
                    do {
                        try DurableFile.write(try summary.serializedBytes() as [UInt8], to: folder.appendingPathComponent("state.pb"))
                    } catch {
                        done.failure = "\(error)"
                    }
                    return done
                }
                // The last file: the agent's own files go, and the folder with them when nothing else is left.
                let own = Set(["request.pb", "state.pb"] + summary.tracks.map { "\($0.fileStem).json" })
                for name in own { try? FileManager.default.removeItem(at: folder.appendingPathComponent(name)) }
                _ = rmdir(folder.path)
                done.recordingGone = true
                do {
                    try DurableFile.flushDirectory(folder.deletingLastPathComponent())
                } catch {
                    done.failure = "\(error)"
                }
                return done
            })
        } catch {
            outcome = .failure(error)
        }
        switch outcome {
        case .failure(let error):
            return .error(WireError(.internal, agent: agentID, "agent \(agentID) could not delete acknowledged files of '\(id)': \(error)"))
        case .success(let done):
            for file in done.deleted { acknowledged.insert("\(id)/\(file.name)") }
            if done.recordingGone { acknowledged.insert("\(id)/") }
            settledBytes = settledBytes.map { used in used - min(used, done.deleted.reduce(0) { $0 + $1.size }) }
            if let failure = done.failure {
                return .error(WireError(.internal, agent: agentID, "agent \(agentID) deleted the acknowledged files of '\(id)' but could not record it on disk: \(failure)"))
            }
            // "": the whole recording was asked for.
            let forgotten = done.unknown.filter { !remembered.contains("\(id)/\($0)") }
            guard forgotten.isEmpty else {
                let what = forgotten == [""] ? "recording '\(id)'" : "file \(forgotten.joined(separator: ", ")) of recording '\(id)'"
                return .error(WireError(.notFound, agent: agentID, "agent \(agentID) holds no \(what) (never recorded here, or acknowledged before the agent restarted)"))
            }
            return .ok(WireOk())
        }
    }

    /// What an acknowledgement deleted, and the names it asked for that the agent does not hold.
    struct Acknowledged: Sendable {
        var deleted: [WireRecordedFile] = []
        var unknown: [String] = []
        /// The recording's last file went, and its folder with it.
        var recordingGone = false
        /// The deletions could not be made durable (the files are gone all the same).
        var failure: String?
    }
}

/// Why a recording could not start or a file could not be sent, named for what failed.
enum RecordingError: Error, Sendable {
    case deviceGone(String, agent: String)
    case exists(String, agent: String)
    case cannotCreate(String, agent: String, underlying: String)
    case cannotOpenFiles(String, agent: String, underlying: String)
    case fileShrank(String, agent: String)
    case shuttingDown(agent: String)

    /// The error as the protocol carries it.
    var wire: WireError {
        switch self {
        case .deviceGone(let device, let agent):
            WireError(.deviceNotFound, agent: agent, device: device, "device '\(device)' left agent \(agent) before its recording started: check its cable and `camrig devices`")
        case .exists(let id, let agent):
            WireError(.invalidArgument, agent: agent, "agent \(agent) already has a recording '\(id)'")
        case .cannotCreate(let path, let agent, let underlying):
            WireError(.spoolFull, agent: agent, "agent \(agent) cannot create its recording in \(path): \(underlying)")
        case .cannotOpenFiles(let id, let agent, let underlying):
            WireError(.internal, agent: agent, "agent \(agent) cannot open recording '\(id)''s files: \(underlying)")
        case .fileShrank(let path, let agent):
            WireError(.internal, agent: agent, "\(path) on agent \(agent) is shorter than its recorded size")
        case .shuttingDown(let agent):
            WireError(.shuttingDown, agent: agent, "agent \(agent) is shutting down: its disk thread has stopped")
        }
    }
}

/// Why a track cannot be recorded with the codec asked for.
struct CodecRefusal: Error {
    var reason: String
    init(_ reason: String) { self.reason = reason }
}

extension RigClockMapping {
    init(_ wire: WireClockMapping) {
        self.init(
            agentReference: wire.agentReferenceNs, rigReference: wire.rigReferenceNs, rigPerAgent: wire.rigPerAgent == 0 ? 1 : wire.rigPerAgent,
            uncertainty: wire.uncertaintyNs, uncertaintyGrowthPPM: wire.uncertaintyGrowthPpm)
    }
}
