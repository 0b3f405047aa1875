import ArgumentParser
import CamRigDeviceModel
import CamRigWire
import CamRigCLI
import CamRigCoordinator
import Logging

/// Which cameras a capture uses and how they are configured.
struct SessionOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("Cameras to use, AGENT/DEVICE (repeatable; default: every camera of every agent).", valueName: "agent/device"))
    var device: [String] = []

    @Option(name: .long, help: ArgumentHelp("Frame size for every camera, WxH (default: from the preset).", valueName: "WxH"))
    var size: String?

    @Option(name: .long, help: ArgumentHelp("Pixel format for every camera, a FourCC such as YUYV or MJPG (default: uncompressed where offered).", valueName: "fourcc"))
    var pixelFormat: String?

    @Option(name: .long, help: ArgumentHelp("Seconds to wait for every free-running camera to lock onto the rig's frame grid before capturing; cameras that did not lock are named and captured as they are.", valueName: "s"))
    var lockTimeout = 10.0

    @Option(name: .long, help: ArgumentHelp("Phase error a camera may have and count as locked, in microseconds.", valueName: "us"))
    var lockTolerance = 100.0

    @Flag(name: .long, help: "Do not phase-lock free-running cameras: a capture at T takes each camera's first frame exposed from T on (up to a frame apart).")
    var noPhaseLock = false

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
    func makeSession(
        pool: AgentPool, preset: RigSession.Preset, fps: FrameDuration?, responsiveCapture: Bool? = nil, deferredDelivery: Bool? = nil, logger: Logger
    ) async throws -> RigSession {
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
        await session.addPhotoOutput(responsiveCapture: responsiveCapture, deferredDelivery: deferredDelivery)
        await session.addFrameOutput()
        await session.beginConfiguration()
        await session.setPreset(preset)
        await session.setFrameRate(.init(dimensions: try dimensions(), pixelFormat: try format(), frameDuration: fps))
        try await session.commitConfiguration()
        if !noPhaseLock { await lock(session, logger: logger) }
        return session
    }

    func validate() throws {
        guard lockTimeout >= 0, lockTolerance > 0 else { throw ValidationError("--lock-timeout must be ≥ 0 and --lock-tolerance > 0") }
    }

    /// Puts every camera on the rig's frame grid and waits for them (at most `--lock-timeout`); warns,
    /// naming them, about cameras that did not lock. Cameras that did not lock are captured as they are
    /// and their manifest entry says so; a rig that cannot be locked at all is captured unlocked.
    func lock(_ session: RigSession, logger: Logger) async {
        do {
            try await session.lockPhase(tolerance: .nanoseconds(Int64(lockTolerance * 1000)))
        } catch {
            logger.warning("phase lock not possible; capturing each camera's first frame from T on", metadata: ["reason": "\(error)"])
            return
        }
        let phases = await session.waitForPhaseLock(timeout: .milliseconds(Int64(lockTimeout * 1000)))
        for phase in phases where phase.status.state != .locked || phase.failure != nil {
            let reason = phase.reason ?? "still locking after \(lockTimeout) s (--lock-timeout)"
            logger.warning(
                "camera is not phase-locked; its frames may be up to a frame period off the others'",
                metadata: [
                    "camera": "\(phase.camera)", "state": "\(phase.stateName)",
                    "phase_error_us": "\(Double(phase.status.phaseErrorNs) / 1000)", "reason": "\(reason)",
                ])
        }
    }
}
