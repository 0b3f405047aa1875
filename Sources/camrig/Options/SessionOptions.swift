import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigDevices
import Logging

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
                    throw CommandFailure("no camera '\(name)' on the rig's connected agents; `camrig devices` lists them")
                }
                chosen.append(found)
            }
        }
        guard !chosen.isEmpty else { throw CommandFailure("no cameras: no connected agent offers any (`camrig agents` shows their state)") }
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
