import CamRigClock
import CamRigDeviceModel
import Foundation
import NIOConcurrencyHelpers
import NIOCore

/// How a synthetic camera behaves.
public struct SyntheticCameraConfiguration: Hashable, Sendable {
    /// Serial number; the device's unique id is `synthetic:<serial>`.
    public var serial: String
    public var name: String
    public var label: String
    public var position: DevicePosition
    /// Seeds drops, jitter and noise: the same seed gives the same sequence of them.
    public var seed: UInt64
    /// The host clock frames are stamped with (offset and drift of a simulated host).
    public var clock: HostClock
    /// Probability that the sensor drops a frame (its sequence number is skipped, as drivers do).
    public var dropProbability: Double
    /// Largest timing error added to a frame's stamp, either way, in nanoseconds.
    public var jitterNanoseconds: Int64
    /// Sensor noise in pixel levels: the amplitude of the test patterns' row noise; for the scene, half
    /// the standard deviation of its per-pixel noise at ISO 100 and 1/60 s (it grows with the ISO and
    /// shrinks with a longer exposure when these are set by hand).
    public var noise: UInt8
    /// Also offer 1920×1080 YUYV at any rate up to 1000 fps, faster than a link can carry: a source
    /// for throughput benchmarks. Frames are paced as at any rate; when drawing cannot keep up they
    /// come back to back.
    public var highSpeed: Bool

    public init(
        serial: String,
        name: String = "CamRig Synthetic Camera",
        label: String = "",
        position: DevicePosition = .unspecified,
        seed: UInt64 = 1,
        clock: HostClock = .system,
        dropProbability: Double = 0,
        jitterNanoseconds: Int64 = 0,
        noise: UInt8 = 2,
        highSpeed: Bool = false
    ) {
        self.serial = serial
        self.name = name
        self.label = label
        self.position = position
        self.seed = seed
        self.clock = clock
        self.dropProbability = dropProbability
        self.jitterNanoseconds = jitterNanoseconds
        self.noise = noise
        self.highSpeed = highSpeed
    }
}

/// A complete camera in software: real formats and frame intervals, real-time pacing from the active
/// frame duration, pixels that say which frame they are and when it was exposed, controls with visible
/// effects, and injectable clock offset, drift, drops, jitter and noise.
public final class SyntheticCamera: FrameAlignableBackend {
    public let configuration: SyntheticCameraConfiguration
    public let identity: DeviceIdentity
    public let typedControlSupport: TypedControlSupport
    private let formatList: [DeviceFormat]
    private let controlList: [ControlDescriptor]
    private let deviceHash: UInt32

    struct State {
        var format: DeviceFormat
        var frameDuration: FrameDuration
        var settings = CameraSettings()
        var controls: [UInt32: Int64]
        /// Where the next stream's exposure grid is anchored (`CLOCK_MONOTONIC`).
        var alignment: Int64?
    }

    private let state: NIOLockedValueBox<State>
    /// Its streaming life (configured, running, stopping, unplugged).
    let stream: CameraStream

    public init(_ configuration: SyntheticCameraConfiguration) {
        self.configuration = configuration
        identity = DeviceIdentity(
            uniqueID: "synthetic:\(configuration.serial)",
            localizedName: "\(configuration.name) \(configuration.serial)",
            modelID: "camrig-synthetic-1",
            deviceType: .synthetic,
            position: configuration.position,
            label: configuration.label,
            backend: "synthetic"
        )
        var support = TypedControlSupport()
        support.focusModes = [.locked, .auto, .continuous]
        support.lensPosition = true
        support.exposureModes = Set(ExposureMode.allCases)
        support.exposureTargetBias = true
        support.whiteBalanceModes = Set(WhiteBalanceMode.allCases)
        support.zoom = true
        support.torch = true
        typedControlSupport = support
        formatList = configuration.highSpeed ? Self.highSpeedFormats : Self.standardFormats
        controlList = Self.controls(defaultPattern: configuration.highSpeed ? SyntheticPatternKind.movingGradient : SyntheticPatternKind.scene)
        deviceHash = SyntheticFrameHeader.hash(identity.uniqueID)
        stream = CameraStream(device: identity.uniqueID)
        state = NIOLockedValueBox(
            State(
                format: formatList[0],
                frameDuration: formatList[0].defaultFrameDuration!,
                controls: Dictionary(uniqueKeysWithValues: controlList.map { ($0.id, $0.defaultValue) })
            )
        )
    }

