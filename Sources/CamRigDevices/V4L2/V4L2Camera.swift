import CamRigClock
import CLibV4L2
import CamRigDeviceModel
import Foundation
import NIOConcurrencyHelpers
import NIOCore

/// A V4L2 capture device through libv4l2.
///
/// Formats come from ENUM_FMT × ENUM_FRAMESIZES × ENUM_FRAMEINTERVALS; typed controls map onto V4L2
/// control ids (never names); streaming uses mmap buffers on a dedicated thread, and each frame keeps
/// the driver's timestamp and says what it marks.
public final class V4L2Camera: FreeRunningBackend {
    public let path: String
    /// The host clock frames are stamped on: the driver's `CLOCK_MONOTONIC` stamps read through it
    /// (the skewed clock of a simulated host, or the machine's own).
    public let clock: HostClock
    public let identity: DeviceIdentity
    public let typedControlSupport: TypedControlSupport
    private let formatList: [DeviceFormat]
    private let controlList: [ControlDescriptor]
    private let handle: V4L2Handle
    /// Serializes ioctls that change state; streaming runs on its own thread.
    private let lock = NIOLock()
    /// Its streaming life: configured (a V4L2 node always has a format), running, stopping.
    private let stream: CameraStream
    /// The running stream's restart and timing, while one runs.
    private let current = NIOLockedValueBox<StreamState?>(nil)
    /// Whether frames are handed on in the driver's buffers (see `MappedBuffers`) rather than copied.
    public let lendFrames: Bool
    private let bufferStatistics = NIOLockedValueBox(FrameBufferStatistics())
    /// The last stream's buffers while frames of it are still held.
    private let previousBuffers = NIOLockedValueBox<MappedBuffers?>(nil)

    /// How this camera's frames have left the driver's buffers so far, all streams together.
    public var frameBuffers: FrameBufferStatistics { bufferStatistics.withLockedValue { $0 } }

    final class StreamState: Sendable {
        /// A restart asked for: stop, then stream again at this `CLOCK_MONOTONIC` instant.
        let restartAt = NIOLockedValueBox<Int64?>(nil)
        /// How to turn this stream's stamps into exposure starts (refreshed when controls change).
        let timing: NIOLockedValueBox<ExposureTiming>

        init(timing: ExposureTiming) { self.timing = NIOLockedValueBox(timing) }
    }

    /// What an end-of-frame stamp needs to become an exposure start: exposure and readout times, where known.
    struct ExposureTiming: Sendable {
        /// Exposure time in nanoseconds, when set manually.
        var exposure: Int64?
        /// Readout time (active lines × line duration), when the sensor reports its pixel rate.
        var readout: Int64?
        /// The nominal frame duration: how uncertain an unknown exposure or readout leaves the start.
        var frameDuration: Int64

        /// The exposure start for a stamp marking `marks`, and its uncertainty.
        func exposureStart(stamp: Int64, marks: TimestampMarks) -> (Int64, Int64) {
            switch marks {
            case .startOfExposure:
                return (stamp, 0)
            case .endOfFrame:
                let known = (exposure ?? 0) + (readout ?? 0)
                let unknown = exposure == nil || readout == nil
                return (stamp - known, unknown ? frameDuration : 0)
            case .dequeue:
                // Dequeued some time after readout: at least the readout, at most a frame or two later.
                return (stamp - (exposure ?? 0) - (readout ?? frameDuration), 2 * frameDuration)
            }
        }
    }

    /// Opens the device at `path` and reads its formats and controls. Fails for nodes that cannot capture.
    /// - Parameter lendFrames: hand frames on in the driver's own buffers (no copy); false copies every
    ///   frame out, for a driver whose buffers must not be held.
    public init(path: String, label: String = "", clock: HostClock = .system, lendFrames: Bool = true) throws(DeviceError) {
        self.lendFrames = lendFrames
        let handle = try V4L2Handle(path: path)
        let caps = try handle.capabilities()
        guard caps.isVideoCapture, caps.canStream else {
            throw DeviceError(.unsupported, device: path, "is not a streaming video capture node (driver \(caps.driver))")
        }
        let serial = Self.serialNumber(path: path)
        let stableKey = serial.map { "serial-\($0)" } ?? caps.busInfo
        identity = DeviceIdentity(
            uniqueID: "v4l2:\(caps.driver):\(stableKey)",
            localizedName: caps.card,
            modelID: "\(caps.driver):\(caps.card)",
            deviceType: caps.busInfo.hasPrefix("usb") ? .external : .builtInWideAngle,
            label: label,
            backend: "v4l2"
        )
        let deviceHandle = try V4L2Handle(path: path, deviceID: identity.uniqueID)
        handle.close()
        self.handle = deviceHandle
        self.path = path
        self.clock = clock
        formatList = try deviceHandle.formats()
        controlList = try deviceHandle.controls()
        typedControlSupport = Self.support(from: controlList)
        stream = CameraStream(device: identity.uniqueID)
        stream.configured()
    }

