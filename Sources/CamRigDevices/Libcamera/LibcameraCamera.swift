import CLibcamera
import CamRigClock
import CamRigDeviceModel
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore

#if canImport(Glibc)
import Glibc
#endif

/// A camera driven through libcamera, the way Raspberry Pi's own tools drive their CSI cameras (with the
/// ISP, auto exposure and white balance libcamera's pipeline handlers bring), behind the device model.
///
/// Formats come from the StreamFormats of each stream role (raw, still, video, viewfinder) with frame
/// rates from `FrameDurationLimits`; typed settings map onto libcamera's controls by name
/// (`LibcameraSettingsMapping`) and every scalar control is reachable as a raw one by libcamera's id.
/// Streaming keeps a pool of requests, one per buffer; a frame is lent to the wire in the buffer itself
/// while enough other requests stay queued, otherwise copied. Each frame's stamp is libcamera's
/// `SensorTimestamp` (defined as the start of exposure of the sensor's first row; its clock is found at
/// run time, see `StampClock`).
///
/// A camera with kernel devices behind it paces itself; its phase moves through per-request
/// `FrameDurationLimits` (the control Raspberry Pi's IPA honours), as V4L2 sensors' through VBLANK. A camera
/// with none (libcamera's virtual cameras, which complete a request as soon as it is queued) is paced by
/// this backend: `PacedLibcameraCamera`.
public class LibcameraCamera: FreeRunningBackend, @unchecked Sendable {
    /// libcamera's id of the camera.
    public let cameraID: String
    public let identity: DeviceIdentity
    public let typedControlSupport: TypedControlSupport
    /// The host clock frames are stamped on.
    public let clock: HostClock
    /// Whether frames are handed on in libcamera's buffers rather than copied.
    public let lendFrames: Bool
    /// The kernel device numbers (dev_t) behind the camera (`SystemDevices`), none for a virtual camera.
    public let systemDevices: [UInt64]
    /// `Model`, `Rotation` and `PixelArraySize` as libcamera reports them.
    public let model: String
    public let rotation: Int?
    public let pixelArraySize: Dimensions?

    let handle: OpaquePointer
    let formatList: [DeviceFormat]
    /// The role, libcamera fourcc and modifier each format is configured with, by format id.
    let streamFormats: [String: (role: Int32, fourcc: UInt32, modifier: UInt64)]
    let controls: [LibcameraControl]
    let controlList: [ControlDescriptor]
    let mapping: LibcameraSettingsMapping
    /// Serializes configuration calls; streaming runs on its own thread.
    let lock = NIOLock()
    let state = NIOLockedValueBox(State())
    let bufferStatistics = NIOLockedValueBox(FrameBufferStatistics())
    /// Whether the pipeline follows the FrameDurationLimits its requests carry, from the frames' FrameDuration.
    let compliance = NIOLockedValueBox(FrameDurationCompliance())

    struct State {
        var format: DeviceFormat?
        var frameDuration: FrameDuration = FrameDuration(framesPerSecond: 30)!
        /// Raw control values as last set (libcamera has no call that reads a control back).
        var rawValues: [UInt32: Int64] = [:]
        /// The running stream's requests.
        var current: Requests?
        /// A stream that ended with frames still lent: its buffers stay until they come back.
        var previous: Requests?
        /// Where the next paced stream's exposures go (`alignNextStream`).
        var alignment: Int64?
        /// The settings in force, reported with each frame where libcamera's metadata has no value.
        var settings = CameraSettings()
        /// FrameDurationLimits (µs) and ScalerCrop's largest rectangle as listed once configured (a pipeline
        /// fits them to the mode it chose).
        var frameDurationLimits: (minimum: Int64, maximum: Int64)?
        var cropMaximum: [Double]?
    }

    /// One stream's requests and who holds them.
    final class Requests: Sendable {
        /// Buffers whose lent frames were let go, to be queued again by the streaming thread.
        let returned = NIOLockedValueBox<[UInt32]>([])
        /// Frames lent out in the stream's buffers.
        let loans = LoanBook()
        let bufferCount: Int
        let memoryBacked: Bool

