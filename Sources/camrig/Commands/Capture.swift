import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigDevices
import CamRigWire
import CamRigWireModel

/// `camrig capture --photo`: one synchronized photo from every camera.
struct Capture: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Fire every camera at one instant and store the photos as one sync set.",
        discussion: "The trigger instant is chosen from the measured round trips; each agent fires at it on its own clock. The capture goes to a new folder under --out with manifest.json, and into the catalog."
    )

    @Flag(name: .long, help: "Capture a photo (the only kind so far; recordings are `camrig record`).")
    var photo = false

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Photo quality prioritization: speed (the frame nearest the instant, no waiting), balanced (the first frame from the instant on) or quality (several frames merged on each agent, less noise).",
            valueName: "speed|balanced|quality"))
    var quality: PhotoQuality = .balanced

    @Flag(name: .long, help: "Deliver each photo as Bayer RAW in a DNG file (cameras streaming a Bayer format; others deliver their frame and the manifest says why).")
    var raw = false

    @Flag(name: .long, help: "Deliver each photo as a JPEG made on its agent (from YUYV, RGB or grey frames).")
    var jpeg = false

    @OptionGroup var session: SessionOptions
    @OptionGroup var captures: CaptureOptions
    @OptionGroup var rig: RigOptions
    @OptionGroup var output: OutputOptions

    func validate() throws {
        guard photo else { throw ValidationError("say what to capture: --photo (for video, use `camrig record`)") }
        guard !(raw && jpeg) else { throw ValidationError("--raw and --jpeg exclude each other: a photo is delivered as one of them") }
    }

    func run() async throws {
        let logger = output.makeLogger()
        do {
            let store = try captures.store()
            let report = try await rig.withPool(logger: logger) { pool in
                await captures.collectEarlier(pool: pool, store: store, logger: logger)
                let rigSession = try await session.makeSession(pool: pool, preset: session.size == nil ? .inputPriority : .photo, fps: nil, logger: logger)
                do {
                    var settings = WirePhotoSettings()
                    settings.uniqueID = UInt64.random(in: 1...UInt64.max)
                    settings.qualityPrioritization = WireQualityPrioritization(quality.level)
                    settings.outputType = raw ? .dng : jpeg ? .jpeg : .frame
                    let report = try await rigSession.capturePhoto(into: store, settings: settings)
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

/// `--quality`: a photo quality prioritization by name.
enum PhotoQuality: String, CaseIterable, ExpressibleByArgument {
    case speed, balanced, quality

    var level: PhotoQualityPrioritization {
        switch self {
        case .speed: .speed
        case .balanced: .balanced
        case .quality: .quality
        }
    }
}