    /// The standard formats, with 1920×1080 YUYV also offered continuously from 1 to 1000 fps.
    static let highSpeedFormats: [DeviceFormat] = standardFormats.map { format in
        guard format.pixelFormat == .yuyv, format.dimensions == Dimensions(width: 1920, height: 1080) else { return format }
        var fast = format
        fast.frameRateRanges.append(FrameRateRange(min: FrameDuration(framesPerSecond: 1000)!, max: FrameDuration(framesPerSecond: 1)!, kind: .continuous)!)
        return fast
    }

    /// The formats every synthetic camera offers.
    static let standardFormats: [DeviceFormat] = {
        func rates(_ fps: [UInt32]) -> [FrameRateRange] { fps.map { FrameRateRange(discrete: FrameDuration(framesPerSecond: $0)!) } }
        let sizes = [Dimensions(width: 640, height: 480), Dimensions(width: 1280, height: 720), Dimensions(width: 1920, height: 1080)]
        let yuyvRates: [[UInt32]] = [[60, 30, 15], [30, 15], [30, 15, 5]]
        var formats: [DeviceFormat] = []
        for (size, fps) in zip(sizes, yuyvRates) {
            formats.append(DeviceFormat(pixelFormat: .yuyv, dimensions: size, frameRateRanges: rates(fps), maxZoomFactor: 4))
        }
        for size in sizes {
            formats.append(
                DeviceFormat(
                    pixelFormat: .mjpeg,
                    dimensions: size,
                    frameRateRanges: [FrameRateRange(min: FrameDuration(framesPerSecond: 60)!, max: FrameDuration(framesPerSecond: 1)!, kind: .continuous)!],
                    maxZoomFactor: 4,
                    imageSize: UInt32(size.pixelCount)
                )
            )
        }
        // High-frame-rate mode at low resolution.
        formats.append(DeviceFormat(pixelFormat: .yuyv, dimensions: Dimensions(width: 320, height: 240), frameRateRanges: rates([120, 90]), maxZoomFactor: 2))
        // Raw Bayer, stepwise intervals as many sensors declare them: 1/60 s … 1/10 s in steps of 1/60 s.
        formats.append(
            DeviceFormat(
                pixelFormat: .bayerRGGB8,
                dimensions: Dimensions(width: 1280, height: 720),
                frameRateRanges: [
                    FrameRateRange(
                        min: FrameDuration(framesPerSecond: 60)!,
                        max: FrameDuration(numerator: 6, denominator: 60)!,
                        kind: .stepwise(step: FrameDuration(framesPerSecond: 60)!)
                    )!
                ]
            )
        )
        return formats
    }()

    /// The controls every synthetic camera has; `defaultPattern` is the test pattern it starts with (the
    /// scene, or for a high-speed source the cheaper gradient).
    static func controls(defaultPattern: Int64) -> [ControlDescriptor] { [
        ControlDescriptor(id: V4L2ControlID.brightness, name: "Brightness", type: .integer, minimum: 0, maximum: 255, defaultValue: 128),
        ControlDescriptor(id: V4L2ControlID.contrast, name: "Contrast", type: .integer, minimum: 0, maximum: 255, defaultValue: 128),
        ControlDescriptor(id: V4L2ControlID.gain, name: "Gain", type: .integer, minimum: 0, maximum: 255, defaultValue: 32),
        ControlDescriptor(
            id: V4L2ControlID.powerLineFrequency,
            name: "Power Line Frequency",
            type: .menu,
            minimum: 0,
            maximum: 2,
            defaultValue: 1,
            menu: [MenuItem(index: 0, name: "Disabled"), MenuItem(index: 1, name: "50 Hz"), MenuItem(index: 2, name: "60 Hz")]
        ),
        ControlDescriptor(
            id: V4L2ControlID.testPattern,
            name: "Test Pattern",
            type: .menu,
            minimum: 0,
            maximum: 3,
            defaultValue: defaultPattern,
            menu: [
                MenuItem(index: 0, name: "Moving Gradient"), MenuItem(index: 1, name: "Colour Bars"), MenuItem(index: 2, name: "Flat Grey"),
                MenuItem(index: 3, name: "Scene"),
            ]
        ),
    ] }