        init(bufferCount: Int, memoryBacked: Bool) {
            self.bufferCount = bufferCount
            self.memoryBacked = memoryBacked
        }
    }

    /// Its streaming life, as libcamera's camera states: configured once a format is set, running, stopping.
    let stream: CameraStream

    /// Buffers kept with the pipeline (or ready for it) while others are lent; below that, frames are copied.
    static let keptQueued = 2
    /// Buffers asked for at least (a pipeline's own count may be fewer, as two for a raw stream).
    static let bufferCount = 4

    static let logger = Logger(label: "camrig.libcamera")

    /// Opens libcamera's camera `id`: a `PacedLibcameraCamera` when no kernel device is behind it (nothing
    /// paces its requests but the backend), else a `LibcameraCamera`.
    static func open(manager: LibcameraManager, id: String, clock: HostClock, lendFrames: Bool) throws(DeviceError) -> LibcameraCamera {
        var error = [CChar](repeating: 0, count: 512)
        guard let handle = manager.lock.withLock({ camrig_lc_open(manager.handle, id, &error, error.count) }) else {
            throw DeviceError(.notFound, device: "libcamera:\(id)", libcameraMessage(error))
        }
        var properties = camrig_lc_properties()
        camrig_lc_properties_get(handle, &properties)
        let type: LibcameraCamera.Type = properties.system_device_count == 0 ? PacedLibcameraCamera.self : LibcameraCamera.self
        return try type.init(handle: handle, properties: properties, id: id, clock: clock, lendFrames: lendFrames)
    }

    /// Takes over `handle` (closed with this camera, or at once when this fails).
    required init(handle: OpaquePointer, properties: camrig_lc_properties, id: String, clock: HostClock, lendFrames: Bool) throws(DeviceError) {
        cameraID = id
        self.clock = clock
        self.lendFrames = lendFrames
        self.handle = handle
        model = withUnsafeBytes(of: properties.model) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        rotation = properties.rotation >= 0 ? Int(properties.rotation) : nil
        pixelArraySize = properties.pixel_array_width > 0
            ? Dimensions(width: properties.pixel_array_width, height: properties.pixel_array_height) : nil
        systemDevices = withUnsafeBytes(of: properties.system_devices) {
            Array($0.bindMemory(to: UInt64.self).prefix(Int(properties.system_device_count)))
        }
        let position: DevicePosition = properties.location == 0 ? .front : properties.location == 1 ? .back : .unspecified
        identity = DeviceIdentity(
            uniqueID: "libcamera:\(id)",
            localizedName: model.isEmpty ? id : model,
            modelID: "libcamera:\(model.isEmpty ? "unknown" : model)",
            deviceType: properties.location == 2 ? .external : .builtInWideAngle,
            position: position,
            backend: "libcamera"
        )
        var cControls = [camrig_lc_control](repeating: camrig_lc_control(), count: 256)
        let controlCount = camrig_lc_controls(handle, &cControls, Int32(cControls.count))
        controls = cControls.prefix(Int(controlCount)).map(LibcameraControl.init)
        controlList = controls.compactMap(\.descriptor).sorted { $0.id < $1.id }
        mapping = LibcameraSettingsMapping(controls)
        typedControlSupport = mapping.support
        var cFormats = [camrig_lc_format](repeating: camrig_lc_format(), count: 1024)
        let formatCount = camrig_lc_formats(handle, &cFormats, Int32(cFormats.count))
        // Limits listed before any configuration (a pipeline may list placeholders until it knows the mode).
        let unconfigured = controls.first { $0.name == "FrameDurationLimits" }
        var list: [DeviceFormat] = []
        var roles: [String: (role: Int32, fourcc: UInt32, modifier: UInt64)] = [:]
        // Processed roles first (video, viewfinder, still), then raw: a size both offer is configured processed.
        let preference: [Int32] = [Int32(CAMRIG_LC_ROLE_VIDEO), Int32(CAMRIG_LC_ROLE_VIEWFINDER), Int32(CAMRIG_LC_ROLE_STILL), Int32(CAMRIG_LC_ROLE_RAW)]
        let ordered = cFormats.prefix(Int(formatCount)).sorted { (preference.firstIndex(of: $0.role) ?? 4) < (preference.firstIndex(of: $1.role) ?? 4) }
        for entry in ordered {
            let id = "\(Self.pixelFormat(libcameraFourCC: entry.fourcc).fourCC)-\(entry.width)x\(entry.height)"
            guard roles[id] == nil else { continue }
            // Each format's own rates: the limits the pipeline lists once configured for it (the sensor mode
            // it picks); those listed before, when the camera cannot be configured now (another program has it).
            var low: Int64 = 0
            var high: Int64 = 0
            let probed = camrig_lc_probe_frame_duration_limits(handle, entry.role, entry.fourcc, entry.modifier, entry.width, entry.height, &low, &high) == 0
            let rates = probed ? Self.frameRateRanges(minimumMicroseconds: Double(low), maximumMicroseconds: Double(high)) : Self.frameRateRanges(unconfigured)
            let format = DeviceFormat(
                pixelFormat: Self.pixelFormat(libcameraFourCC: entry.fourcc), dimensions: Dimensions(width: entry.width, height: entry.height),
                frameRateRanges: rates)
            roles[format.id] = (entry.role, entry.fourcc, entry.modifier)
            list.append(format)
        }
        // Largest first within each pixel format, as V4L2 devices list them.
        formatList = list.sorted { ($0.pixelFormat.rawValue, $1.dimensions) < ($1.pixelFormat.rawValue, $0.dimensions) }
        streamFormats = roles
        stream = CameraStream(device: "libcamera:\(id)")
        if formatList.isEmpty {
            // deinit closes the handle.
            throw DeviceError(.unsupported, device: "libcamera:\(id)", "libcamera generates no stream configuration for it")
        }
    }

