import CamRigDeviceModel
import CamRigText
import CamRigViews
import ArgumentParser
import CamRigCLI
import CamRigClock
import CamRigCoordinator
import CamRigDevices
import CamRigLocalRig
import CamRigWire
import CamRigWireModel
import Foundation
import Logging
import NIOCore

/// `camrig-bench photo`: what each photo quality prioritization delivers on an agent's synthetic
/// cameras, measured against the noise-free render of the scene at each photo's exposure instant.
struct PhotoBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "photo",
        abstract: "Photo quality levels: PSNR against the noise-free scene, capture latency unprepared and prepared, frames merged."
    )

    @Option(name: .long, help: "Photos per level and camera.")
    var photos = 10

    @Option(name: .long, help: "Synthetic cameras on the agent.")
    var cameras = 2

    @Option(name: .long, help: "Quality photos per camera in the burst rows (0: no burst rows).")
    var burst = 10

    @Option(name: .long, help: "The format of the burst rows.")
    var burstFormat = "YUYV-1280x720"

    @Option(name: .long, help: "Photos per row on an emulated V4L2 camera (0 skips those rows).")
    var v4l2Photos = 10

    @Option(name: .long, help: "The emulated V4L2 camera's start-up delay, from STREAMON to its first frame, in milliseconds.")
    var v4l2StartupMilliseconds = 150

    @OptionGroup var options: BenchOptions

    /// Photos of an emulated V4L2 camera, which takes a start-up delay before its first frame.
    typealias V4L2Row = PhotoLatencyRow

    /// A burst of quality photos taken as fast as each camera is ready for the next.
    struct BurstRow: Encodable {
        var responsiveCapture: Bool
        var deferredDelivery: Bool
        var photos: Int
        /// From one photo's request to the next one's on the same camera.
        var shotToShotMilliseconds: Distribution
        /// From the first request to the last photo (or proxy) in the spool, per camera.
        var burstMilliseconds: Distribution
        /// Deferred: from the last proxy to every final made (FinalizePhotos), per camera.
        var finalsMilliseconds: Distribution?
        var processingMilliseconds: Distribution
        var framesMerged: Int
    }

    struct Row: Encodable {
        var quality: String
        /// Whether the cameras were prepared with these settings (`PreparePhotoSettings`) first.
        var prepared: Bool
        var photos: Int
        var psnrDecibels: Distribution
        /// Request sent to `TriggerFired` received: capture and processing stages together.
        var latencyMilliseconds: Distribution
        var captureStageMilliseconds: Distribution
        var processingMilliseconds: Distribution
        var framesMerged: Int
        var notes: [String]
    }

    /// What one pass's `FetchResults` brought back, measured as it came.
    struct FetchedPhotos: Sendable {
        var resultIDs: [String] = []
        var psnrs: [Double] = []
        var captureStages: [Double] = []
        var processing: [Double] = []
        var merged = 0
        var notes: Set<String> = []
        /// The photos' format (the last one's).
        var format: String?
    }

    struct Result: BenchResult {
        var scenario = "photo"
        var machine: MachineDescription
        var format: String
        var rows: [Row]
        /// Median PSNR of quality photos over speed photos (goal ≥ 6 dB).
        var qualityOverSpeedDecibels: Double
        /// Median capture latency of prepared over unprepared photos, per level.
        var preparedOverUnpreparedLatency: [String: Double]
        var burstFormat: String
        var burstRows: [BurstRow]
        /// Median shot-to-shot delay without responsive capture and deferred delivery over with them (goal ≥ 3×).
        var burstSpeedup: Double
        var v4l2StartupMilliseconds: Int
        var v4l2Rows: [V4L2Row]

        var text: String {
            var lines = ["photo: quality prioritization on synthetic cameras, \(format), PSNR of the luma against the noise-free scene; \(machine.text)"]
            lines.append(table(
                ["QUALITY", "PREPARED", "PHOTOS", "PSNR dB P50", "PSNR dB MIN", "LATENCY ms P50", "P99", "CAPTURE STAGE ms P50", "PROCESSING ms P50", "FRAMES"],
                rows.map { [
                    $0.quality, $0.prepared ? "yes" : "no", "\($0.photos)", String(format: "%.2f", $0.psnrDecibels.p50), String(format: "%.2f", $0.psnrDecibels.min),
                    String(format: "%.1f", $0.latencyMilliseconds.p50), String(format: "%.1f", $0.latencyMilliseconds.p99),
                    String(format: "%.1f", $0.captureStageMilliseconds.p50), String(format: "%.1f", $0.processingMilliseconds.p50), "\($0.framesMerged)",
                ] }
            ))
            lines.append(String(format: "quality over speed: %+.2f dB (goal ≥ 6 dB)", qualityOverSpeedDecibels))
            let latency = PhotoQualityPrioritization.allCases.map { "\($0): \(times(preparedOverUnpreparedLatency[$0.description] ?? .nan))" }
            lines.append("latency prepared / unprepared, p50: " + latency.joined(separator: ", "))
            for row in rows { for note in row.notes { lines.append("  \(row.quality): \(note)") } }
            if !burstRows.isEmpty {
                lines.append("burst of quality photos on prepared cameras, \(burstFormat), each photo requested as soon as its camera is ready:")
                lines.append(table(
                    ["RESPONSIVE", "DEFERRED", "PHOTOS", "SHOT-TO-SHOT ms P50", "P99", "BURST ms P50", "FINALS ms P50", "PROCESSING ms P50", "FRAMES"],
                    burstRows.map { [
                        $0.responsiveCapture ? "on" : "off", $0.deferredDelivery ? "on" : "off", "\($0.photos)", String(format: "%.1f", $0.shotToShotMilliseconds.p50),
                        String(format: "%.1f", $0.shotToShotMilliseconds.p99), String(format: "%.1f", $0.burstMilliseconds.p50),
                        $0.finalsMilliseconds.map { String(format: "%.1f", $0.p50) } ?? "-", String(format: "%.1f", $0.processingMilliseconds.p50), "\($0.framesMerged)",
                    ] }
                ))
                lines.append("shot to shot, off / on: \(times(burstSpeedup)) (goal ≥ 3×)")
            }
            if !v4l2Rows.isEmpty {
                lines.append("emulated V4L2 camera (its first frame \(v4l2StartupMilliseconds) ms after STREAMON), in its default format:")
                lines.append(table(
                    ["QUALITY", "PREPARED", "PHOTOS", "LATENCY ms P50", "P99", "CAPTURE STAGE ms P50"],
                    v4l2Rows.map { [
                        $0.quality, $0.prepared ? "yes" : "no", "\($0.photos)", String(format: "%.1f", $0.latencyMilliseconds.p50),
                        String(format: "%.1f", $0.latencyMilliseconds.p99), String(format: "%.1f", $0.captureStageMilliseconds.p50),
                    ] }
                ))
            }
            return lines.joined(separator: "\n")
        }
    }

    func run() async throws {
        try await options.runOnLoopbackRig(agents: [LocalAgentSpec(cameras: cameras)], measure)
    }

    func measure(_ rig: LoopbackRig, logger: Logger) async throws -> Result {
        let client = try await AgentClient.connect(to: rig.endpoints[0], security: try rig.clientSecurity(), logger: logger)
        // The agent's cameras, as LocalAgentSpec seeds them (the first agent: seed 1, then one per camera).
        let truths = (0..<cameras).map { index in
            SyntheticCamera(SyntheticCameraConfiguration(serial: SyntheticDeviceProvider.serial(index + 1), seed: 1 + UInt64(index)))
        }
        var rows: [Row] = []
        var format = ""
        let passes = [false, true].flatMap { prepared in PhotoQualityPrioritization.allCases.map { (prepared, $0) } }
        for (prepared, level) in passes {
            options.say("\(photos) \(level) photos on each of \(cameras) cameras, \(prepared ? "prepared" : "unprepared")")
            var settings = WirePhotoSettings()
            settings.qualityPrioritization = WireQualityPrioritization(level)
            for truth in truths {
                var prepare = WirePreparePhotoSettings()
                prepare.deviceID = truth.identity.uniqueID
                prepare.settings = prepared ? [settings] : []
                _ = try await client.request(.preparePhotoSettings(prepare))
            }
            // A prepared camera's stream is running before the first photo.
            if prepared { try await Task.sleep(for: .milliseconds(300)) }
            var latencies: [Double] = []
            let session = "bench-photo-\(level)-\(prepared)"
            for shot in 0..<photos {
                for (index, truth) in truths.enumerated() {
                    var capture = WireCapturePhoto()
                    capture.deviceID = truth.identity.uniqueID
                    capture.sessionID = session
                    capture.settings = settings
                    capture.settings.uniqueID = UInt64(shot * cameras + index + 1)
                    let start = ContinuousClock.now
                    let reply = try await client.request(.capturePhoto(capture)).frame.envelope.body
                    guard case .triggerFired = reply else { throw CommandFailure("\(capture.deviceID) answered a \(level) photo with \(String(describing: reply))") }
                    latencies.append((ContinuousClock.now - start).microseconds / 1000)
                }
            }
            var fetch = WireFetchResults()
            fetch.sessionID = session
            // Every photo is in the spool already (each was answered TriggerFired): fetching and measuring
            // them takes seconds, even in a debug build; the bound turns a stream that never ends into an error.
            let fetched = try await withDeadline(
                .seconds(60 + 5 * photos * cameras), "agent \(client.endpoint): the \(level) photos of session \(session) (FetchResults) to end"
            ) { [fetch] in
                var fetched = FetchedPhotos()
                for try await message in client.stream(.fetchResults(fetch)) {
                    guard case .photoResult(let result) = message.envelope.body, let image = message.payload else { continue }
                    fetched.resultIDs.append(result.resultID)
                    guard let truth = truths.first(where: { $0.identity.uniqueID == result.deviceID }),
                        PixelFormat(rawValue: result.pixelFormat) == .yuyv,
                        let header = SyntheticFrameHeader.decode(image, format: .yuyv),
                        let deviceFormat = try truth.formats().first(where: { $0.pixelFormat == .yuyv && $0.dimensions == result.dimensions.dimensions })
                    else { throw CommandFailure("a \(level) photo is not a YUYV frame of the synthetic scene") }
                    fetched.format = deviceFormat.id
                    let reference = truth.noiseFreeFrame(format: deviceFormat, header: header, trueTime: header.timestamp)
                    fetched.psnrs.append(
                        PhotoProcessing.psnr(image, against: reference, from: SyntheticScene.embeddedDataRows * Int(deviceFormat.bytesPerLine), stride: 2))
                    fetched.captureStages.append(Double(result.resolved.captureDurationNs) / 1e6)
                    fetched.processing.append(Double(result.resolved.processingDurationNs) / 1e6)
                    fetched.merged = max(fetched.merged, Int(result.resolved.framesMerged))
                    if !result.resolved.note.isEmpty { fetched.notes.insert(result.resolved.note) }
                }
                return fetched
            }
            if let fetchedFormat = fetched.format { format = fetchedFormat }
            var acknowledge = WireAcknowledgeResults()
            acknowledge.resultIds = fetched.resultIDs
            _ = try await client.request(.acknowledgeResults(acknowledge))
            rows.append(Row(
                quality: level.description, prepared: prepared, photos: fetched.psnrs.count, psnrDecibels: Distribution(fetched.psnrs),
                latencyMilliseconds: Distribution(latencies), captureStageMilliseconds: Distribution(fetched.captureStages),
                processingMilliseconds: Distribution(fetched.processing), framesMerged: fetched.merged, notes: fetched.notes.sorted()))
        }
        var burstRows: [BurstRow] = []
        if burst > 0 {
            for on in [false, true] {
                burstRows.append(try await measureBurst(client, devices: truths.map(\.identity.uniqueID), responsive: on, deferred: on))
            }
        }
        await client.close()
        func row(_ level: PhotoQualityPrioritization, prepared: Bool) -> Row { rows.first { $0.quality == level.description && $0.prepared == prepared }! }
        let gain = row(.quality, prepared: false).psnrDecibels.p50 - row(.speed, prepared: false).psnrDecibels.p50
        let latency = Dictionary(uniqueKeysWithValues: PhotoQualityPrioritization.allCases.map { level in
            (level.description, ratio(row(level, prepared: true).latencyMilliseconds.p50, row(level, prepared: false).latencyMilliseconds.p50))
        })
        let speedup = burstRows.count == 2 ? ratio(burstRows[0].shotToShotMilliseconds.p50, burstRows[1].shotToShotMilliseconds.p50) : .nan
        let v4l2Rows = try await measureV4L2(rig, logger: logger)
        return Result(
            machine: .current, format: format, rows: rows, qualityOverSpeedDecibels: gain, preparedOverUnpreparedLatency: latency, burstFormat: burstFormat,
            burstRows: burstRows, burstSpeedup: speedup, v4l2StartupMilliseconds: v4l2StartupMilliseconds, v4l2Rows: v4l2Rows)
    }

    /// Speed and balanced photos of an emulated V4L2 camera whose first frame comes a start-up delay after
    /// STREAMON, unprepared (each photo starts the camera) and prepared (it streams already); empty when the
    /// emulator is not installed.
    func measureV4L2(_ rig: LoopbackRig, logger: Logger) async throws -> [V4L2Row] {
        try await v4l2PhotoLatency(rig: rig, logger: logger, photos: v4l2Photos, startupMilliseconds: v4l2StartupMilliseconds, say: options.say)
    }

    /// Bursts of quality photos on every camera at once, each camera's next photo requested as soon as
    /// it is ready: once the previous photo is fired (in the spool), or, with responsive capture, once its
    /// capture stage has ended (its `DID_FINISH_CAPTURE` stage event).
    func measureBurst(_ client: AgentClient, devices: [String], responsive: Bool, deferred: Bool) async throws -> BurstRow {
        options.say("burst of \(burst) quality photos on each of \(devices.count) cameras, responsive \(responsive ? "on" : "off"), deferred \(deferred ? "on" : "off")")
        var settings = WirePhotoSettings()
        settings.qualityPrioritization = .quality
        settings.stageEvents = true
        for device in devices {
            var lock = WireLock()
            lock.deviceID = device
            guard case .lease(let lease) = try await client.request(.lock(lock)).frame.envelope.body else { throw CommandFailure("\(device): no lease") }
            var prepare = WirePreparePhotoSettings()
            prepare.deviceID = device
            _ = try await client.request(.preparePhotoSettings(prepare))
            var configure = WireConfigure()
            configure.deviceID = device
            configure.leaseID = lease.lease.leaseID
            configure.formatID = burstFormat
            configure.photoOutput.responsiveCapture = responsive
            configure.photoOutput.deferredDelivery = deferred
            _ = try await client.request(.configure(configure))
            var unlock = WireUnlock()
            unlock.leaseID = lease.lease.leaseID
            _ = try await client.request(.unlock(unlock))
            prepare.settings = [settings]
            _ = try await client.request(.preparePhotoSettings(prepare))
        }
        // The prepared cameras' rings fill before the first photo.
        try await Task.sleep(for: .milliseconds(500))
        let session = "bench-burst-\(responsive)-\(deferred)"
        let burst = self.burst
        // A burst photo's TriggerFired may wait for the photos queued before it on its camera to be
        // processed (quality merging, seconds each in a debug build): two minutes, and 20 s per photo of
        // the burst. Its camera's next request waits for it (or its capture stage) a little longer, so
        // that the photo's own deadline, which names it, fires first.
        let photoTimeout = Duration.seconds(120 + 20 * burst)
        let perCamera = try await withThrowingTaskGroup(of: (intervals: [Double], total: Double).self) { group in
            for device in devices {
                group.addTask { [settings] in
                    var requested: [ContinuousClock.Instant] = []
                    let start = ContinuousClock.now
                    var pending: [Task<Void, any Error>] = []
                    for shot in 0..<burst {
                        let capture = capturePhotoRequest(device: device, session: session, settings: settings, shot: shot)
                        let ready = AsyncStream<Void>.makeStream()
                        requested.append(.now)
                        let stream = client.stream(.capturePhoto(capture))
                        pending.append(Task {
                            // However this task ends (TriggerFired, an error, the stream ending or failing,
                            // the deadline), the wait for `ready` below ends too.
                            defer { ready.continuation.finish() }
                            try await withDeadline(photoTimeout, "\(device): burst photo \(shot + 1) of \(burst) (session \(session)) to be fired") {
                                var signalled = false
                                for try await message in stream {
                                    switch message.envelope.body {
                                    case .photoStage(let stage) where responsive && stage.stage == .didFinishCapture:
                                        ready.continuation.yield()
                                        signalled = true
                                    case .triggerFired:
                                        if !signalled { ready.continuation.yield() }
                                        return
                                    case .error(let error):
                                        throw CommandFailure("\(device): a burst photo failed: \(error.message)")
                                    default: continue
                                    }
                                }
                            }
                        })
                        try await withDeadline(
                            photoTimeout + .seconds(30), "\(device): burst photo \(shot + 1) of \(burst) (session \(session)) to be captured or fired"
                        ) {
                            for await _ in ready.stream { break }
                        }
                    }
                    // Each task ends by its photo's deadline at the latest.
                    for task in pending { try await task.value }
                    let total = (ContinuousClock.now - start).microseconds / 1000
                    let intervals = zip(requested.dropFirst(), requested).map { ($0 - $1).microseconds / 1000 }
                    return (intervals, total)
                }
            }
            var all: [(intervals: [Double], total: Double)] = []
            for try await camera in group { all.append(camera) }
            return all
        }
        // Deferred finals: made now, on request, and timed.
        var finals: [Double] = []
        if deferred {
            let start = ContinuousClock.now
            _ = try await client.request(.finalizePhotos(WireFinalizePhotos()), timeout: .seconds(300))
            finals.append((ContinuousClock.now - start).microseconds / 1000)
        }
        var fetch = WireFetchResults()
        fetch.sessionID = session
        // Every photo (and, deferred, its proxy) is in the spool already: fetching them takes seconds.
        let (resultIDs, processing, merged) = try await withDeadline(
            .seconds(60 + 5 * 2 * burst * devices.count), "agent \(client.endpoint): the burst photos of session \(session) (FetchResults) to end"
        ) { [fetch] in
            var resultIDs: [String] = []
            var processing: [Double] = []
            var merged = 0
            for try await message in client.stream(.fetchResults(fetch)) {
                guard case .photoResult(let result) = message.envelope.body else { continue }
                resultIDs.append(result.resultID)
                guard !result.resolved.deferredProxy else { continue }
                processing.append(Double(result.resolved.processingDurationNs) / 1e6)
                merged = max(merged, Int(result.resolved.framesMerged))
            }
            return (resultIDs, processing, merged)
        }
        var acknowledge = WireAcknowledgeResults()
        acknowledge.resultIds = resultIDs
        _ = try await client.request(.acknowledgeResults(acknowledge))
        for device in devices {
            var release = WirePreparePhotoSettings()
            release.deviceID = device
            _ = try await client.request(.preparePhotoSettings(release))
        }
        return BurstRow(
            responsiveCapture: responsive, deferredDelivery: deferred, photos: burst * devices.count,
            shotToShotMilliseconds: Distribution(perCamera.flatMap(\.intervals)), burstMilliseconds: Distribution(perCamera.map(\.total)),
            finalsMilliseconds: deferred ? Distribution(finals) : nil, processingMilliseconds: Distribution(processing), framesMerged: merged)
    }
}