    // MARK: CameraBackend

    public func formats() throws(DeviceError) -> [DeviceFormat] { formatList }
    public func controlDescriptors() throws(DeviceError) -> [ControlDescriptor] { controlList }

    public func readControls(_ ids: [UInt32]) throws(DeviceError) -> [UInt32: Int64] {
        try checkConnected()
        let values = state.withLockedValue { $0.controls }
        return values.filter { ids.contains($0.key) }
    }

    public func writeControls(_ values: [(id: UInt32, value: Int64)]) throws(DeviceError) {
        try checkConnected()
        state.withLockedValue { state in
            for (id, value) in values { state.controls[id] = value }
        }
    }

    /// Takes effect at once, a running stream's next frame included (a synthetic sensor changes rate live).
    public func activate(format: DeviceFormat, frameDuration: FrameDuration) throws(DeviceError) -> FrameDuration {
        try checkConnected()
        state.withLockedValue { state in
            state.format = format
            state.frameDuration = frameDuration
        }
        stream.configured()
        return frameDuration
    }

    public func apply(settings: CameraSettings) throws(DeviceError) {
        try checkConnected()
        state.withLockedValue { $0.settings = settings }
    }

    public func startStreaming(bufferCount: Int, sink: @escaping @Sendable (FrameEvent) -> Void) throws(DeviceError) {
        // Its first format counts as set: a synthetic camera needs no configuration to stream.
        stream.configured()
        let run = try stream.start()
        let thread = Thread { [self] in
            self.run(run, sink: sink)
        }
        thread.name = "camrig-synthetic-\(configuration.serial)"
        thread.qualityOfService = .userInteractive
        thread.start()
    }

    public func alignNextStream(toMonotonic anchor: Int64) {
        state.withLockedValue { $0.alignment = anchor }
    }

    /// The stream's thread notices at its next frame instant.
    public func stopStreaming() {
        stream.stop()
    }

    /// Whether a stream runs or is still stopping.
    public var isStreaming: Bool { stream.isStreaming }

    // MARK: Hot-plug

    /// Simulates unplugging: a running stream ends with `.disconnected`, later calls fail.
    public func unplug() {
        stream.disconnect()
    }

    private func checkConnected() throws(DeviceError) {
        guard !stream.isDisconnected else {
            throw DeviceError(.disconnected, device: identity.uniqueID, "was unplugged")
        }
    }

    // MARK: Streaming

    /// How close to a frame's instant the streaming thread sleeps on the monotonic clock instead of the
    /// stream's condition (timed on the wall clock).
    static let finalSleep: Int64 = 2_000_000