    deinit {
        camrig_lc_close(handle)
    }

    /// The model's pixel format for a libcamera (DRM) fourcc: NV12, YUV420 ('YU12'), YUYV, MJPEG and 8-bit
    /// Bayer share V4L2's codes; DRM's BGR888 ('BG24') is R, G, B in memory, V4L2's RGB24.
    static func pixelFormat(libcameraFourCC fourcc: UInt32) -> PixelFormat {
        let code = PixelFormat(rawValue: fourcc)
        if code == PixelFormat(fourCC: "BG24")! { return .rgb24 }
        return code
    }

    /// Frame-rate ranges from `FrameDurationLimits` (whole microseconds): a limit within a microsecond of
    /// 1/N s for a whole N is taken as exactly that (libcamera truncates 1/30 s to 33333 µs).
    static func frameRateRanges(_ limits: LibcameraControl?) -> [FrameRateRange] {
        frameRateRanges(minimumMicroseconds: limits?.minimum.first ?? .nan, maximumMicroseconds: limits?.maximum.first ?? .nan)
    }

    /// Frame-rate ranges from limits in microseconds; 30 fps when there are none.
    static func frameRateRanges(minimumMicroseconds low: Double, maximumMicroseconds high: Double) -> [FrameRateRange] {
        guard low.isFinite, high.isFinite, low > 0, high >= low
        else { return [FrameRateRange(discrete: FrameDuration(framesPerSecond: 30)!)] }
        guard let shortest = duration(microseconds: low), let longest = duration(microseconds: high),
            let range = FrameRateRange(min: shortest, max: longest, kind: .continuous)
        else { return [FrameRateRange(discrete: FrameDuration(framesPerSecond: 30)!)] }
        return [range]
    }

    /// A frame duration of `microseconds`, snapped to 1/N s when within a microsecond of it.
    static func duration(microseconds: Double) -> FrameDuration? {
        let rate = (1_000_000 / microseconds).rounded()
        if rate >= 1, abs(1_000_000 / rate - microseconds) < 1 { return FrameDuration(numerator: 1, denominator: UInt32(rate)) }
        return FrameDuration(numerator: UInt32(microseconds.rounded()), denominator: 1_000_000)
    }