    /// USB serial number from sysfs, when the device has one.
    static func serialNumber(path: String) -> String? {
        let node = (path as NSString).lastPathComponent
        guard node.hasPrefix("video") else { return nil }
        for relative in ["device/../serial", "device/serial"] {
            if let text = try? String(contentsOfFile: "/sys/class/video4linux/\(node)/\(relative)", encoding: .utf8) {
                let serial = text.trimmingCharacters(in: .whitespacesAndNewlines)
                if !serial.isEmpty { return serial }
            }
        }
        return nil
    }

    static func support(from controls: [ControlDescriptor]) -> TypedControlSupport {
        let ids = Set(controls.map(\.id))
        var support = TypedControlSupport()
        if ids.contains(V4L2ControlID.focusAuto) { support.focusModes.formUnion([.continuous, .locked]) }
        if ids.contains(V4L2ControlID.focusAbsolute) {
            support.focusModes.insert(.locked)
            support.lensPosition = true
        }
        if ids.contains(V4L2ControlID.exposureAuto) { support.exposureModes.formUnion([.continuous, .locked]) }
        if ids.contains(V4L2ControlID.exposureAbsolute) { support.exposureModes.formUnion([.custom, .locked]) }
        if ids.contains(V4L2ControlID.autoWhiteBalance) { support.whiteBalanceModes.formUnion([.continuous, .locked]) }
        if !ids.contains(V4L2ControlID.whiteBalanceTemperature) { support.whiteBalanceModes.remove(.locked) }
        support.zoom = ids.contains(V4L2ControlID.zoomAbsolute)
        support.torch = ids.contains(V4L2ControlID.flashLEDMode)
        return support
    }

