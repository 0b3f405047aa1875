import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigDevices
import CamRigStorage
import CamRigWire
import Foundation
import Logging

/// What a capture command prints: the capture's summary and per-camera figures.
struct CaptureOutput: Encodable {
    struct Camera: Encodable {
        var camera: String
        var framesDelivered: Int
        var droppedFrames: Int
        var unmatchedFrames: Int
        var offsetUs: Double
        var errorBoundUs: Double
        var error: String?
    }

    var id: String
    var kind: String
    var directory: String
    var fps: Double?
    var sets: Int
    var completeSets: Int
    var incompleteSets: Int
    var framesDelivered: Int
    var droppedFrames: Int
    var unmatchedFrames: Int
    var skewP50Us: Double
    var skewP99Us: Double
    var maxSkewUs: Double
    var cameras: [Camera]
    /// Skew in real time, where the truth is known (`camrig demo`).
    var trueSkew: TrueSkew?

    struct TrueSkew: Encodable {
        var p50Us: Double
        var maxUs: Double
    }

    init(_ manifest: CaptureManifest, directory: String) {
        id = manifest.id
        kind = manifest.kind
        self.directory = directory
        fps = manifest.framesPerSecond
        sets = manifest.summary.sets
        completeSets = manifest.summary.completeSets
        incompleteSets = manifest.summary.incompleteSets
        framesDelivered = manifest.summary.framesDelivered
        droppedFrames = manifest.summary.droppedFrames
        unmatchedFrames = manifest.summary.unmatchedFrames
        skewP50Us = Double(manifest.summary.skewP50Ns) / 1000
        skewP99Us = Double(manifest.summary.skewP99Ns) / 1000
        maxSkewUs = Double(manifest.summary.skewMaxNs) / 1000
        cameras = manifest.cameras.map {
            Camera(camera: $0.name, framesDelivered: $0.framesDelivered, droppedFrames: $0.framesDropped, unmatchedFrames: $0.framesUnmatched, offsetUs: $0.clock.offsetNs / 1000, errorBoundUs: $0.clock.errorBoundNs / 1000, error: $0.error)
        }
    }

    var text: String {
        var lines = ["\(kind) \(id) in \(directory)"]
        lines.append("  sets \(sets) (complete \(completeSets), incomplete \(incompleteSets)); frames \(framesDelivered) delivered, \(droppedFrames) dropped, \(unmatchedFrames) unmatched")
        lines.append("  skew p50 \(String(format: "%.1f", skewP50Us)) µs, p99 \(String(format: "%.1f", skewP99Us)) µs, max \(String(format: "%.1f", maxSkewUs)) µs (coordinator clock; each frame's uncertainty adds the clock error)")
        if let trueSkew {
            lines.append("  true skew p50 \(String(format: "%.1f", trueSkew.p50Us)) µs, max \(String(format: "%.1f", trueSkew.maxUs)) µs (real time, from the injected clock errors)")
        }
        lines.append(table(
            ["  CAMERA", "FRAMES", "DROPPED", "UNMATCHED", "OFFSET µs", "±µs"],
            cameras.map { ["  " + $0.camera, "\($0.framesDelivered)", "\($0.droppedFrames)", "\($0.unmatchedFrames)", String(format: "%.1f", $0.offsetUs), String(format: "%.1f", $0.errorBoundUs)] }
        ))
        for camera in cameras { if let error = camera.error { lines.append("  \(camera.camera): \(error)") } }
        return lines.joined(separator: "\n")
    }
}

/// Which cameras a capture uses and how they are configured.
struct SessionOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("Cameras to use, AGENT/DEVICE (repeatable; default: every camera of every agent).", valueName: "agent/device"))
    var device: [String] = []

    @Option(name: .long, help: ArgumentHelp("Frame size for every camera, WxH (default: from the preset).", valueName: "WxH"))
    var size: String?

    @Option(name: .long, help: ArgumentHelp("Pixel format for every camera, a FourCC such as YUYV or MJPG (default: uncompressed where offered).", valueName: "fourcc"))
    var pixelFormat: String?

    func dimensions() throws -> Dimensions? {
        guard let size else { return nil }
        let parts = size.lowercased().split(separator: "x")
        guard parts.count == 2, let width = UInt32(parts[0]), let height = UInt32(parts[1]), width > 0, height > 0 else {
            throw ValidationError("--size '\(size)' is not WxH, e.g. 1920x1080")
        }
        return Dimensions(width: width, height: height)
    }

    func format() throws -> PixelFormat? {
        guard let pixelFormat else { return nil }
        guard let format = PixelFormat(fourCC: pixelFormat) else { throw ValidationError("--pixel-format '\(pixelFormat)' is not a FourCC") }
        return format
    }

    /// A session over the chosen cameras, committed with one frame rate (`fps` nil: the highest common).
    func makeSession(pool: AgentPool, preset: RigSession.Preset, fps: FrameDuration?, logger: Logger) async throws -> RigSession {
        let (devices, failures) = await RigDiscovery.devices(in: pool)
        for failure in failures { logger.warning("agent did not list its devices; its cameras are left out", metadata: ["agent": "\(failure.agent)", "error": "\(failure.error)"]) }
        var chosen: [RigDevice] = []
        if device.isEmpty {
            chosen = devices
        } else {
            for name in device {
                guard let found = RigDiscovery.find(name, in: devices) else {
                    throw ValidationFailure("no camera '\(name)' on the rig's connected agents; `camrig devices` lists them")
                }
                chosen.append(found)
            }
        }
        guard !chosen.isEmpty else { throw ValidationFailure("no cameras: no connected agent offers any (`camrig agents` shows their state)") }
        let session = RigSession(pool: pool, logger: logger)
        for camera in chosen { try await session.addInput(camera) }
        await session.addPhotoOutput()
        await session.addFrameOutput()
        await session.beginConfiguration()
        await session.setPreset(preset)
        await session.setFrameRate(.init(dimensions: try dimensions(), pixelFormat: try format(), frameDuration: fps))
        try await session.commitConfiguration()
        return session
    }
}

