import CamRigDeviceModel
import CamRigServiceClient
import CamRigViews
import ArgumentParser
import Foundation
import CamRigCLI
import CamRigCoordinator
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

    @Option(
        name: .long, parsing: .unconditional,
        help: ArgumentHelp(
            "An exposure bracket: one image per bias in EV, comma-separated (e.g. -2,0,2), each a frame exposed with it (a custom exposure's duration times 2^bias, else the automatic exposure's target bias); the first image is the set's, the others are listed under it.",
            valueName: "ev,ev,…"))
    var bracket: String?

    @Flag(name: .long, inversion: .prefixedNo, help: "Deferred delivery on (or off) for every camera's photo output, from this capture on (without either: as each camera's photo output is set, `camrig device set CAMERA deferred=on`): each quality photo is delivered at once as a proxy (its reference frame, half size) and made in full on its agent when idle; `camrig captures finalize ID` fetches the finals now.")
    var deferred: Bool?

    @Flag(name: .long, inversion: .prefixedNo, help: "Responsive capture on (or off) for every camera's photo output, from this capture on (without either: as each camera's photo output is set): a camera may begin its next photo once the previous one's frames are taken, while that photo is still processed.")
    var responsive: Bool?

    @Option(name: .long, help: ArgumentHelp("Take a burst of this many photos, each a sync set of its own (one capture folder each).", valueName: "n"))
    var burst = 1

    @Option(name: .long, help: ArgumentHelp("Seconds between the photos of a burst (default: 0.5).", valueName: "s"))
    var interval = 0.5

    @OptionGroup var session: SessionOptions
    @OptionGroup var captures: CaptureOptions
    @OptionGroup var rig: RigOptions
    @OptionGroup var output: OutputOptions

    func validate() throws {
        guard photo else { throw ValidationError("say what to capture: --photo (for video, use `camrig record`)") }
        guard !(raw && jpeg) else { throw ValidationError("--raw and --jpeg exclude each other: a photo is delivered as one of them") }
        _ = try bracketBiases()
        guard (1...1000).contains(burst) else { throw ValidationError("--burst takes 1 to 1000 photos") }
        guard interval > 0, interval.isFinite else { throw ValidationError("--interval must be a positive number of seconds") }
    }

    func run() async throws {
        let logger = output.makeLogger()
        do {
            if let summaries = try await rig.throughService(logger: logger, { try await throughService($0, quiet: output.json) }) {
                if output.json {
                    if burst == 1 { try printJSON(summaries[0], snakeCase: true) } else { try printJSON(summaries, snakeCase: true) }
                } else {
                    print(summaries.map(\.text).joined(separator: "\n"))
                }
                return
            }
            let reports = try await captures.withStorage(rig: try rig.resolvedRigName(), settings: rig.storeSettings(), logger: logger) { store in
                try await rig.withPool(logger: logger) { pool in
                    await captures.collectEarlier(pool: pool, store: store, logger: logger)
                    let rigSession = try await session.makeSession(
                        pool: pool, preset: session.size == nil ? .inputPriority : .photo, fps: nil, responsiveCapture: responsive, deferredDelivery: deferred, logger: logger)
                    do {
                        var settings = WirePhotoSettings()
                        settings.qualityPrioritization = WireQualityPrioritization(quality.level)
                        settings.outputType = raw ? .dng : jpeg ? .jpeg : .frame
                        settings.bracketExposureBiases = try bracketBiases()
                        let start = ContinuousClock.now
                        let (burst, interval) = (self.burst, self.interval)
                        // Each photo of a burst is its own capture, begun `interval` after the previous one
                        // began: with responsive capture and deferred delivery the cameras keep up.
                        let reports = try await withThrowingTaskGroup(of: (Int, CaptureReport).self) { group in
                            for index in 0..<burst {
                                var settings = settings
                                settings.uniqueID = UInt64.random(in: 1...UInt64.max)
                                group.addTask { [settings] in
                                    try await ContinuousClock().sleep(until: start + .seconds(interval * Double(index)))
                                    return (index, try await rigSession.capturePhoto(into: store, settings: settings))
                                }
                            }
                            var reports: [(Int, CaptureReport)] = []
                            for try await report in group { reports.append(report) }
                            return reports.sorted { $0.0 < $1.0 }.map(\.1)
                        }
                        await rigSession.stop()
                        return reports
                    } catch {
                        await rigSession.stop()
                        throw error
                    }
                }
            }
            let summaries = reports.map { CaptureOutput($0.manifest, directory: $0.directory.captureLocation) }
            if output.json {
                if burst == 1 { try printJSON(summaries[0], snakeCase: true) } else { try printJSON(summaries, snakeCase: true) }
            } else {
                print(summaries.map(\.text).joined(separator: "\n"))
            }
        } catch {
            throw userFacing(error)
        }
    }
}

extension Capture {
    /// The photos taken by a running service, into its captures directory: each photo of a burst is a job
    /// of its own, begun `interval` after the previous one began.
    func throughService(_ client: ServiceClient, quiet: Bool) async throws -> [CaptureOutput] {
        guard deferred == nil, responsive == nil else {
            throw CommandFailure("--deferred and --responsive are not taken through the service: set them per camera there (`camrig device set CAMERA deferred=on`), or stop the service")
        }
        guard session.device.isEmpty, session.size == nil, session.pixelFormat == nil else {
            throw CommandFailure("the service captures every camera of its session as configured: --device, --size and --pixel-format are not taken through it (change formats with `camrig device set`)")
        }
        let request = PhotoRequest(
            quality: quality.rawValue, output: raw ? "dng" : jpeg ? "jpeg" : "frame", bracket: bracket == nil ? nil : try bracketBiases())
        var summaries: [CaptureOutput] = []
        let start = ContinuousClock.now
        for index in 0..<burst {
            try await ContinuousClock().sleep(until: start + .seconds(interval * Double(index)))
            let job: CaptureJob = try await client.post("/api/v1/captures/photo", request)
            summaries.append(try await ThroughService.finish(job, on: client, quiet: quiet))
        }
        return summaries
    }

    /// `--bracket`'s biases, checked.
    func bracketBiases() throws -> [Float] {
        guard let bracket else { return [] }
        let parts = bracket.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
        let biases = parts.compactMap(Float.init)
        guard biases.count == parts.count, !biases.isEmpty else {
            throw ValidationError("--bracket '\(bracket)' is not a comma-separated list of exposure biases in EV, e.g. -2,0,2")
        }
        guard biases.count <= 16 else { throw ValidationError("--bracket takes at most 16 biases, got \(biases.count)") }
        guard biases.allSatisfy({ (-8...8).contains($0) }) else { throw ValidationError("--bracket biases must be within -8…8 EV") }
        return biases
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