    /// `lock.withLock` with the error type kept.
    private func locked<T>(_ body: () throws(DeviceError) -> T) throws(DeviceError) -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }

    // MARK: CameraBackend

    public func formats() throws(DeviceError) -> [DeviceFormat] { formatList }
    public func controlDescriptors() throws(DeviceError) -> [ControlDescriptor] { controlList }

    public func readControls(_ ids: [UInt32]) throws(DeviceError) -> [UInt32: Int64] {
        try locked { () throws(DeviceError) -> [UInt32: Int64] in try handle.readControls(ids) }
    }

    public func writeControls(_ values: [(id: UInt32, value: Int64)]) throws(DeviceError) {
        let types = Dictionary(uniqueKeysWithValues: controlList.map { ($0.id, $0.type) })
        try locked { () throws(DeviceError) in
            try handle.writeControls(values, types: types)
            if let state = current.withLockedValue({ $0 }), let timing = try? exposureTiming() {
                state.timing.withLockedValue { $0 = timing }
            }
        }
    }

    public func activate(format: DeviceFormat, frameDuration: FrameDuration) throws(DeviceError) -> FrameDuration {
        // A stream that is stopping still holds the driver's queue (S_FMT would fail with EBUSY): waited for.
        try stream.waitUntilIdle()
        return try locked { () throws(DeviceError) -> FrameDuration in
            try freePreviousBuffers()
            var request = v4l2_format()
            request.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
            request.fmt.pix.pixelformat = format.pixelFormat.rawValue
            request.fmt.pix.width = format.dimensions.width
            request.fmt.pix.height = format.dimensions.height
            request.fmt.pix.field = V4L2_FIELD_NONE.rawValue
            try handle.ioctl(CAMRIG_VIDIOC_S_FMT, &request, "VIDIOC_S_FMT \(format.id)")
            let got = Dimensions(width: request.fmt.pix.width, height: request.fmt.pix.height)
            guard request.fmt.pix.pixelformat == format.pixelFormat.rawValue, got == format.dimensions else {
                throw DeviceError(.unsupported, device: identity.uniqueID, "asked for \(format.id), the driver chose \(PixelFormat(rawValue: request.fmt.pix.pixelformat))-\(got)")
            }
            var parameters = v4l2_streamparm()
            parameters.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
            parameters.parm.capture.timeperframe = v4l2_fract(numerator: frameDuration.numerator, denominator: frameDuration.denominator)
            try handle.ioctl(CAMRIG_VIDIOC_S_PARM, &parameters, "VIDIOC_S_PARM \(frameDuration)")
            let actual = parameters.parm.capture.timeperframe
            return FrameDuration(numerator: actual.numerator, denominator: actual.denominator) ?? frameDuration
        }
    }

    public func apply(settings: CameraSettings) throws(DeviceError) {
        var values: [(id: UInt32, value: Int64)] = []
        let byID = Dictionary(uniqueKeysWithValues: controlList.map { ($0.id, $0) })
        func set(_ id: UInt32, _ value: Int64) {
            guard let control = byID[id], !control.isReadOnly else { return }
            values.append((id, min(max(value, control.minimum), control.maximum)))
        }
        func scaled(_ id: UInt32, _ fraction: Double) -> Int64? {
            guard let control = byID[id] else { return nil }
            return control.minimum + Int64((Double(control.maximum - control.minimum) * fraction).rounded())
        }
        if byID[V4L2ControlID.focusAuto] != nil { set(V4L2ControlID.focusAuto, settings.focusMode == .continuous ? 1 : 0) }
        if settings.focusMode == .locked, let position = scaled(V4L2ControlID.focusAbsolute, Double(settings.lensPosition)) {
            set(V4L2ControlID.focusAbsolute, position)
        }
        if let exposureAuto = byID[V4L2ControlID.exposureAuto] {
            let automatic = exposureAuto.menu.contains { $0.index == V4L2ControlID.ExposureAutoValue.auto }
                ? V4L2ControlID.ExposureAutoValue.auto : V4L2ControlID.ExposureAutoValue.aperturePriority
            let manual = settings.exposureMode == .custom || settings.exposureMode == .locked
            set(V4L2ControlID.exposureAuto, manual ? V4L2ControlID.ExposureAutoValue.manual : automatic)
        }
        if settings.exposureMode == .custom || settings.exposureMode == .locked {
            // V4L2_CID_EXPOSURE_ABSOLUTE counts 100 µs units.
            set(V4L2ControlID.exposureAbsolute, Int64((settings.exposureDuration.seconds * 10_000).rounded()))
            if byID[V4L2ControlID.gain] != nil, let gain = byID[V4L2ControlID.gain] {
                set(V4L2ControlID.gain, Int64((Double(gain.defaultValue) * Double(settings.iso) / 100).rounded()))
            }
        }
        if byID[V4L2ControlID.autoWhiteBalance] != nil {
            set(V4L2ControlID.autoWhiteBalance, settings.whiteBalanceMode == .continuous || settings.whiteBalanceMode == .auto ? 1 : 0)
        }
        if settings.whiteBalanceMode == .locked {
            set(V4L2ControlID.whiteBalanceTemperature, Int64(settings.whiteBalanceTemperature))
            // Red/blue balance controls: the default is neutral, gains scale it.
            for (id, gain) in [(V4L2ControlID.redBalance, settings.whiteBalanceRedGain), (V4L2ControlID.blueBalance, settings.whiteBalanceBlueGain)] {
                if let control = byID[id] { set(id, Int64((Double(control.defaultValue) * Double(gain)).rounded())) }
            }
        }
        if let maxZoom = formatList.map(\.maxZoomFactor).max(), maxZoom > 1,
            let zoom = scaled(V4L2ControlID.zoomAbsolute, (settings.zoomFactor - 1) / (maxZoom - 1))
        {
            set(V4L2ControlID.zoomAbsolute, zoom)
        } else if let zoom = byID[V4L2ControlID.zoomAbsolute] {
            // UVC zoom_absolute is in device units; 1× is the minimum, each unit one hundredth.
            set(V4L2ControlID.zoomAbsolute, zoom.minimum + Int64(((settings.zoomFactor - 1) * 100).rounded()))
        }
        if byID[V4L2ControlID.flashLEDMode] != nil {
            set(V4L2ControlID.flashLEDMode, settings.torchMode == .on ? 2 : 0)
            if let level = scaled(V4L2ControlID.torchIntensity, Double(settings.torchLevel)) { set(V4L2ControlID.torchIntensity, level) }
        }
        try writeControls(values)
    }

    // MARK: Streaming

    /// Under `lock`: frees the buffers of a stream whose frames were still held when it ended (a driver
    /// that does not orphan buffers keeps them, and libv4l2 refuses S_FMT, until then), waiting up to a
    /// second for the holders to let go.
    private func freePreviousBuffers() throws(DeviceError) {
        guard let previous = previousBuffers.withLockedValue({ $0 }) else { return }
        previous.waitForLoans(timeout: 1)
        let held = previous.lentCount
        guard held == 0 else {
            throw DeviceError(
                .busy, device: identity.uniqueID,
                "\(held) frame(s) of its previous stream are still held, and the driver cannot free its buffers until they are let go; try again",
                errno: EBUSY)
        }
        previous.freeRequested()
        previousBuffers.withLockedValue { $0 = nil }
    }

    public func startStreaming(bufferCount: Int, sink: @escaping @Sendable (FrameEvent) -> Void) throws(DeviceError) {
        let run = try stream.start()
        let state: StreamState
        let buffers: MappedBuffers
        do throws(DeviceError) {
            state = StreamState(timing: try locked { () throws(DeviceError) -> ExposureTiming in try exposureTiming() })
            buffers = try startDriver(state, bufferCount: bufferCount)
        } catch {
            stream.startFailed(run)
            throw error
        }
        let active = formatList.first {
            $0.pixelFormat.rawValue == buffers.pixelFormat && $0.dimensions == Dimensions(width: buffers.width, height: buffers.height)
        }
        let thread = Thread { [self] in
            self.run(run, state: state, buffers: buffers, format: active, sink: sink)
        }
        thread.name = "camrig-v4l2-\((path as NSString).lastPathComponent)"
        thread.start()
    }

    /// Maps the buffers, queues them and turns the stream on.
    private func startDriver(_ state: StreamState, bufferCount: Int) throws(DeviceError) -> MappedBuffers {
        try locked { () throws(DeviceError) -> MappedBuffers in
            var format = v4l2_format()
            format.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
            try handle.ioctl(CAMRIG_VIDIOC_G_FMT, &format, "VIDIOC_G_FMT")
            try freePreviousBuffers()
            let buffers = try MappedBuffers(
                handle: handle, count: bufferCount, format: format.fmt.pix, lendFrames: lendFrames, statistics: bufferStatistics)
            do throws(DeviceError) {
                try buffers.queueAllHeld()
                var type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
                try handle.ioctl(CAMRIG_VIDIOC_STREAMON, &type, "VIDIOC_STREAMON")
                buffers.streamStart = clock.now()
            } catch {
                buffers.release()
                throw error
            }
            current.withLockedValue { $0 = state }
            return buffers
        }
    }

    /// Whether a stream runs: false once its thread has stopped the driver and given back its buffers
    /// (those still lent stay mapped for their holders).
    public var isStreaming: Bool { stream.isStreaming }

    public func stopStreaming() {
        guard stream.stop() else { return }
        // Wakes a DQBUF blocked in the streaming thread.
        var type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
        try? handle.ioctl(CAMRIG_VIDIOC_STREAMOFF, &type, "VIDIOC_STREAMOFF")
    }

    private func run(_ run: UInt64, state: StreamState, buffers: MappedBuffers, format: DeviceFormat?, sink: @Sendable (FrameEvent) -> Void) {
        var ending: DeviceError?
        let fallbackFormat = format ?? formatList[0]
        // Sequence numbers continue across restarts (the driver counts from 0 after each STREAMON).
        var sequenceBase: UInt64 = 0
        var nextSequence: UInt64 = 0
        while stream.isRunning(run) {
            let frame: MappedBuffers.Dequeued
            do throws(DeviceError) {
                frame = try buffers.dequeue()
            } catch {
                guard stream.isRunning(run) else { break }
                if let instant = state.restartAt.withLockedValue({ $0.take() }) {
                    do throws(DeviceError) {
                        try restart(buffers, atMonotonic: instant)
                        sequenceBase = nextSequence
                        continue
                    } catch let failure {
                        ending = failure
                        break
                    }
                }
                ending = error
                break
            }
            let sequence = sequenceBase + UInt64(frame.sequence)
            nextSequence = sequence + 1
            // Driver and dequeue stamps alike are CLOCK_MONOTONIC; the agent reports its host clock's reading.
            let stamp = clock.reading(atMonotonic: frame.timestamp)
            let (exposureStart, uncertainty) = state.timing.withLockedValue { $0 }.exposureStart(stamp: stamp, marks: frame.marks)
            var captured = CapturedFrame(
                deviceID: identity.uniqueID,
                sequence: sequence,
                timestamp: stamp,
                timestampMarks: frame.marks,
                format: fallbackFormat,
                bytes: frame.bytes,
                metadata: CaptureMetadata(settings: CameraSettings()),
                exposureStart: exposureStart,
                exposureStartUncertainty: uncertainty
            )
            captured.streamStart = buffers.streamStart
            sink(.frame(captured))
            do throws(DeviceError) {
                if !frame.lent { try buffers.queue(frame.index) }
                try buffers.queueReturned()
            } catch {
                // A restart's STREAMOFF may come between the dequeue and the queue.
                if state.restartAt.withLockedValue({ $0 }) != nil { continue }
                if stream.isRunning(run) { ending = error }
                break
            }
        }
        lock.withLock {
            var type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
            try? handle.ioctl(CAMRIG_VIDIOC_STREAMOFF, &type, "VIDIOC_STREAMOFF")
        }
        buffers.driverStopped()
        // Frames on their way to clients hold lent buffers for a moment; the driver frees its buffers
        // only once none is mapped.
        buffers.waitForLoans(timeout: 1)
        lock.withLock {
            buffers.release()
            if buffers.lentCount > 0 { previousBuffers.withLockedValue { $0 = buffers } }
            current.withLockedValue { $0 = nil }
        }
        stream.ended(run)
        sink(.ended(ending))
    }

    /// On the streaming thread: every buffer back in the queue, then STREAMON as close to `instant` as
    /// the host allows (a sleep, then a short spin).
    private func restart(_ buffers: MappedBuffers, atMonotonic instant: Int64) throws(DeviceError) {
        try locked { () throws(DeviceError) in
            var type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
            try handle.ioctl(CAMRIG_VIDIOC_STREAMOFF, &type, "VIDIOC_STREAMOFF")
            buffers.driverStopped()
            try buffers.queueAllHeld()
        }
        let spin: Int64 = 300_000
        if instant - spin > HostClock.monotonicNow() { HostClock.sleep(untilMonotonic: instant - spin) }
        while HostClock.monotonicNow() < instant {}
        try locked { () throws(DeviceError) in
            var type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
            try handle.ioctl(CAMRIG_VIDIOC_STREAMON, &type, "VIDIOC_STREAMON")
            buffers.streamStart = clock.now()
        }
    }

    // MARK: FreeRunningBackend

    public func frameDurationControl() throws(DeviceError) -> FrameDurationControl? {
        guard let vblank = controlList.first(where: { $0.id == V4L2ControlID.verticalBlanking }),
            controlList.contains(where: { $0.id == V4L2ControlID.pixelRate })
        else { return nil }
        return try locked { () throws(DeviceError) -> FrameDurationControl? in
            guard let geometry = try lineGeometry() else { return nil }
            return FrameDurationControl(
                lineDuration: geometry.lineDuration,
                lines: Int64(geometry.height) + geometry.vblank,
                minimumLines: Int64(geometry.height) + vblank.minimum,
                maximumLines: Int64(geometry.height) + vblank.maximum
            )
        }
    }

    public func setFrameLines(_ lines: Int64) throws(DeviceError) {
        try locked { () throws(DeviceError) in
            var format = v4l2_format()
            format.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
            try handle.ioctl(CAMRIG_VIDIOC_G_FMT, &format, "VIDIOC_G_FMT")
            try handle.writeControls([(V4L2ControlID.verticalBlanking, lines - Int64(format.fmt.pix.height))], types: [:])
        }
    }

    public func restartStream(atMonotonic monotonic: Int64) throws(DeviceError) {
        guard let state = current.withLockedValue({ $0 }) else {
            throw DeviceError(.invalidArgument, device: identity.uniqueID, "is not streaming, so there is no stream to restart")
        }
        state.restartAt.withLockedValue { $0 = monotonic }
        // Wakes the streaming thread's DQBUF; it restarts the stream at the instant.
        var type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
        try locked { () throws(DeviceError) in try handle.ioctl(CAMRIG_VIDIOC_STREAMOFF, &type, "VIDIOC_STREAMOFF") }
    }

    /// Height, vertical blanking and line duration of the active format, when the sensor reports its
    /// pixel rate. Call with `lock` held.
    private func lineGeometry() throws(DeviceError) -> (height: UInt32, vblank: Int64, lineDuration: Double)? {
        guard controlList.contains(where: { $0.id == V4L2ControlID.pixelRate }) else { return nil }
        var format = v4l2_format()
        format.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
        try handle.ioctl(CAMRIG_VIDIOC_G_FMT, &format, "VIDIOC_G_FMT")
        let hasBlanking = controlList.contains { $0.id == V4L2ControlID.horizontalBlanking }
        let hasVBlank = controlList.contains { $0.id == V4L2ControlID.verticalBlanking }
        let ids = [V4L2ControlID.pixelRate] + (hasBlanking ? [V4L2ControlID.horizontalBlanking] : []) + (hasVBlank ? [V4L2ControlID.verticalBlanking] : [])
        let values = try handle.readControls(ids)
        guard let pixelRate = values[V4L2ControlID.pixelRate], pixelRate > 0 else { return nil }
        let lineLength = Double(format.fmt.pix.width) + Double(values[V4L2ControlID.horizontalBlanking] ?? 0)
        return (format.fmt.pix.height, values[V4L2ControlID.verticalBlanking] ?? 0, lineLength * 1e9 / Double(pixelRate))
    }

    /// Exposure and readout times of the active configuration. Call with `lock` held.
    private func exposureTiming() throws(DeviceError) -> ExposureTiming {
        var parameters = v4l2_streamparm()
        parameters.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
        let interval = (try? handle.ioctl(CAMRIG_VIDIOC_G_PARM, &parameters, "VIDIOC_G_PARM")) != nil
            ? parameters.parm.capture.timeperframe : v4l2_fract(numerator: 1, denominator: 30)
        let frameDuration = Int64(interval.numerator) * 1_000_000_000 / Int64(max(interval.denominator, 1))
        var exposure: Int64?
        let ids = controlList.map(\.id)
        if ids.contains(V4L2ControlID.exposureAuto), ids.contains(V4L2ControlID.exposureAbsolute) {
            let values = try handle.readControls([V4L2ControlID.exposureAuto, V4L2ControlID.exposureAbsolute])
            if values[V4L2ControlID.exposureAuto] == V4L2ControlID.ExposureAutoValue.manual, let units = values[V4L2ControlID.exposureAbsolute] {
                exposure = units * 100_000  // V4L2_CID_EXPOSURE_ABSOLUTE counts 100 µs
            }
        }
        let readout = try lineGeometry().map { Int64((Double($0.height) * $0.lineDuration).rounded()) }
        return ExposureTiming(exposure: exposure, readout: readout, frameDuration: frameDuration)
    }
}

