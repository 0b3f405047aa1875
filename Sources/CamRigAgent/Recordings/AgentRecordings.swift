import CamRigClock
import CamRigDevices
import CamRigFiles
import CamRigMedia
import CamRigCapture
import CamRigObjectStore
import CamRigWire
import CamRigWireModel
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// On-host recordings: each recording is a folder under `directory` holding its request
/// (`request.pb`), its state (`state.pb`) and, per camera, video segments and sidecars. Files stay until
/// the client acknowledges them; a recording the agent did not finish (killed, powered off) is closed by
/// the next start and marked cut short.
///
/// Which recordings run, and their tracks, is one `State` under one lock; tracks write on queues of their
/// own, and files are read for fetches on the thread pool.
public final class AgentRecordings: Sendable {
    public let directory: URL
    /// The most the recordings may take on disk (nil: the disk's free space less `reserveBytes`).
    let capacityBytes: UInt64?
    /// Free space a recording leaves on the disk for everything else.
    let reserveBytes: UInt64
    let agentID: String
    private let streams: AgentStreams
    private let clock: HostClock
    private let threadPool: NIOThreadPool
    let logger: Logger

    struct Active {
        var request: WireStartRecording
        var recorders: [TrackRecorder]
        var finished: [String: WireRecordedTrack] = [:]

        /// Every track as the state file keeps it: closed ones as they closed, the others as recording.
        var tracks: [WireRecordedTrack] {
            recorders.map { recorder in
                finished[recorder.plan.deviceID] ?? AgentRecordings.recordingTrack(recorder.plan)
            }
        }
        var watchers: [(requestID: UInt64, connection: AgentRequestRouter.Connection)] = []
        var tasks: [Task<Void, Never>] = []
    }

    struct State {
        var active: [String: Active] = [:]
        /// Waiting for every recording to end (shutdown).
        var idle: [CheckedContinuation<Void, Never>] = []
    }

    private let state = NIOLockedValueBox(State())
    /// Where recordings' state files are written, one after another in the order they were decided.
    private let stateFiles = DispatchQueue(label: "camrig.recordings.state")