/// `camrig capture --photo`: one synchronized photo from every camera.
struct Capture: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Fire every camera at one instant and store the photos as one sync set.",
        discussion: "The trigger instant is chosen from the measured round trips; each agent fires at it on its own clock. The capture goes to a new folder under --out with manifest.json, and into the catalog."
    )

    @Flag(name: .long, help: "Capture a photo (the only kind so far; recordings are `camrig record`).")
    var photo = false

    @OptionGroup var session: SessionOptions
    @OptionGroup var captures: CaptureOptions
    @OptionGroup var rig: RigOptions
    @OptionGroup var output: OutputOptions

    func validate() throws {
        guard photo else { throw ValidationError("say what to capture: --photo (for video, use `camrig record`)") }
    }

    func run() async throws {
        let logger = output.makeLogger()
        do {
            let store = try captures.store()
            let report = try await rig.withPool(logger: logger) { pool in
                let rigSession = try await session.makeSession(pool: pool, preset: session.size == nil ? .inputPriority : .photo, fps: nil, logger: logger)
                do {
                    let report = try await rigSession.capturePhoto(into: store)
                    await rigSession.stop()
                    return report
                } catch {
                    await rigSession.stop()
                    throw error
                }
            }
            let summary = CaptureOutput(report.manifest, directory: report.directory.path)
            if output.json { try printJSON(summary, snakeCase: true) } else { print(summary.text) }
        } catch {
            throw userFacing(error)
        }
    }
}

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
            let store = try captures.store()
            let report = try await rig.withPool(logger: logger) { pool in
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
            if !quiet { FileHandle.standardError.write(Data("\n".utf8)) }
            let summary = CaptureOutput(report.manifest, directory: report.directory.path)
            if output.json { try printJSON(summary, snakeCase: true) } else { print(summary.text) }
        } catch {
            throw userFacing(error)
        }
    }

    static func showProgress(_ progress: RecordingProgress) {
        let elapsed = Double(progress.elapsed.components.seconds) + Double(progress.elapsed.components.attoseconds) / 1e18
        let total = Double(progress.duration.components.seconds) + Double(progress.duration.components.attoseconds) / 1e18
        var line = String(format: "\rrecording %.1f/%.1f s, frames %@, sets %d", elapsed, total, progress.framesPerCamera.map(String.init).joined(separator: "/"), progress.sets)
        if progress.imagesTotal > 0 { line += ", images written \(progress.imagesWritten)/\(progress.imagesTotal)" }
        FileHandle.standardError.write(Data(line.utf8))
    }
}

/// `camrig captures list|show`: the catalog.
struct Captures: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "The capture catalog.", subcommands: [List.self, Show.self])

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List captures, newest first.")
        @OptionGroup var captures: CaptureOptions
        @OptionGroup var output: OutputOptions

        func run() async throws {
            do {
                let store = try captures.store()
                let entries = try store.catalog.list()
                if output.json {
                    try printJSON(["captures": entries])
                } else {
                    print(table(
                        ["ID", "KIND", "CREATED", "CAMERAS", "SETS", "INCOMPLETE", "DROPPED", "SKEW p50 µs", "SKEW max µs"],
                        entries.map { [$0.id, $0.kind, $0.created, "\($0.cameras)", "\($0.sets)", "\($0.incompleteSets)", "\($0.droppedFrames)", micros($0.skewP50Ns), micros($0.skewMaxNs)] }
                    ))
                }
            } catch {
                throw userFacing(error)
            }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show one capture: cameras, clock statistics and sync sets.")
        @Argument(help: "Capture id (or a unique prefix).")
        var id: String
        @OptionGroup var captures: CaptureOptions
        @OptionGroup var output: OutputOptions

        func run() async throws {
            do {
                let store = try captures.store()
                guard let entry = try store.catalog.entry(id) else {
                    throw ValidationFailure("no capture '\(id)' in \(store.catalog.path); `camrig captures list` shows them")
                }
                let manifest = try store.manifest(of: entry)
                if output.json {
                    try printJSON(manifest, snakeCase: true)
                } else {
                    print(CaptureOutput(manifest, directory: store.root.appendingPathComponent(entry.directory).path).text)
                    for set in manifest.sets.prefix(20) {
                        print("  set \(set.index): \(set.complete ? "complete" : "missing cameras \(set.missingCameras)"), skew \(micros(set.skewNs)) µs")
                    }
                    if manifest.sets.count > 20 { print("  … \(manifest.sets.count - 20) more sets in manifest.json") }
                }
            } catch {
                throw userFacing(error)
            }
        }
    }
}