/// How a stream's frames left the driver's buffers.
public struct FrameBufferStatistics: Sendable, Hashable {
    /// Frames handed on in the driver's own buffer (no copy).
    public var lent: UInt64 = 0
    /// Frames copied out because too few buffers were left with the driver (or lending is off).
    public var copied: UInt64 = 0
    /// Lent frames not yet let go by all their holders.
    public var held = 0
}

/// The mmap buffers of one stream, and which of them the driver, the streaming thread or a frame's
/// holders have.
///
/// A dequeued buffer is lent (its frame's bytes are the mapping itself) as long as at least
/// `keptQueued` other buffers stay queued with the driver; otherwise its bytes are copied out and it
/// goes back at once, so a consumer that keeps frames can slow the stream down to copies but never
/// starve the driver. Lent buffers come back when their last `ByteBuffer` goes, from any thread; the
/// streaming thread queues them again after its next dequeue, so every V4L2 call stays on that thread
/// (libv4l2 holds its stream lock through a blocking DQBUF).
final class MappedBuffers: @unchecked Sendable {
    struct Dequeued {
        var index: Int
        var sequence: UInt32
        var timestamp: Int64
        var marks: TimestampMarks
        var bytes: ByteBuffer
        var lent: Bool
    }

    /// Who has a buffer.
    enum Holder { case driver, thread, lent, returned }

