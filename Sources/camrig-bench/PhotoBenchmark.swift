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

    @OptionGroup var options: BenchOptions

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

    struct Result: BenchResult {
        var scenario = "photo"
        var machine: MachineDescription
        var format: String
        var rows: [Row]
        /// Median PSNR of quality photos over speed photos (goal ≥ 6 dB).
        var qualityOverSpeedDecibels: Double
        /// Median capture latency of prepared over unprepared photos, per level.
        var preparedOverUnpreparedLatency: [String: Double]

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
            var psnrs: [Double] = []
            var latencies: [Double] = []
            var captureStages: [Double] = []
            var processing: [Double] = []
            var merged = 0
            var notes: Set<String> = []
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
            var acknowledge = WireAcknowledgeResults()
            for try await message in client.stream(.fetchResults(fetch)) {
                guard case .photoResult(let result) = message.envelope.body, let image = message.payload else { continue }
                acknowledge.resultIds.append(result.resultID)
                guard let truth = truths.first(where: { $0.identity.uniqueID == result.deviceID }),
                    PixelFormat(rawValue: result.pixelFormat) == .yuyv,
                    let header = SyntheticFrameHeader.decode(image, format: .yuyv),
                    let deviceFormat = try truth.formats().first(where: { $0.pixelFormat == .yuyv && $0.dimensions == result.dimensions.dimensions })
                else { throw CommandFailure("a \(level) photo is not a YUYV frame of the synthetic scene") }
                format = deviceFormat.id
                let reference = truth.noiseFreeFrame(format: deviceFormat, header: header, trueTime: header.timestamp)
                psnrs.append(PhotoProcessing.psnr(image, against: reference, from: SyntheticScene.embeddedDataRows * Int(deviceFormat.bytesPerLine), stride: 2))
                captureStages.append(Double(result.resolved.captureDurationNs) / 1e6)
                processing.append(Double(result.resolved.processingDurationNs) / 1e6)
                merged = max(merged, Int(result.resolved.framesMerged))
                if !result.resolved.note.isEmpty { notes.insert(result.resolved.note) }
            }
            _ = try await client.request(.acknowledgeResults(acknowledge))
            rows.append(Row(
                quality: level.description, prepared: prepared, photos: psnrs.count, psnrDecibels: Distribution(psnrs), latencyMilliseconds: Distribution(latencies),
                captureStageMilliseconds: Distribution(captureStages), processingMilliseconds: Distribution(processing), framesMerged: merged,
                notes: notes.sorted()))
        }
        await client.close()
        func row(_ level: PhotoQualityPrioritization, prepared: Bool) -> Row { rows.first { $0.quality == level.description && $0.prepared == prepared }! }
        let gain = row(.quality, prepared: false).psnrDecibels.p50 - row(.speed, prepared: false).psnrDecibels.p50
        let latency = Dictionary(uniqueKeysWithValues: PhotoQualityPrioritization.allCases.map { level in
            (level.description, ratio(row(level, prepared: true).latencyMilliseconds.p50, row(level, prepared: false).latencyMilliseconds.p50))
        })
        return Result(machine: .current, format: format, rows: rows, qualityOverSpeedDecibels: gain, preparedOverUnpreparedLatency: latency)
    }
}