    /// `lock.withLock` with the error type kept.
    func locked<T>(_ body: () throws(DeviceError) -> T) throws(DeviceError) -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }

    /// How this camera's frames have left libcamera's buffers so far.
    public var frameBuffers: FrameBufferStatistics { bufferStatistics.withLockedValue { $0 } }

    /// Whether a stream runs.
    public var isStreaming: Bool { stream.isStreaming }

    // MARK: CameraBackend

    public func formats() throws(DeviceError) -> [DeviceFormat] { formatList }
    public func controlDescriptors() throws(DeviceError) -> [ControlDescriptor] { controlList }

    public func readControls(_ ids: [UInt32]) throws(DeviceError) -> [UInt32: Int64] {
        let values = state.withLockedValue { $0.rawValues }
        var result: [UInt32: Int64] = [:]
        for id in ids {
            guard let descriptor = controlList.first(where: { $0.id == id }) else { continue }
            result[id] = values[id] ?? descriptor.defaultValue
        }
        return result
    }

    public func writeControls(_ values: [(id: UInt32, value: Int64)]) throws(DeviceError) {
        let byID = Dictionary(uniqueKeysWithValues: controls.map { ($0.id, $0) })
        var converted: [camrig_lc_value] = []
        for (id, value) in values {
            guard let control = byID[id], control.isScalar else {
                throw DeviceError(.invalidArgument, device: identity.uniqueID, "has no raw control 0x\(String(id, radix: 16))")
            }
            converted.append(control.value(fromRaw: value))
        }
        try send(converted)
        state.withLockedValue { state in
            for (id, value) in values { state.rawValues[id] = value }
        }
    }

    /// Controls for the next request (or the start of the next stream).
    func send(_ values: [camrig_lc_value]) throws(DeviceError) {
        guard !values.isEmpty else { return }
        try libcameraCall(.invalidArgument, device: identity.uniqueID) { error, size in
            values.withUnsafeBufferPointer { camrig_lc_set_controls(handle, $0.baseAddress, Int32($0.count), error, size) }
        }
    }

    /// `FrameDurationLimits` of [duration, duration] µs, when the camera lists it.
    func frameDurationValue(microseconds: Int64) -> camrig_lc_value? {
        guard let limits = controls.first(where: { $0.name == "FrameDurationLimits" }) else { return nil }
        return camrig_lc_value(id: limits.id, count: 2, values: (Double(microseconds), Double(microseconds), 0, 0))
    }

    public func activate(format: DeviceFormat, frameDuration: FrameDuration) throws(DeviceError) -> FrameDuration {
        // The device may be configured again as soon as `stopStreaming` returns: a stream still stopping is
        // waited for (libcamera refuses `configure` in Stopping).
        try stream.waitUntilIdle()
        let duration = try locked { () throws(DeviceError) -> FrameDuration in
            guard let chosen = streamFormats[format.id] else {
                throw DeviceError(.unsupported, device: identity.uniqueID, "has no format \(format.id)")
            }
            try freePreviousBuffers()
            var stride: UInt32 = 0
            var frameSize: UInt32 = 0
            try libcameraCall(.unsupported, device: identity.uniqueID) { error, size in
                camrig_lc_configure(
                    handle, chosen.role, chosen.fourcc, chosen.modifier, format.dimensions.width, format.dimensions.height,
                    UInt32(Self.bufferCount), &stride, &frameSize, error, size)
            }
            var low: Int64 = 0
            var high: Int64 = 0
            let limits = camrig_lc_frame_duration_limits(handle, &low, &high) == 0 && low > 0 ? (low, high) : nil
            var crop = [Int32](repeating: 0, count: 4)
            let cropMaximum = camrig_lc_scaler_crop_maximum(handle, &crop) == 0 && crop[2] > 0 && crop[3] > 0 ? crop.map(Double.init) : nil
            state.withLockedValue { state in
                state.frameDurationLimits = limits
                state.cropMaximum = cropMaximum
            }
            var active = format
            if !format.pixelFormat.isCompressed, stride > 0 {
                active = DeviceFormat(
                    pixelFormat: format.pixelFormat, dimensions: format.dimensions, frameRateRanges: format.frameRateRanges,
                    supportedPhotoDimensions: format.supportedPhotoDimensions, maxZoomFactor: format.maxZoomFactor, bytesPerLine: stride,
                    imageSize: frameSize)
            }
            let microseconds = frameDuration.nanoseconds / 1000
            if let limits = frameDurationValue(microseconds: microseconds) { try send([limits]) }
            state.withLockedValue { state in
                state.format = active
                state.frameDuration = frameDuration
            }
            return frameDuration
        }
        stream.configured()
        return duration
    }

    public func apply(settings: CameraSettings) throws(DeviceError) {
        let crop = state.withLockedValue { $0.cropMaximum }
        try send(mapping.values(for: settings, fullCrop: crop))
        state.withLockedValue { $0.settings = settings }
    }

    /// Under `lock`: frees a previous stream's buffers once its lent frames are back (waiting up to a second).
    func freePreviousBuffers() throws(DeviceError) {
        guard let previous = state.withLockedValue({ $0.previous }) else { return }
        let held = previous.loans.waitForReturns(timeout: 1)
        guard held == 0 else {
            throw DeviceError(.busy, device: identity.uniqueID, "\(held) frame(s) of its previous stream are still held in libcamera's buffers; try again", errno: EBUSY)
        }
        camrig_lc_release(handle)
        state.withLockedValue { $0.previous = nil }
    }

    public func startStreaming(bufferCount: Int, sink: @escaping @Sendable (FrameEvent) -> Void) throws(DeviceError) {
        let run = try stream.start()
        let started: (Requests, DeviceFormat)
        do throws(DeviceError) {
            started = try locked { () throws(DeviceError) -> (Requests, DeviceFormat) in
                guard let format = state.withLockedValue({ $0.format }) else {
                    throw DeviceError(.invalidArgument, device: identity.uniqueID, "has no active format")
                }
                try freePreviousBuffers()
                var memoryBacked: Int32 = 0
                let count = try libcameraCall(.system, device: identity.uniqueID) { error, size in
                    camrig_lc_start(handle, &memoryBacked, error, size)
                }
                let requests = Requests(bufferCount: Int(count), memoryBacked: memoryBacked != 0)
                state.withLockedValue { $0.current = requests }
                return (requests, format)
            }
        } catch {
            stream.startFailed(run)
            throw error
        }
        let (requests, format) = started
        let thread = Thread { [self] in
            self.run(run, requests: requests, format: format, sink: sink)
        }
        thread.name = "camrig-libcamera"
        thread.qualityOfService = .userInteractive
        thread.start()
    }

    public func stopStreaming() {
        guard stream.stop() else { return }
        // Only the streaming thread stops libcamera's camera: a stop from here could come late, after the
        // next stream had started, and end that one instead.
        camrig_lc_wake(handle)
    }

    /// How close to a paced instant the streaming thread sleeps on the monotonic clock instead of the
    /// stream's condition (timed on the wall clock).
    static let finalSleep: Int64 = 2_000_000

    /// Whether this backend paces the requests itself (libcamera's pipeline completes them at once).
    var pacesRequests: Bool { false }

    /// The streaming thread: requests queued (all at once, or one per frame instant when paced), frames
    /// delivered, buffers queued again as they come back.
    func run(_ run: UInt64, requests: Requests, format: DeviceFormat, sink: @Sendable (FrameEvent) -> Void) {
        var ending: DeviceError?
        var stamps = StampClock()
        var free: [UInt32] = Array(0..<UInt32(requests.bufferCount))
        var queuedAt: [UInt32: Int64] = [:]
        var sequence: UInt64 = 0
        let streamStart = clock.now()
        let paced = pacesRequests
        var due = HostClock.monotonicNow()
        if paced {
            let (anchor, period) = state.withLockedValue { state in
                defer { state.alignment = nil }
                return (state.alignment, state.frameDuration.nanoseconds)
            }
            if let anchor, abs(due - anchor) < 1_000_000_000 {
                let k = due <= anchor ? 0 : (due - anchor + period - 1) / period
                due = anchor + k * period
            }
        }
        func queue(_ index: UInt32) throws(DeviceError) {
            queuedAt[index] = HostClock.monotonicNow()
            try libcameraCall(.system, device: identity.uniqueID) { error, size in camrig_lc_queue(handle, index, error, size) }
        }
        loop: while stream.isRunning(run) {
            do throws(DeviceError) {
                free += requests.returned.withLockedValue { returned in
                    defer { returned.removeAll() }
                    return returned
                }
                if paced {
                    // One request per frame instant: the virtual pipeline makes the frame when it is queued.
                    if let index = free.first, queuedAt.count < 2 {
                        let period = state.withLockedValue { $0.frameDuration.nanoseconds }
                        let now = HostClock.monotonicNow()
                        // Fallen behind by more than a frame: the instants missed are skipped, as a sensor drops frames.
                        if now > due + period { due += (now - due) / period * period }
                        // On the stream's condition (a stop wakes it at once) until shortly before the instant,
                        // then to the instant itself on the monotonic clock.
                        if due - now > Self.finalSleep, !stream.wait(whileRunning: run, nanoseconds: due - now - Self.finalSleep) {
                            break loop
                        }
                        HostClock.sleep(untilMonotonic: due)
                        guard stream.isRunning(run) else { break loop }
                        free.removeFirst()
                        try queue(index)
                        due += state.withLockedValue { $0.frameDuration.nanoseconds }
                    }
                } else {
                    while let index = free.first {
                        free.removeFirst()
                        try queue(index)
                    }
                }
            } catch {
                if stream.isRunning(run) { ending = error }
                break
            }
            var completed = camrig_lc_frame()
            let waited = camrig_lc_wait(handle, paced ? 5 : 200, &completed)
            if waited < 0 { break }
            if waited == 0 {
                if !paced, queuedAt.isEmpty == false, !isPresent() {
                    ending = DeviceError(.disconnected, device: identity.uniqueID, "vanished from libcamera while streaming")
                    break
                }
                continue
            }
            let index = completed.index
            let queued = queuedAt.removeValue(forKey: index) ?? HostClock.monotonicNow()
            // A cancelled request, or a buffer a kernel-backed pipeline marked as failed: the frame is lost,
            // the stream goes on. (The virtual pipeline never sets its buffers' status: it is not read there.)
            guard completed.status == 0, paced || completed.buffer_status == 0 else {
                free.append(index)
                continue
            }
            let stamp = stamps.monotonic(
                sensorTimestamp: completed.sensor_timestamp >= 0 ? completed.sensor_timestamp : completed.buffer_timestamp)
            let reading = clock.reading(atMonotonic: stamp)
            var exposureStart = reading
            var uncertainty: Int64 = 0
            var marks = TimestampMarks.startOfExposure
            if paced {
                // The pipeline made the frame between the queueing and its stamp: the exposure is the queueing.
                exposureStart = clock.reading(atMonotonic: min(queued, stamp))
                uncertainty = max(0, stamp - queued)
                marks = .endOfFrame
            }
            if !paced, completed.requested_frame_duration > 0, completed.frame_duration > 0 {
                compliance.withLockedValue { $0.observe(requested: completed.requested_frame_duration, reported: completed.frame_duration) }
            }
            let (bytes, lent) = frameBytes(completed, requests: requests, otherBuffers: queuedAt.count + free.count)
            if !lent { free.append(index) }
            let settings = state.withLockedValue { $0.settings }
            var metadata = CaptureMetadata(settings: settings)
            if completed.exposure_time > 0, let exposure = FrameDuration(numerator: UInt32(completed.exposure_time), denominator: 1_000_000) {
                metadata.exposureDuration = exposure
            }
            if completed.analogue_gain.isFinite { metadata.iso = Float(completed.analogue_gain * 100) }
            if completed.lens_position.isFinite, let position = mapping.lensPosition(dioptres: completed.lens_position) {
                metadata.lensPosition = Float(position)
            }
            if completed.colour_temperature > 0 { metadata.whiteBalanceTemperature = Float(completed.colour_temperature) }
            var frame = CapturedFrame(
                deviceID: identity.uniqueID, sequence: sequence, timestamp: reading, timestampMarks: marks, format: format, bytes: bytes,
                metadata: metadata, exposureStart: exposureStart, exposureStartUncertainty: uncertainty)
            frame.streamStart = streamStart
            sequence += 1
            sink(.frame(frame))
        }
        // However the loop ended, the stream is now stopping (a new configuration waits for it).
        stream.stop()
        camrig_lc_stop(handle)
        let statistics = bufferStatistics.withLockedValue { $0 }
        Self.logger.info(
            "stream ended",
            metadata: [
                "device": "\(identity.uniqueID)", "frames": "\(sequence)", "lent": "\(statistics.lent)", "copied": "\(statistics.copied)",
                "buffers": "\(requests.bufferCount) \(requests.memoryBacked ? "memory-backed (the pipeline exported none)" : "from the pipeline")",
            ])
        // Frames on their way to clients hold lent buffers for a moment.
        _ = requests.loans.waitForReturns(timeout: 1)
        lock.withLock {
            let held = requests.loans.count
            state.withLockedValue { state in
                state.current = nil
                state.previous = requests
            }
            if held == 0 {
                camrig_lc_release(handle)
                state.withLockedValue { $0.previous = nil }
            }
        }
        // A configuration or stream waiting for this one may go on.
        stream.ended(run)
        sink(.ended(ending))
    }

    /// Whether libcamera still lists the camera.
    func isPresent() -> Bool {
        guard case .success(let manager) = LibcameraManager.shared else { return false }
        return manager.cameraIDs().contains(cameraID)
    }

    /// A completed request's bytes: lent in libcamera's buffer while at least `keptQueued` other buffers
    /// stay with the pipeline or ready for it (and the planes lie one after another), otherwise copied out.
    func frameBytes(_ frame: camrig_lc_frame, requests: Requests, otherBuffers: Int) -> (ByteBuffer, Bool) {
        let index = frame.index
        if lendFrames, let data = frame.data, frame.length > 0, otherBuffers >= Self.keptQueued {
            bufferStatistics.withLockedValue { $0.lent += 1 }
            let memory = UnsafeMutableRawBufferPointer(start: UnsafeMutableRawPointer(mutating: data), count: frame.length)
            // The loan holds the camera (its mappings live as long) and wakes the streaming thread to queue the
            // buffer again at once.
            let bytes = requests.loans.lend(memory, used: frame.length) { [self] in
                requests.returned.withLockedValue { $0.append(index) }
                camrig_lc_wake(handle)
            }
            return (bytes, true)
        }
        bufferStatistics.withLockedValue { $0.copied += 1 }
        let capacity = max(frame.length, Int(state.withLockedValue { $0.format?.imageSize ?? 0 }))
        var bytes = ByteBufferAllocator().buffer(capacity: capacity)
        bytes.writeWithUnsafeMutableBytes(minimumWritableBytes: capacity) { target in
            let copied = camrig_lc_copy(handle, index, target.baseAddress!.assumingMemoryBound(to: UInt8.self), target.count)
            return min(copied, frame.data != nil && frame.length > 0 ? frame.length : copied)
        }
        return (bytes, false)
    }

    // MARK: FreeRunningBackend

    /// `FrameDurationLimits` as a frame-duration control of 1 µs "lines": a request's limits [d, d] make its
    /// frame d µs long, which the phase lock lengthens or shortens frame by frame as it does VBLANK.
    public func frameDurationControl() throws(DeviceError) -> FrameDurationControl? {
        guard let (low, high) = state.withLockedValue({ $0.frameDurationLimits }) else { return nil }
        let (duration, buffers) = state.withLockedValue { ($0.frameDuration.nanoseconds, $0.current?.bufferCount ?? Self.bufferCount) }
        // Limits set now ride on the next request queued: the requests in flight ahead of it run first.
        return FrameDurationControl(
            lineDuration: 1000, lines: duration / 1000, minimumLines: low, maximumLines: high,
            actuationDelay: Int64(max(buffers - 1, 0)) * duration)
    }

    public func setFrameLines(_ lines: Int64) throws(DeviceError) {
        guard let limits = frameDurationValue(microseconds: lines) else {
            throw DeviceError(.unsupported, device: identity.uniqueID, "lists no FrameDurationLimits control")
        }
        if let ignored = compliance.withLockedValue({ $0.verdict }) {
            throw DeviceError(.unsupported, device: identity.uniqueID, ignored)
        }
        try send([limits])
    }

    public func restartStream(atMonotonic monotonic: Int64) throws(DeviceError) {
        throw DeviceError(
            .unsupported, device: identity.uniqueID,
            "lists no FrameDurationLimits its pipeline honours, and a libcamera stream is not restarted at an instant: its phase cannot be steered")
    }
}