    /// Buffers that stay with the driver while others are lent.
    static let keptQueued = 2

    let handle: V4L2Handle
    /// When the current run of frames began streaming (host clock).
    var streamStart: Int64 = 0
    let pixelFormat: UInt32
    let width: UInt32
    let height: UInt32
    let lendFrames: Bool
    /// The driver frees buffers that are still mapped (V4L2_BUF_CAP_SUPPORTS_ORPHANED_BUFS).
    private(set) var orphansBuffers = false
    private var mappings: [(address: UnsafeMutableRawPointer, length: Int)] = []
    var count: Int { mappings.count }

    private struct Holders {
        var holders: [Holder] = []
        /// Set once the stream is over: buffers that come back then are unmapped, not queued.
        var released = false
    }
    private let state = NIOLockedValueBox(Holders())
    /// The buffers lent out, and the wait for them to come back.
    private let loans = LoanBook()
    /// Shared with the camera, which reports it.
    private let statistics: NIOLockedValueBox<FrameBufferStatistics>

    init(
        handle: V4L2Handle, count: Int, format: v4l2_pix_format, lendFrames: Bool,
        statistics: NIOLockedValueBox<FrameBufferStatistics>
    ) throws(DeviceError) {
        self.handle = handle
        self.lendFrames = lendFrames
        self.statistics = statistics
        pixelFormat = format.pixelformat
        width = format.width
        height = format.height
        var request = v4l2_requestbuffers()
        request.count = UInt32(count)
        request.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
        request.memory = V4L2_MEMORY_MMAP.rawValue
        try handle.ioctl(CAMRIG_VIDIOC_REQBUFS, &request, "VIDIOC_REQBUFS")
        orphansBuffers = request.capabilities & UInt32(V4L2_BUF_CAP_SUPPORTS_ORPHANED_BUFS) != 0
        guard request.count >= 2 else {
            freeRequested()
            throw DeviceError(.system, device: handle.deviceID, "driver granted only \(request.count) buffers; streaming needs 2")
        }
        for index in 0..<request.count {
            var buffer = v4l2_buffer()
            buffer.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
            buffer.memory = V4L2_MEMORY_MMAP.rawValue
            buffer.index = index
            do throws(DeviceError) {
                try handle.ioctl(CAMRIG_VIDIOC_QUERYBUF, &buffer, "VIDIOC_QUERYBUF")
            } catch {
                unmapAll()
                throw error
            }
            guard let address = camrig_v4l2_mmap(Int(buffer.length), handle.fd, Int64(buffer.m.offset)), camrig_map_failed(address) == 0 else {
                let error = V4L2Handle.error(errno, device: handle.deviceID, doing: "mmap buffer \(index)")
                unmapAll()
                throw error
            }
            mappings.append((address, Int(buffer.length)))
        }
        state.withLockedValue { $0.holders = Array(repeating: .thread, count: mappings.count) }
    }

