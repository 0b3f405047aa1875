import CamRigServiceClient
import CamRigViews
import CamRigClock
import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigLocalRig
import Foundation

/// `camrig record`: a synchronized recording.
struct Record: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Record every camera on its own host from one grid instant to another, then gather the files into sync sets.",
        discussion: """
            Each camera host records its cameras into one Matroska file per camera (with a frame table and \
            timecodes beside it), so only progress crosses the network while recording; the files are then \
            offloaded, checked against their SHA-256 and deleted from the hosts. Every camera covers the same \
            grid instants: a frame that never arrived is a listed gap, never a shift. A recording a host has no \
            room for is refused before anything starts. --stream sends every frame to this machine instead, \
            as images (for short, small recordings).
            """
    )

    @Option(name: .long, help: "How each camera's frames are stored on its host: auto (the camera's own compression, else MJPEG; FFV1 for Bayer), copy, mjpeg, ffv1, h264 or raw.")
    var codec: RecordingCodec = .auto

    @Flag(name: .long, help: "Stream every frame to this machine and store it as an image, instead of recording on the hosts.")
    var stream = false

    @Option(name: .long, help: ArgumentHelp("Start a new file after this many MiB (default 4096).", valueName: "MiB"))
    var segmentMb: Int?

    @Option(name: .long, help: ArgumentHelp("Start a new file after this many seconds too (default: no limit by length).", valueName: "s"))
    var segmentSeconds: Double?

    @Flag(name: .long, help: "Leave the files on the hosts (`camrig captures offload ID` fetches them later).")
    var noOffload = false

    @Option(name: .long, help: ArgumentHelp("Offload at most this many MB/s from each host (default: as fast as the link goes).", valueName: "MB/s"))
    var offloadRate: Double?

    @Option(name: .long, help: "Frames per second for every camera (default: the highest all of them support at the size).")
    var fps: String?

    @Option(name: .long, help: "Seconds to record.")
    var duration = 5.0

    @OptionGroup var session: SessionOptions
    @OptionGroup var captures: CaptureOptions
    @OptionGroup var rig: RigOptions
    @OptionGroup var output: OutputOptions

    func validate() throws {
        guard duration > 0, duration <= 3600 else { throw ValidationError("--duration must be within (0, 3600] seconds") }
        if let fps, DeviceSettingsParser.duration(ofRate: fps) == nil { throw ValidationError("--fps \(fps): give a rate like 30 or 30000/1001") }
        if let segmentMb, segmentMb < 1 { throw ValidationError("--segment-mb must be at least 1") }
        if let segmentSeconds, segmentSeconds <= 0 { throw ValidationError("--segment-seconds must be positive") }
        if let offloadRate, offloadRate <= 0 { throw ValidationError("--offload-rate must be positive") }
        if stream, codec != .auto || segmentMb != nil || segmentSeconds != nil || noOffload || offloadRate != nil {
            throw ValidationError("--stream stores images here: --codec, --segment-mb, --segment-seconds, --no-offload and --offload-rate are for on-host recordings")
        }
    }

    var hostOptions: HostRecordingOptions {
        var options = HostRecordingOptions()
        options.codec = codec
        options.segmentBytes = segmentMb.map { UInt64($0) << 20 } ?? 0
        options.segmentDuration = segmentSeconds.map { .milliseconds(Int64($0 * 1000)) }
        options.offload = !noOffload
        options.offloadBytesPerSecond = offloadRate.map { UInt64($0 * 1e6) } ?? 0
        return options
    }

    func run() async throws {
        let logger = output.makeLogger()
        let rate = fps.flatMap(DeviceSettingsParser.duration(ofRate:))
        let quiet = output.json
        do {
            if let summary = try await rig.throughService(logger: logger, { client -> CaptureOutput in
                guard session.device.isEmpty, session.pixelFormat == nil else {
                    throw CommandFailure("the service records every camera of its session: --device and --pixel-format are not taken through it")
                }
                var frameRate: Double?
                if let rate {
                    guard rate.denominator == 1 || rate.numerator == 1 else { throw CommandFailure("through the service, give --fps as a whole number of frames per second") }
                    frameRate = rate.frameRate.rounded()
                }
                let job: CaptureJob = try await client.post(
                    "/api/v1/captures/recording",
                    RecordRequest(duration: duration, fps: frameRate, size: session.size, stream: stream ? true : nil, codec: codec == .auto ? nil : codec.rawValue))
                return try await ThroughService.finish(job, on: client, quiet: quiet)
            }) {
                if output.json { try printJSON(summary, snakeCase: true) } else { print(summary.text) }
                return
            }
            let report = try await captures.withStorage(rig: try rig.resolvedRigName(), settings: rig.storeSettings(), logger: logger) { store in
                try await rig.withPool(logger: logger) { pool in
                    await captures.collectEarlier(pool: pool, store: store, logger: logger)
                    let rigSession = try await session.makeSession(pool: pool, preset: .high, fps: rate, logger: logger)
                    do {
                        let length = Duration.milliseconds(Int64(duration * 1000))
                        let report =
                            if stream {
                                try await rigSession.record(duration: length, into: store) { progress in
                                    guard !quiet else { return }
                                    Self.showProgress(progress)
                                }
                            } else {
                                try await rigSession.recordOnHosts(duration: length, options: hostOptions, into: store) { progress in
                                    guard !quiet else { return }
                                    Self.showProgress(progress)
                                }
                            }
                        await rigSession.stop()
                        return report
                    } catch {
                        await rigSession.stop()
                        throw error
                    }
                }
            }
            if !quiet && isatty(STDERR_FILENO) == 1 { FileHandle.standardError.write(Data("\n".utf8)) }
            let summary = CaptureOutput(report.manifest, directory: report.directory.captureLocation)
            if output.json { try printJSON(summary, snakeCase: true) } else { print(summary.text) }
        } catch {
            throw userFacing(error)
        }
    }

    /// Progress on standard error: rewritten in place on a terminal; elsewhere (a log, a pipe) a line at
    /// most every second and the last one, so the log stays readable.
    static func showProgress(_ progress: RecordingProgress) {
        var line = String(
            format: "recording %.1f/%.1f s, frames %@",
            progress.elapsed.seconds, progress.duration.seconds, progress.framesPerCamera.map(String.init).joined(separator: "/")
        )
        if progress.sets > 0 { line += ", sets \(progress.sets)" }
        if progress.imagesTotal > 0 { line += ", images written \(progress.imagesWritten)/\(progress.imagesTotal)" }
        if progress.offloadTotalBytes > 0 {
            line += String(format: ", offloaded %.1f/%.1f MB", Double(progress.offloadedBytes) / 1e6, Double(progress.offloadTotalBytes) / 1e6)
        }
        if isatty(STDERR_FILENO) == 1 {
            FileHandle.standardError.write(Data(("\r" + line).utf8))
            return
        }
        let finished = (progress.imagesTotal > 0 && progress.imagesWritten == progress.imagesTotal)
            || (progress.offloadTotalBytes > 0 && progress.offloadedBytes == progress.offloadTotalBytes)
        let now = Date()
        progressLock.lock()
        let due = finished || now.timeIntervalSince(lastProgressLine) >= 1
        if due { lastProgressLine = now }
        progressLock.unlock()
        if due { FileHandle.standardError.write(Data((line + "\n").utf8)) }
    }

    private static let progressLock = NSLock()
    nonisolated(unsafe) private static var lastProgressLine = Date.distantPast
}

extension RecordingCodec: ExpressibleByArgument {}