    private func run(_ run: UInt64, sink: @Sendable (FrameEvent) -> Void) {
        var random = SeededRandom(seed: configuration.seed)
        let scene = SyntheticSceneRenderer(scene: SyntheticScene(seed: configuration.seed))
        let clock = configuration.clock
        let start = HostClock.monotonicNow()
        var sequence: UInt64 = 0
        var due = start
        let (alignment, period) = state.withLockedValue { state in
            defer { state.alignment = nil }
            return (state.alignment, state.frameDuration.nanoseconds)
        }
        if let anchor = alignment, abs(start - anchor) < 1_000_000_000 {
            // The first exposure starts on the grid anchor + k × period, at the first point not yet past.
            let k = start <= anchor ? 0 : (start - anchor + period - 1) / period
            due = anchor + k * period
        }
        while true {
            let (format, duration, settings, controls) = state.withLockedValue {
                ($0.format, $0.frameDuration, $0.settings, $0.controls)
            }
            due += duration.nanoseconds
            // On the stream's condition until shortly before the frame's end (a stop wakes it at once), then
            // to the instant on the monotonic clock.
            let now = HostClock.monotonicNow()
            if due - now > Self.finalSleep { _ = stream.wait(whileRunning: run, nanoseconds: due - now - Self.finalSleep) }
            if stream.isRunning(run) { HostClock.sleep(untilMonotonic: due) }
            guard stream.isRunning(run) else {
                let unplugged = stream.isDisconnected
                stream.ended(run)
                sink(.ended(unplugged ? DeviceError(.disconnected, device: identity.uniqueID, "was unplugged while streaming") : nil))
                return
            }
            defer { sequence += 1 }
            if configuration.dropProbability > 0 && random.nextDouble() < configuration.dropProbability {
                continue
            }
            var jitter: Int64 = 0
            if configuration.jitterNanoseconds > 0 {
                jitter = Int64(random.nextDouble() * Double(2 * configuration.jitterNanoseconds)) - configuration.jitterNanoseconds
            }
            // The frame was exposed during the last frame period; the stamp marks its start.
            let exposureStart = clock.reading(atMonotonic: due - duration.nanoseconds) + jitter
            let header = SyntheticFrameHeader(sequence: sequence, timestamp: exposureStart, deviceHash: deviceHash)
            let pattern = controls[V4L2ControlID.testPattern] ?? 0
            let brightness = controls[V4L2ControlID.brightness] ?? 128
            let bytes: ByteBuffer
            if pattern == SyntheticPatternKind.scene {
                var noiseSeed = random.next()
                bytes = scene.render(
                    format: format, header: header, trueTime: due - duration.nanoseconds,
                    look: SyntheticPattern.Look(settings: settings, brightness: brightness, sequence: sequence, pattern: pattern),
                    noiseSigma: Self.noiseSigma(configuration.noise, settings: settings), noiseSeed: &noiseSeed
                )
            } else {
                bytes = SyntheticPattern.render(
                    format: format, header: header, settings: settings, pattern: pattern, brightness: brightness, noise: configuration.noise, random: &random
                )
            }
            var frame = CapturedFrame(
                deviceID: identity.uniqueID,
                sequence: sequence,
                timestamp: exposureStart,
                timestampMarks: .startOfExposure,
                format: format,
                bytes: bytes,
                metadata: CaptureMetadata(settings: settings)
            )
            frame.embeddedDataRows = format.pixelFormat.isCompressed ? 0 : SyntheticScene.embeddedDataRows
            sink(.frame(frame))
        }
    }
}

extension SyntheticCamera {
    /// The standard deviation of the scene's per-pixel noise: `2 × noise` levels at ISO 100 and 1/60 s,
    /// growing with the ISO and shrinking with the square root of the exposure time when these are set
    /// by hand (automatic exposure meters them to the reference).
    public static func noiseSigma(_ noise: UInt8, settings: CameraSettings) -> Double {
        var sigma = 2 * Double(noise)
        if settings.exposureMode == .custom || settings.exposureMode == .locked {
            sigma *= Double(settings.iso) / 100 / (settings.exposureDuration.seconds * 60).squareRoot()
        }
        return min(sigma, 64)
    }

    /// The frame this camera draws for `header` at `trueTime` in `format` with `settings`, without noise:
    /// the truth a photo of the scene is measured against.
    public func noiseFreeFrame(format: DeviceFormat, header: SyntheticFrameHeader, trueTime: Int64, settings: CameraSettings = CameraSettings(), brightness: Int64 = 128) -> ByteBuffer {
        var seed: UInt64 = 0
        return SyntheticSceneRenderer(scene: SyntheticScene(seed: configuration.seed)).render(
            format: format, header: header, trueTime: trueTime,
            look: SyntheticPattern.Look(settings: settings, brightness: brightness, sequence: header.sequence, pattern: SyntheticPatternKind.scene),
            noiseSigma: 0, noiseSeed: &seed
        )
    }
}

/// The synthetic camera's test patterns (its `V4L2_CID_TEST_PATTERN` menu).
public enum SyntheticPatternKind {
    public static let movingGradient: Int64 = 0
    public static let colourBars: Int64 = 1
    public static let flatGrey: Int64 = 2
    /// The shared moving scene (`SyntheticScene`).
    public static let scene: Int64 = 3
}