    func queue(_ index: Int) throws(DeviceError) {
        var buffer = v4l2_buffer()
        buffer.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
        buffer.memory = V4L2_MEMORY_MMAP.rawValue
        buffer.index = UInt32(index)
        try handle.ioctl(CAMRIG_VIDIOC_QBUF, &buffer, "VIDIOC_QBUF")
        state.withLockedValue { $0.holders[index] = .driver }
    }

    /// Queues every buffer this thread has, or that came back from a frame's holders.
    func queueAllHeld() throws(DeviceError) {
        let held = state.withLockedValue { state in
            state.holders.indices.filter { state.holders[$0] == .thread || state.holders[$0] == .returned }
        }
        for index in held { try queue(index) }
    }

    /// Queues the buffers that came back since the last call.
    func queueReturned() throws(DeviceError) {
        let returned = state.withLockedValue { state in
            state.holders.indices.filter { state.holders[$0] == .returned }
        }
        for index in returned { try queue(index) }
    }

    /// After STREAMOFF the driver has given back every queued buffer.
    func driverStopped() {
        state.withLockedValue { state in
            for index in state.holders.indices where state.holders[index] == .driver { state.holders[index] = .thread }
        }
    }

    /// Blocks until the driver fills a buffer; lends it (see the type's note) or copies its bytes out.
    func dequeue() throws(DeviceError) -> Dequeued {
        var buffer = v4l2_buffer()
        buffer.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
        buffer.memory = V4L2_MEMORY_MMAP.rawValue
        try handle.ioctl(CAMRIG_VIDIOC_DQBUF, &buffer, "VIDIOC_DQBUF")
        let dequeuedAt = HostClock.monotonicNow()
        let index = Int(buffer.index)
        let mapping = mappings[index]
        let used = min(Int(buffer.bytesused), mapping.length)
        let lend = state.withLockedValue { state in
            let stillQueued = state.holders.indices.count { $0 != index && state.holders[$0] == .driver }
            let lend = lendFrames && stillQueued >= Self.keptQueued
            state.holders[index] = lend ? .lent : .thread
            return lend
        }
        statistics.withLockedValue { statistics in
            if lend {
                statistics.lent += 1
                statistics.held += 1
            } else {
                statistics.copied += 1
            }
        }
        let bytes: ByteBuffer
        if lend {
            bytes = loans.lend(UnsafeMutableRawBufferPointer(start: mapping.address, count: mapping.length), used: used) {
                self.cameBack(index)
            }
        } else {
            var copy = ByteBufferAllocator().buffer(capacity: used)
            copy.writeBytes(UnsafeRawBufferPointer(start: mapping.address, count: used))
            bytes = copy
        }

        let timestampType = buffer.flags & UInt32(V4L2_BUF_FLAG_TIMESTAMP_MASK)
        let source = buffer.flags & UInt32(V4L2_BUF_FLAG_TSTAMP_SRC_MASK)
        let stamp: Int64
        let marks: TimestampMarks
        if timestampType == UInt32(V4L2_BUF_FLAG_TIMESTAMP_MONOTONIC) {
            stamp = Int64(buffer.timestamp.tv_sec) * 1_000_000_000 + Int64(buffer.timestamp.tv_usec) * 1_000
            marks = source == UInt32(V4L2_BUF_FLAG_TSTAMP_SRC_SOE) ? .startOfExposure : .endOfFrame
        } else {
            // No monotonic driver stamp: say so, and use when we dequeued it.
            stamp = dequeuedAt
            marks = .dequeue
        }
        return Dequeued(index: index, sequence: buffer.sequence, timestamp: stamp, marks: marks, bytes: bytes, lent: lend)
    }

