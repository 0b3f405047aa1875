import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigDevices
import CamRigWire

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
    var quality: String = "balanced"

    @OptionGroup var session: SessionOptions
    @OptionGroup var captures: CaptureOptions
    @OptionGroup var rig: RigOptions
    @OptionGroup var output: OutputOptions

    func validate() throws {
        guard photo else { throw ValidationError("say what to capture: --photo (for video, use `camrig record`)") }
        guard PhotoQualityPrioritization(name: quality) != nil else {
            throw ValidationError("--quality must be speed, balanced or quality, not '\(quality)'")
        }
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
                    settings.qualityPrioritization = WireQualityPrioritization(rawValue: PhotoQualityPrioritization(name: quality)!.rawValue) ?? .balanced
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