    init(
        directory: URL, capacityBytes: UInt64?, reserveBytes: UInt64 = 256 << 20, agentID: String, streams: AgentStreams,
        threadPool: NIOThreadPool, logger: Logger
    ) throws {
        self.directory = directory
        self.capacityBytes = capacityBytes
        self.reserveBytes = reserveBytes
        self.agentID = agentID
        self.streams = streams
        self.clock = streams.devices.clock
        self.threadPool = threadPool
        self.logger = logger
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    /// Closes, on a thread of its own, the recordings a previous run left open; until each is closed it
    /// lists as recording, so nobody fetches its files half-made.
    func closeCutShortRecordingsInBackground() {
        Thread.detachNewThread { [self] in closeCutShortRecordings() }
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

    /// Free space the recordings may still use.
    func availableBytes() -> UInt64 {
        var stats = statvfs()
        let free: UInt64 = statvfs(directory.path, &stats) == 0 ? UInt64(stats.f_bavail) * UInt64(stats.f_frsize) : 0
        let disk = free > reserveBytes ? free - reserveBytes : 0
        guard let capacityBytes else { return disk }
        let used = Self.size(of: directory)
        return min(disk, capacityBytes > used ? capacityBytes - used : 0)
    }

    private static func size(of folder: URL) -> UInt64 {
        guard let walker = FileManager.default.enumerator(at: folder, includingPropertiesForKeys: [.fileSizeKey]) else { return 0 }
        var total: UInt64 = 0
        for case let url as URL in walker {
            total += UInt64((try? url.resourceValues(forKeys: [.fileSizeKey]).fileSize) ?? 0)
        }
        return total
    }

    /// Whether `tracks` fit for `duration`: the check, or an error for a device or codec that cannot record.
    func check(_ tracks: [WireRecordingTrack], duration: Int64) -> WireEnvelope.OneOf_Body {
        guard !tracks.isEmpty else { return .error(WireError(.invalidArgument, agent: agentID, "a recording needs at least one track")) }
        guard duration > 0 else { return .error(WireError(.invalidArgument, agent: agentID, "a recording needs a positive duration")) }
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
        check.availableBytes = availableBytes()
        if check.neededBytes > check.availableBytes {
            check.refusal =
                "agent \(agentID) has room for \(Self.megabytes(check.availableBytes)) of recordings in \(directory.path) and this recording needs about \(Self.megabytes(check.neededBytes)): free space there (acknowledge or offload earlier recordings), record for less time, or choose a smaller codec"
        }
        return .recordingCheck(check)
    }

    static func megabytes(_ bytes: UInt64) -> String {
        bytes >= 10 << 30 ? "\(bytes >> 30) GiB" : "\(bytes >> 20) MiB"
    }

    // MARK: Recording

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
            let frameDuration = FrameDuration(numerator: request.frameDuration.numerator, denominator: request.frameDuration.denominator)
        else {
            return reply(.error(WireError(.invalidArgument, agent: agentID, "a recording needs frame_count ≥ 1, a positive grid_period_ns and a frame_duration")))
        }
        let stems = request.tracks.map(\.fileStem)
        guard stems.allSatisfy(Self.isSafeName), Set(stems).count == stems.count else {
            return reply(.error(WireError(.invalidArgument, agent: agentID, "every track needs its own file_stem of letters, digits, '-', '_' or '.'")))
        }
        let duration = Int64(request.gridPeriodNs * Double(request.frameCount))
        let answer = self.check(request.tracks, duration: duration)
        guard case .recordingCheck(let check) = answer else { return reply(answer) }
        guard check.refusal.isEmpty else { return reply(.error(WireError(.spoolFull, agent: agentID, check.refusal))) }
        let folder = directory.appendingPathComponent(request.recordingID)
        let taken = state.withLockedValue { $0.active[request.recordingID] != nil } || FileManager.default.fileExists(atPath: folder.path)
        guard !taken else {
            return reply(.error(WireError(.invalidArgument, agent: agentID, "agent \(agentID) already has a recording '\(request.recordingID)'")))
        }
        var resolved = request
        for index in resolved.tracks.indices { resolved.tracks[index].codec = check.tracks[index].codec }
        do {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: false)
            try DurableFile.write(try resolved.serializedBytes() as [UInt8], to: folder.appendingPathComponent("request.pb"))
            try Self.writeState(.recording, tracks: [], of: resolved, in: folder)
        } catch {
            return reply(.error(WireError(.spoolFull, agent: agentID, "agent \(agentID) cannot create its recording in \(folder.path): \(error)")))
        }
        let grid = RecordingGrid(start: request.startAtNs, period: request.gridPeriodNs, count: Int64(request.frameCount))
        let mapping = RigClockMapping(request.clock)
        var recorders: [TrackRecorder] = []
        do {
            for (index, track) in resolved.tracks.enumerated() {
                guard let device = streams.devices.discovery.device(uniqueID: track.deviceID) else { throw MediaFileError("device '\(track.deviceID)' is gone") }
                let plan = TrackRecorder.Plan(
                    deviceID: track.deviceID, stem: track.fileStem, codec: track.codec, format: device.activeFormat,
                    jpegQuality: Int32(track.jpegQuality == 0 ? 90 : min(track.jpegQuality, 100)), grid: grid, clock: mapping,
                    frameDuration: frameDuration, segmentBytes: Int64(request.segmentBytes == 0 ? 4 << 30 : request.segmentBytes),
                    segmentFrames: Int64(request.segmentFrames), folder: folder,
                    metadata: [
                        ("CAMRIG_RECORDING", request.recordingID), ("CAMRIG_SESSION", request.sessionID), ("CAMRIG_AGENT", agentID),
                        ("CAMRIG_DEVICE", track.deviceID), ("CAMRIG_CAMERA", device.identity.localizedName),
                        ("CAMRIG_TIMESTAMPS", "exposure start on the rig's clock; exact nanoseconds in \(track.fileStem).frames.csv"),
                        ("CAMRIG_TRACK", "\(index)"),
                    ])
                let id = request.recordingID
                recorders.append(try TrackRecorder(plan: plan) { [weak self] track in self?.trackFinished(track, recording: id) })
            }
        } catch {
            try? FileManager.default.removeItem(at: folder)
            return reply(.error(WireError(.internal, agent: agentID, "agent \(agentID) cannot open the recording's files: \(error)")))
        }
        let active = Active(request: resolved, recorders: recorders, watchers: [(requestID, connection)])
        try? Self.writeState(.recording, tracks: active.tracks, of: resolved, in: folder)
        state.withLockedValue { $0.active[request.recordingID] = active }
        var started = WireRecordingStarted()
        started.recordingID = request.recordingID
        started.tracks = check.tracks
        reply(.recordingStarted(started))
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
            if case .failed(let error) = await streams.startAfterPreviousStream(deviceID: recorder.plan.deviceID, subscriber: recorder) {
                recorder.close(error: "the camera did not stream: \(error.message)")
            }
        }
        logger.info("recording", metadata: ["recording": "\(request.recordingID)", "tracks": "\(recorders.count)", "frames": "\(request.frameCount)"])
        let progress = progressTask(recording: request.recordingID, interval: request.progressIntervalMs == 0 ? 1000 : Int(request.progressIntervalMs))
        // The tracks close at their last grid instant's frame. A camera that stops delivering is closed a
        // second after the recording's end all the same; one still delivering (behind) gets up to ten.
        let end = grid.instant(grid.count) + Int64(grid.period)
        let deadline = Task { [clock] in
            let wait = end + 1_000_000_000 - clock.now()
            if wait > 0 { try? await Task.sleep(for: .nanoseconds(wait)) }
            var open = recorders
            while !Task.isCancelled {
                let now = HostClock.monotonicNow()
                let (late, behind) = open.reduce(into: ([TrackRecorder](), [TrackRecorder]())) { split, recorder in
                    let progress = recorder.progress
                    guard progress.finished == nil else { return }
                    if now - progress.lastDelivery < 1_000_000_000 && clock.now() < end + 10_000_000_000 {
                        split.1.append(recorder)
                    } else {
                        split.0.append(recorder)
                    }
                }
                for recorder in late { recorder.close() }
                open = behind
                if open.isEmpty { return }
                try? await Task.sleep(for: .milliseconds(250))
            }
        }
        let running = state.withLockedValue { state -> Bool in
            guard state.active[request.recordingID] != nil else { return false }
            state.active[request.recordingID]!.tasks = [progress, deadline]
            return true
        }
        // Every track closed already (no camera streamed): nothing is left to wait for.
        if !running {
            progress.cancel()
            deadline.cancel()
        }
    }

    private func progressTask(recording: String, interval: Int) -> Task<Void, Never> {
        Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(interval))
                guard !Task.isCancelled, let self else { return }
                guard let (recorders, watchers) = self.state.withLockedValue({ state in state.active[recording].map { ($0.recorders, $0.watchers) } }) else { return }
                var progress = WireRecordingProgress()
                progress.recordingID = recording
                progress.timeNs = self.clock.now()
                progress.tracks = recorders.map { recorder in
                    let snapshot = recorder.progress
                    var track = WireTrackProgress()
                    track.deviceID = recorder.plan.deviceID
                    track.frames = snapshot.frames
                    track.gaps = snapshot.gaps
                    track.bytes = snapshot.bytes
                    track.error = snapshot.error ?? ""
                    return track
                }
                for watcher in watchers { watcher.connection.write(WireFrame(requestID: watcher.requestID, .recordingProgress(progress)), nil) }
            }
        }
    }

    /// A track closed: its stream stops, and once every track of the recording has, the recording ends.
    ///
    /// The state file is written on one serial queue, in the order the critical section decides: two
    /// tracks closing at once never write it out of order (an older "recording" state written last would
    /// hide the files of the track that closed second from the offload), and no lock is held, nor event
    /// loop kept waiting, while it is flushed. The end is announced once the final state is on disk.
    private func trackFinished(_ track: WireRecordedTrack, recording: String) {
        let folder = directory.appendingPathComponent(recording)
        let (logger, stateFiles) = (self.logger, self.stateFiles)
        let outcome = state.withLockedValue { state -> (active: Active, done: Bool)? in
            guard var active = state.active[recording] else { return nil }
            active.finished[track.deviceID] = track
            let done = active.finished.count == active.recorders.count
            if done { state.active[recording] = nil } else { state.active[recording] = active }
            let (tracks, request, watchers) = (active.tracks, active.request, done ? active.watchers : [])
            let recordingState: WireRecordingState =
                !done ? .recording : tracks.allSatisfy { $0.state == .complete } ? .complete : .failed
            stateFiles.async {
                do {
                    // Closed tracks are remembered as they close: a crash later leaves them as they are.
                    try Self.writeState(recordingState, tracks: tracks, of: request, in: folder)
                } catch {
                    logger.error("cannot record a recording's state", metadata: ["recording": "\(recording)", "error": "\(error)"])
                }
                guard done else { return }
                logger.info(
                    "recording ended",
                    metadata: ["recording": "\(recording)", "state": "\(recordingState)", "frames": "\(tracks.map(\.frames))", "gaps": "\(tracks.map(\.gaps))"])
                var ended = WireRecordingEnded()
                ended.recordingID = recording
                ended.tracks = tracks
                for watcher in watchers { watcher.connection.write(WireFrame(requestID: watcher.requestID, .recordingEnded(ended)), nil) }
            }
            return (active, done)
        }
        defer {
            let waiting = state.withLockedValue { state -> [CheckedContinuation<Void, Never>] in
                guard state.active.isEmpty else { return [] }
                defer { state.idle = [] }
                return state.idle
            }
            for continuation in waiting { continuation.resume() }
        }
        guard let (active, done) = outcome else { return }
        if let recorder = active.recorders.first(where: { $0.plan.deviceID == track.deviceID }) {
            streams.devices.queue.async { self.streams.stop(streamID: recorder.streamID, reason: .stopped) }
        }
        guard done else { return }
        for task in active.tasks { task.cancel() }
    }

    /// Ends a recording at its next grid instant.
    func stop(_ recordingID: String) -> WireEnvelope.OneOf_Body {
        guard let recorders = state.withLockedValue({ $0.active[recordingID]?.recorders }) else {
            return .error(WireError(.notFound, agent: agentID, "agent \(agentID) records nothing called '\(recordingID)'"))
        }
        let now = clock.now()
        for recorder in recorders { recorder.stop(at: now) }
        // A camera that has stopped delivering closes a second after the stop, not at the planned end.
        let period = recorders.first?.plan.grid.period ?? 0
        Task {
            try? await Task.sleep(for: .nanoseconds(Int64(2 * period) + 1_000_000_000))
            for recorder in recorders where recorder.progress.finished == nil { recorder.close() }
        }
        return .ok(WireOk())
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

    /// The recordings on disk (of `session` when not empty), running ones with their progress so far.
    func list(session: String) -> WireRecordingList {
        let running = state.withLockedValue { $0.active.mapValues { ($0.request, $0.recorders) } }
        var list = WireRecordingList()
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []).sorted()
        for name in names {
            if let (request, recorders) = running[name] {
                guard session.isEmpty || request.sessionID == session else { continue }
                var summary = WireRecordingSummary()
                summary.recordingID = name
                summary.sessionID = request.sessionID
                summary.state = .recording
                summary.tracks = recorders.map { recorder in
                    var track = Self.recordingTrack(recorder.plan)
                    track.frames = recorder.progress.frames
                    track.gaps = recorder.progress.gaps
                    return track
                }
                list.recordings.append(summary)
                continue
            }
            let url = directory.appendingPathComponent(name).appendingPathComponent("state.pb")
            guard let data = try? Data(contentsOf: url), let summary = try? WireRecordingSummary(serializedBytes: data),
                session.isEmpty || summary.sessionID == session
            else { continue }
            list.recordings.append(summary)
        }
        return list
    }

    /// The file `name` of a finished recording, if the agent holds it.
    func file(_ recordingID: String, _ name: String) -> WireRecordedFile? {
        guard Self.isSafeName(recordingID), Self.isSafeName(name), state.withLockedValue({ $0.active[recordingID] == nil }) else { return nil }
        let url = directory.appendingPathComponent(recordingID).appendingPathComponent("state.pb")
        guard let data = try? Data(contentsOf: url), let summary = try? WireRecordingSummary(serializedBytes: data) else { return nil }
        return summary.tracks.lazy.flatMap(\.files).first { $0.name == name }
    }

    // MARK: Offload

    /// Sends `name` from `offset` on as `FileChunk`s, reading the next chunk while one is sent.
    func fetch(_ request: WireFetchRecordingFile, requestID: UInt64, connection: AgentRequestRouter.Connection) async {
        guard let file = file(request.recordingID, request.name) else {
            try? await connection.send(WireFrame(requestID: requestID, .error(WireError(
                .notFound, agent: agentID, "agent \(agentID) holds no finished file '\(request.name)' of recording '\(request.recordingID)' (never recorded here, still recording, or acknowledged)"))))
            return
        }
        guard request.offset <= file.size else {
            try? await connection.send(WireFrame(requestID: requestID, .error(WireError(
                .outOfRange, agent: agentID, "offset \(request.offset) is past the end of '\(request.name)' (\(file.size) bytes)"))))
            return
        }
        let chunkSize = Int(request.chunkBytes == 0 ? 1 << 20 : min(request.chunkBytes, 4 << 20))
        let url = directory.appendingPathComponent(request.recordingID).appendingPathComponent(request.name)
        let handle: NIOFileHandle
        do {
            handle = try await threadPool.runIfActive { try NIOFileHandle(_deprecatedPath: url.path) }
        } catch {
            try? await connection.send(WireFrame(requestID: requestID, .error(WireError(.notFound, agent: agentID, "cannot open \(url.path): \(error)"))))
            return
        }
        let pool = threadPool
        func read(_ offset: UInt64) -> Task<ByteBuffer?, Never> {
            Task {
                try? await pool.runIfActive {
                    try handle.withUnsafeFileDescriptor { fd in
                        var buffer = ByteBufferAllocator().buffer(capacity: chunkSize)
                        let count = Int(min(UInt64(chunkSize), file.size - offset))
                        let read = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { pointer in
                            var done = 0
                            while done < count {
                                let n = pread(fd, pointer.baseAddress! + done, count - done, off_t(offset) + off_t(done))
                                if n <= 0 { break }
                                done += n
                            }
                            return done
                        }
                        guard read == count else { throw MediaFileError("\(url.path) is shorter than its recorded size") }
                        return buffer
                    }
                }
            }
        }
        var offset = request.offset
        // The chunk being read while the one before it is sent; awaited before the file is closed on every
        // way out, so the descriptor is never closed under a read.
        var next: Task<ByteBuffer?, Never>? = read(offset)
        let started = ContinuousClock.now
        var sent: UInt64 = 0
        while let reading = next {
            next = nil
            guard let chunk = await reading.value else {
                try? await connection.send(WireFrame(requestID: requestID, .error(WireError(.internal, agent: agentID, "agent \(agentID) could not read '\(request.name)'"))))
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
        if let next { _ = await next.value }
        do {
            try handle.close()
        } catch {
            logger.warning("cannot close a recorded file after sending it", metadata: ["file": "\(url.path)", "error": "\(error)"])
        }
    }

    /// Deletes acknowledged files; the recording's folder goes with its last file.
    func acknowledge(_ request: WireAcknowledgeRecording) async -> WireEnvelope.OneOf_Body {
        let folder = directory.appendingPathComponent(request.recordingID)
        guard Self.isSafeName(request.recordingID), state.withLockedValue({ $0.active[request.recordingID] == nil }) else {
            return .error(WireError(.notFound, agent: agentID, "agent \(agentID) holds no finished recording '\(request.recordingID)'"))
        }
        let agentID = self.agentID
        do {
            // Read, changed and written on the spool's one thread: acknowledgements of one recording from
            // several connections never undo each other.
            return try await threadPool.runIfActive { () -> WireEnvelope.OneOf_Body in
                guard let data = try? Data(contentsOf: folder.appendingPathComponent("state.pb")),
                    var summary = try? WireRecordingSummary(serializedBytes: data), summary.state != .recording
                else {
                    return .error(WireError(.notFound, agent: agentID, "agent \(agentID) holds no finished recording '\(request.recordingID)'"))
                }
                let held = Set(summary.tracks.flatMap(\.files).map(\.name))
                let names = request.names.isEmpty ? held : Set(request.names)
                let unknown = names.subtracting(held)
                guard unknown.isEmpty else {
                    return .error(WireError(.notFound, agent: agentID, "recording '\(request.recordingID)' on agent \(agentID) has no file \(unknown.sorted().joined(separator: ", "))"))
                }
                for name in names {
                    try? FileManager.default.removeItem(at: folder.appendingPathComponent(name))
                    try? FileManager.default.removeItem(at: folder.appendingPathComponent(".\(name).upload"))
                }
                for index in summary.tracks.indices { summary.tracks[index].files.removeAll { names.contains($0.name) } }
                guard summary.tracks.allSatisfy(\.files.isEmpty) else {
                    try DurableFile.write(try summary.serializedBytes() as [UInt8], to: folder.appendingPathComponent("state.pb"))
                    return .ok(WireOk())
                }
                // The last file: the agent's own files go, and the folder with them when nothing else is left.
                let own = Set(["request.pb", "state.pb"] + summary.tracks.map { "\($0.fileStem).json" })
                for name in own { try? FileManager.default.removeItem(at: folder.appendingPathComponent(name)) }
                _ = rmdir(folder.path)
                try DurableFile.flushDirectory(folder.deletingLastPathComponent())
                return .ok(WireOk())
            }
        } catch {
            return .error(WireError(.internal, agent: agentID, "agent \(agentID) could not delete acknowledged files: \(error)"))
        }
    }

    /// Ends every recording (agent shutdown): each track closes its files as they are; returns once all have.
    func stopAll() async {
        let recorders = state.withLockedValue { $0.active.values.flatMap(\.recorders) }
        for recorder in recorders { recorder.close(error: "the agent shut down during the recording") }
        await withCheckedContinuation { continuation in
            let idle = state.withLockedValue { state -> Bool in
                if state.active.isEmpty { return true }
                state.idle.append(continuation)
                return false
            }
            if idle { continuation.resume() }
        }
        // The state files of the recordings just closed are on disk before the agent goes.
        await withCheckedContinuation { continuation in stateFiles.async { continuation.resume() } }
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