    /// A lent buffer's last holder let go (any thread).
    private func cameBack(_ index: Int) {
        let unmapNow = state.withLockedValue { state -> Bool in
            state.holders[index] = state.released ? .thread : .returned
            return state.released
        }
        statistics.withLockedValue { $0.held -= 1 }
        guard unmapNow else { return }
        // The stream ended while this frame was held: its mapping outlived the stream until now.
        _ = camrig_v4l2_munmap(mappings[index].address, mappings[index].length)
    }

    /// Buffers still lent out.
    var lentCount: Int { state.withLockedValue { $0.holders.count { $0 == .lent } } }

    /// Waits up to `timeout` seconds for lent buffers to come back (after STREAMOFF, before `release`).
    func waitForLoans(timeout: Double) {
        _ = loans.waitForReturns(timeout: timeout)
    }

    /// Unmaps the buffers and frees them in the driver. Buffers still lent stay mapped until they come
    /// back, so their holders' bytes stay valid. A driver that orphans buffers (frees them while still
    /// mapped, keeping the memory until unmapped) frees them now; any other frees them at the next
    /// REQBUFS (the next stream) or when the device is closed, once none is mapped.
    func release() {
        let lent = state.withLockedValue { state -> Set<Int> in
            state.released = true
            return Set(state.holders.indices.filter { state.holders[$0] == .lent })
        }
        for (index, mapping) in mappings.enumerated() where !lent.contains(index) {
            _ = camrig_v4l2_munmap(mapping.address, mapping.length)
        }
        if lent.isEmpty || orphansBuffers { freeRequested() }
    }