/// Photos of one camera at one level, prepared or not: request to `TriggerFired`, and the capture stage.
struct PhotoLatencyRow: Encodable {
    var quality: String
    var prepared: Bool
    var photos: Int
    var latencyMilliseconds: Distribution
    var captureStageMilliseconds: Distribution
}

/// Speed and balanced photos of `device`, unprepared (each photo starts the camera) and prepared (it streams
/// already), `photos` of each, timed from the request to `TriggerFired`.
func measurePhotoLatency(
    client: AgentClient, device: String, format: String? = nil, photos: Int, label: String, say: (String) -> Void
) async throws -> [PhotoLatencyRow] {
    if let format {
        // The camera set to `format` first (at its default rate), its lease given back.
        var unlock = WireUnlock()
        unlock.leaseID = try await configureDevice(client, device: device, formatID: format)
        _ = try await client.request(.unlock(unlock))
    }
    var rows: [PhotoLatencyRow] = []
    for prepared in [false, true] {
        for level in [PhotoQualityPrioritization.speed, .balanced] {
            say("\(photos) \(level) photos on \(label), \(prepared ? "prepared" : "unprepared")")
            var settings = WirePhotoSettings()
            settings.qualityPrioritization = WireQualityPrioritization(level)
            var prepare = WirePreparePhotoSettings()
            prepare.deviceID = device
            prepare.settings = prepared ? [settings] : []
            _ = try await client.request(.preparePhotoSettings(prepare))
            if prepared { try await Task.sleep(for: .milliseconds(500)) }
            let session = "bench-\(UInt32.random(in: 0...UInt32.max))-\(level)-\(prepared)"
            var latencies: [Double] = []
            for shot in 0..<photos {
                let capture = capturePhotoRequest(device: device, session: session, settings: settings, shot: shot)
                let start = ContinuousClock.now
                let reply = try await client.request(.capturePhoto(capture)).frame.envelope.body
                guard case .triggerFired = reply else { throw CommandFailure("\(label) answered a \(level) photo with \(String(describing: reply))") }
                latencies.append((ContinuousClock.now - start).microseconds / 1000)
                // Unprepared, the camera stops after each photo; the next starts it again.
                try await Task.sleep(for: .milliseconds(100))
            }
            var fetch = WireFetchResults()
            fetch.sessionID = session
            // Every photo is in the spool already (each was answered TriggerFired): fetching them takes seconds.
            let (resultIDs, stages) = try await withDeadline(
                .seconds(60 + 5 * photos), "\(label) (agent \(client.endpoint)): the \(level) photos of session \(session) (FetchResults) to end"
            ) { [fetch] in
                var resultIDs: [String] = []
                var stages: [Double] = []
                for try await message in client.stream(.fetchResults(fetch)) {
                    guard case .photoResult(let result) = message.envelope.body else { continue }
                    resultIDs.append(result.resultID)
                    stages.append(Double(result.resolved.captureDurationNs) / 1e6)
                }
                return (resultIDs, stages)
            }
            var acknowledge = WireAcknowledgeResults()
            acknowledge.resultIds = resultIDs
            _ = try await client.request(.acknowledgeResults(acknowledge))
            rows.append(PhotoLatencyRow(
                quality: level.description, prepared: prepared, photos: latencies.count, latencyMilliseconds: Distribution(latencies),
                captureStageMilliseconds: Distribution(stages)))
        }
    }
    var release = WirePreparePhotoSettings()
    release.deviceID = device
    _ = try await client.request(.preparePhotoSettings(release))
    return rows
}

