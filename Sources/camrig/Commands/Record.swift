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
        abstract: "Start every camera at one instant at one frame rate, record, and match frames into sync sets.",
        discussion: "Frames are matched by their timestamps in the coordinator's clock; incomplete sets, drops and unmatched frames are reported per camera."
    )

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
                    "/api/v1/captures/recording", RecordRequest(duration: duration, fps: frameRate, size: session.size))
                return try await ThroughService.finish(job, on: client, quiet: quiet)
            }) {
                if output.json { try printJSON(summary, snakeCase: true) } else { print(summary.text) }
                return
            }
            let store = try captures.store()
            let report = try await rig.withPool(logger: logger) { pool in
                await captures.collectEarlier(pool: pool, store: store, logger: logger)
                let rigSession = try await session.makeSession(pool: pool, preset: .high, fps: rate, logger: logger)
                do {
                    let report = try await rigSession.record(duration: .milliseconds(Int64(duration * 1000)), into: store) { progress in
                        guard !quiet else { return }
                        Self.showProgress(progress)
                    }
                    await rigSession.stop()
                    return report
                } catch {
                    await rigSession.stop()
                    throw error
                }
            }
            if !quiet && isatty(STDERR_FILENO) == 1 { FileHandle.standardError.write(Data("\n".utf8)) }
            let summary = CaptureOutput(report.manifest, directory: report.directory.path)
            if output.json { try printJSON(summary, snakeCase: true) } else { print(summary.text) }
        } catch {
            throw userFacing(error)
        }
    }

    /// Progress on standard error: rewritten in place on a terminal; elsewhere (a log, a pipe) a line at
    /// most every second and the last one, so the log stays readable.
    static func showProgress(_ progress: RecordingProgress) {
        var line = String(
            format: "recording %.1f/%.1f s, frames %@, sets %d",
            progress.elapsed.seconds, progress.duration.seconds, progress.framesPerCamera.map(String.init).joined(separator: "/"), progress.sets
        )
        if progress.imagesTotal > 0 { line += ", images written \(progress.imagesWritten)/\(progress.imagesTotal)" }
        if isatty(STDERR_FILENO) == 1 {
            FileHandle.standardError.write(Data(("\r" + line).utf8))
            return
        }
        let finished = progress.imagesTotal > 0 && progress.imagesWritten == progress.imagesTotal
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