/// A libcamera camera with no kernel device behind it (libcamera's virtual cameras): its pipeline makes a
/// frame as soon as a request is queued, so this backend queues one request per frame instant, and its
/// exposures go on a grid by being queued on it, as a triggered camera's.
public final class PacedLibcameraCamera: LibcameraCamera, FrameAlignableBackend, @unchecked Sendable {
    override var pacesRequests: Bool { true }

    public func alignNextStream(toMonotonic anchor: Int64) {
        state.withLockedValue { $0.alignment = anchor }
    }
}

/// Which clock a pipeline's `SensorTimestamp` is on. libcamera documents CLOCK_BOOTTIME; pipelines fill it
/// from V4L2 buffer stamps (CLOCK_MONOTONIC) or, like the virtual one, from `steady_clock` (CLOCK_MONOTONIC).
/// The two differ only by the time the machine spent suspended (not at all on a camera host that never
/// sleeps); when they differ, the first stamp decides which clock it is nearer, and BOOTTIME stamps are
/// converted.
struct StampClock {
    private var bootOffset: Int64?

    /// `CLOCK_BOOTTIME − CLOCK_MONOTONIC` now.
    static func bootTimeOffset() -> Int64 {
        var boot = timespec()
        clock_gettime(CLOCK_BOOTTIME, &boot)
        let monotonic = HostClock.monotonicNow()
        return Int64(boot.tv_sec) * 1_000_000_000 + Int64(boot.tv_nsec) - monotonic
    }