/// Photo latency rows of an emulated V4L2 camera whose first frame comes `startupMilliseconds` after
/// STREAMON, on an agent of `rig`; empty when the emulator is not installed or `photos` is 0.
func v4l2PhotoLatency(
    rig: LoopbackRig, logger: Logger, photos: Int, startupMilliseconds: Int, format: String? = nil, say: (String) -> Void
) async throws -> [PhotoLatencyRow] {
    guard photos > 0, let directory = try emulatorDirectory("/dev/shm/camrig-bench-photo", say: say) else { return [] }
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let node = "\(directory)/video0"
    _ = FileManager.default.createFile(atPath: node, contents: nil)
    try "startup_delay_us=\(startupMilliseconds * 1000)\n".write(toFile: node + ".timing", atomically: true, encoding: .utf8)
    let agent = try await rig.startAgent(LocalAgentSpec(cameras: 0, secure: false, extraArguments: ["--v4l2", node]), name: "agent-v4l2-photo")
    let client = try await AgentClient.connect(to: agent.endpoint, security: .insecure, logger: logger)
    let rows = try await measurePhotoLatency(
        client: client, device: "v4l2:camrig-emu:platform:camrig-emu-0", format: format, photos: photos, label: "an emulated V4L2 camera", say: say)
    await client.close()
    await rig.stop(agent)
    return rows
}

/// The `CapturePhoto` request of photo number `shot` (from 0) of a session.
func capturePhotoRequest(device: String, session: String, settings: WirePhotoSettings, shot: Int) -> WireCapturePhoto {
    var capture = WireCapturePhoto()
    capture.deviceID = device
    capture.sessionID = session
    capture.settings = settings
    capture.settings.uniqueID = UInt64(shot + 1)
    return capture
}

/// A fresh folder for emulated V4L2 cameras (`CAMRIG_V4L2_EMULATOR_DIR` set to it for the agents started
/// next), or nil, said why, when the emulator is not installed. The caller removes the folder.
func emulatorDirectory(_ directory: String, say: (String) -> Void) throws -> String? {
    guard FileManager.default.fileExists(atPath: "/usr/lib/x86_64-linux-gnu/libv4l/plugins/libcamrig-v4l2-emulator.so") else {
        say("the V4L2 emulator is not installed (make -C Tests/V4L2Emulator all install): V4L2 rows skipped")
        return nil
    }
    try? FileManager.default.removeItem(atPath: directory)
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    setenv("CAMRIG_V4L2_EMULATOR_DIR", directory, 1)
    return directory
}