    private func unmapAll() {
        for mapping in mappings { _ = camrig_v4l2_munmap(mapping.address, mapping.length) }
        mappings.removeAll()
        freeRequested()
    }

    func freeRequested() {
        var request = v4l2_requestbuffers()
        request.count = 0
        request.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
        request.memory = V4L2_MEMORY_MMAP.rawValue
        try? handle.ioctl(CAMRIG_VIDIOC_REQBUFS, &request, "VIDIOC_REQBUFS 0")
    }
}

/// V4L2 capture devices matching glob patterns (by default `/dev/video*`).
/// Finds V4L2 capture nodes (by glob patterns, `/dev/video*` by default) and serves each as a
/// `V4L2Camera`; nodes that cannot be used are listed in `skipped` with why.
public final class V4L2DeviceProvider: DeviceProvider {
    /// Glob patterns of the nodes to consider.
    public let patterns: [String]
    /// The host clock the cameras' timestamps are reported on (driver stamps are `CLOCK_MONOTONIC`).
    public let clock: HostClock
    /// Whether the cameras hand frames on in the driver's buffers (`V4L2Camera.lendFrames`).
    public let lendFrames: Bool
    private let cache = NIOLockedValueBox<[String: V4L2Camera]>([:])
    private let failures = NIOLockedValueBox<[String: String]>([:])

    /// - Parameters:
    ///   - patterns: glob patterns of the nodes to serve.
    ///   - clock: the agent's host clock; a simulated host's clock shifts V4L2 stamps as it does everything else.
    ///   - lendFrames: hand frames on in the driver's buffers; false copies each frame out.
    ///   - claimedElsewhere: the device numbers (dev_t) another backend drives (libcamera's cameras'
    ///     nodes): those nodes are skipped, saying so.
    public init(
        patterns: [String] = ["/dev/video*"], clock: HostClock = .system, lendFrames: Bool = true,
        claimedElsewhere: (@Sendable () -> Set<UInt64>)? = nil
    ) {
        self.patterns = patterns
        self.clock = clock
        self.lendFrames = lendFrames
        self.claimedElsewhere = claimedElsewhere
    }

    private let claimedElsewhere: (@Sendable () -> Set<UInt64>)?

    /// Why nodes that match could not be used, by path (e.g. metadata nodes, permission problems).
    public var skipped: [String: String] { failures.withLockedValue { $0 } }

    public func scan() -> [any CameraBackend] {
        let paths = patterns.flatMap(Self.glob).filter(Self.isVideoNode).sorted { Self.nodeOrder($0) < Self.nodeOrder($1) }
        var found: [V4L2Camera] = []
        var skipped: [String: String] = [:]
        let known = cache.withLockedValue { $0 }
        let claimed = claimedElsewhere?() ?? []
        for path in paths {
            var status = stat()
            if !claimed.isEmpty, stat(path, &status) == 0, claimed.contains(UInt64(status.st_rdev)) {
                skipped[path] = "driven through libcamera (its pipeline uses this node)"
                continue
            }
            if let camera = known[path], FileManager.default.fileExists(atPath: path), Self.stillPresent(camera) {
                found.append(camera)
                continue
            }
            do throws(DeviceError) {
                found.append(try V4L2Camera(path: path, clock: clock, lendFrames: lendFrames))
            } catch {
                skipped[path] = error.message
            }
        }
        cache.withLockedValue { cache in
            cache = Dictionary(found.map { ($0.path, $0) }, uniquingKeysWith: { first, _ in first })
        }
        failures.withLockedValue { $0 = skipped }
        return found
    }

    /// A device that answers QUERYCAP is still there (an unplugged one says ENODEV).
    static func stillPresent(_ camera: V4L2Camera) -> Bool {
        (try? camera.readControls([])) != nil && (try? V4L2Handle(path: camera.path).capabilities()) != nil
    }

    /// V4L2 nodes are named `videoN`; anything else a glob matches is not one.
    static func isVideoNode(_ path: String) -> Bool {
        let name = (path as NSString).lastPathComponent
        return name.hasPrefix("video") && name.count > 5 && name.dropFirst(5).allSatisfy(\.isNumber)
    }

    static func nodeOrder(_ path: String) -> (String, Int) {
        let digits = path.reversed().prefix { $0.isNumber }
        return (String(path.dropLast(digits.count)), Int(String(digits.reversed())) ?? 0)
    }

    static func glob(_ pattern: String) -> [String] {
        var result = glob_t()
        defer { globfree(&result) }
        guard Glibc.glob(pattern, 0, nil, &result) == 0 else { return [] }
        return (0..<Int(result.gl_pathc)).compactMap { result.gl_pathv[$0].map { String(cString: $0) } }
    }
}