    /// `stamp` on CLOCK_MONOTONIC.
    mutating func monotonic(sensorTimestamp stamp: Int64) -> Int64 {
        let offset = bootOffset ?? Self.offset(of: stamp, now: HostClock.monotonicNow(), bootTimeLead: Self.bootTimeOffset())
        bootOffset = offset
        return stamp - offset
    }

    /// What to take from stamps like `stamp`, read when CLOCK_MONOTONIC was `now` and CLOCK_BOOTTIME led it
    /// by `bootTimeLead`: that lead for a BOOTTIME stamp, else 0. A machine never suspended has the two
    /// clocks equal (the lead read is a few ns of noise); otherwise a stamp nearer BOOTTIME's reading of now
    /// than MONOTONIC's is a BOOTTIME stamp.
    static func offset(of stamp: Int64, now: Int64, bootTimeLead: Int64) -> Int64 {
        abs(bootTimeLead) >= 1_000_000 && abs(stamp - (now + bootTimeLead)) < abs(stamp - now) ? bootTimeLead : 0
    }
}

/// Whether a pipeline honours the FrameDurationLimits a request carries, judged from the FrameDuration its
/// metadata reports for that request: a pipeline that ignores them cannot have its phase steered by them.
struct FrameDurationCompliance: Sendable {
    private(set) var followed = 0
    private(set) var ignored = 0
    private var last: (requested: Int64, reported: Int64)?

    /// Requests whose frames ran otherwise, with none that ran as asked, before the pipeline is judged to ignore them.
    static let judgedAfter = 8

    /// Takes one request's frame: the duration asked for ([d, d] µs) and the one reported.
    mutating func observe(requested: Int64, reported: Int64) {
        // A sensor runs whole lines: within 1 % (or 50 µs) is as asked.
        if abs(reported - requested) <= max(50, requested / 100) {
            followed += 1
        } else {
            ignored += 1
            last = (requested, reported)
        }
    }

    /// Why the phase cannot be steered through FrameDurationLimits, once that is clear; nil until then.
    var verdict: String? {
        guard followed == 0, ignored >= Self.judgedAfter, let last else { return nil }
        return "its pipeline ignores FrameDurationLimits: \(ignored) requests asked for frames of \(last.requested) µs and ran \(last.reported) µs"
    }
}
