import NIOConcurrencyHelpers

/// The right to change a device, held by one client (`lockForConfiguration`). The agent leases it to
/// network clients; here it is just who holds it and a token that proves it.
public struct ConfigurationLock: Hashable, Sendable {
    public let deviceID: String
    public let holder: String
    public let token: UInt64
}

/// A change to a device's configuration. `nil` fields stay as they are.
public struct DeviceConfigurationChange: Hashable, Sendable {
    public var formatID: String?
    public var minFrameDuration: FrameDuration?
    public var maxFrameDuration: FrameDuration?
    public var settings = CameraSettingsChange()
    public var rawControls: [UInt32: Int64] = [:]

    public init(formatID: String? = nil, minFrameDuration: FrameDuration? = nil, maxFrameDuration: FrameDuration? = nil) {
        self.formatID = formatID
        self.minFrameDuration = minFrameDuration
        self.maxFrameDuration = maxFrameDuration
    }
}

/// A camera (AVFoundation's `AVCaptureDevice`): its formats, its active format and frame durations, its
/// controls, and a configuration lock that every change requires.
///
/// All state lives here, checked at the top of every call; the backend only does what it is told.
public final class CaptureDevice: Sendable, CustomStringConvertible {
    public let identity: DeviceIdentity
    public let formats: [DeviceFormat]
    public let typedControlSupport: TypedControlSupport
    let backend: any CameraBackend

    struct State {
        var activeFormat: DeviceFormat
        var activeMinFrameDuration: FrameDuration
        var activeMaxFrameDuration: FrameDuration
        var settings = CameraSettings()
        var controls: [ControlDescriptor]
        var lock: ConfigurationLock?
        var connected = true
        var streaming = false
        var nextToken: UInt64 = 1
    }

    private let state: NIOLockedValueBox<State>
    private let zoomRamp = NIOLockedValueBox<Task<Void, Never>?>(nil)

    public var uniqueID: String { identity.uniqueID }

    /// Puts the next stream's exposures on the grid `anchor + k × frame duration` (`CLOCK_MONOTONIC`);
    /// returns `false` when the camera cannot (it free-runs).
    @discardableResult
    public func alignNextStream(toMonotonic anchor: Int64) -> Bool {
        guard let alignable = backend as? any FrameAlignableBackend else { return false }
        alignable.alignNextStream(toMonotonic: anchor)
        return true
    }

    /// Reads the backend's formats and controls and starts in its first format at its default rate.
    public init(backend: any CameraBackend) throws(DeviceError) {
        let identity = backend.identity
        let formats = try backend.formats()
        guard let first = formats.first, let duration = first.defaultFrameDuration else {
            throw DeviceError(.unsupported, device: identity.uniqueID, "reports no usable format")
        }
        self.identity = identity
        self.formats = formats
        self.typedControlSupport = backend.typedControlSupport
        self.backend = backend
        self.state = NIOLockedValueBox(
            State(
                activeFormat: first,
                activeMinFrameDuration: duration,
                activeMaxFrameDuration: duration,
                controls: try backend.controlDescriptors()
            )
        )
    }

    public var description: String { "\(identity.localizedName) [\(identity.uniqueID)]" }

    // MARK: State

    public var activeFormat: DeviceFormat { state.withLockedValue { $0.activeFormat } }
    public var activeMinFrameDuration: FrameDuration { state.withLockedValue { $0.activeMinFrameDuration } }
    public var activeMaxFrameDuration: FrameDuration { state.withLockedValue { $0.activeMaxFrameDuration } }
    public var settings: CameraSettings { state.withLockedValue { $0.settings } }
    public var isConnected: Bool { state.withLockedValue { $0.connected } }
    public var isStreaming: Bool { state.withLockedValue { $0.streaming } }
    public var currentLock: ConfigurationLock? { state.withLockedValue { $0.lock } }

    /// Raw controls as the driver describes them.
    public var controls: [ControlDescriptor] { state.withLockedValue { $0.controls } }

    /// Current values of raw controls (read from the device).
    public func controlValues() throws(DeviceError) -> [UInt32: Int64] {
        let ids = controls.filter { $0.type != .controlClass && $0.type != .button && $0.flags & ControlDescriptor.flagWriteOnly == 0 }.map(\.id)
        return try backend.readControls(ids)
    }

    public func isFocusModeSupported(_ mode: FocusMode) -> Bool { typedControlSupport.focusModes.contains(mode) }
    public func isExposureModeSupported(_ mode: ExposureMode) -> Bool { typedControlSupport.exposureModes.contains(mode) }
    public func isWhiteBalanceModeSupported(_ mode: WhiteBalanceMode) -> Bool { typedControlSupport.whiteBalanceModes.contains(mode) }
    public var isLensPositionSupported: Bool { typedControlSupport.lensPosition }
    public var isZoomSupported: Bool { typedControlSupport.zoom }
    public var hasTorch: Bool { typedControlSupport.torch }

    /// The device went away (unplugged); further calls fail with `.disconnected`.
    public func markDisconnected() {
        state.withLockedValue { $0.connected = false }
    }

    // MARK: Lock

    /// Takes the configuration lock for `holder`. Fails with `.lockHeld`, naming the holder, if taken.
    public func lockForConfiguration(holder: String) throws(DeviceError) -> ConfigurationLock {
        let result: Result<ConfigurationLock, DeviceError> = state.withLockedValue { state in
            guard state.connected else { return .failure(disconnectedError) }
            if let lock = state.lock {
                return .failure(DeviceError(.lockHeld, device: uniqueID, "is locked for configuration by '\(lock.holder)'"))
            }
            let lock = ConfigurationLock(deviceID: uniqueID, holder: holder, token: state.nextToken)
            state.nextToken &+= 1
            state.lock = lock
            return .success(lock)
        }
        return try result.get()
    }

    /// Releases the lock; a lock that is not the current one is ignored.
    public func unlockForConfiguration(_ lock: ConfigurationLock) {
        state.withLockedValue { state in
            if state.lock == lock { state.lock = nil }
        }
    }

    // MARK: Configuration

    /// What a change resolves to, once validated.
    public struct ResolvedConfiguration: Hashable, Sendable {
        public var format: DeviceFormat
        public var minFrameDuration: FrameDuration
        public var maxFrameDuration: FrameDuration
        public var settings: CameraSettings
        public var rawControls: [UInt32: Int64]
    }

    /// Checks a change against the device without applying it (the prepare phase of a rig commit).
    public func validate(_ change: DeviceConfigurationChange) throws(DeviceError) -> ResolvedConfiguration {
        let current = state.withLockedValue { $0 }
        guard current.connected else { throw disconnectedError }
        var format = current.activeFormat
        var minDuration = current.activeMinFrameDuration
        var maxDuration = current.activeMaxFrameDuration
        if let id = change.formatID, id != format.id {
            guard let found = formats.first(where: { $0.id == id }) else {
                throw DeviceError(.unsupported, device: uniqueID, "has no format \(id); it has \(formats.map(\.id).joined(separator: ", "))")
            }
            if current.streaming {
                throw DeviceError(.busy, device: uniqueID, "is streaming: stop the stream before changing the format")
            }
            format = found
            // A new format starts at its default rate unless the change names one.
            minDuration = found.defaultFrameDuration!
            maxDuration = minDuration
        }
        if let value = change.minFrameDuration { minDuration = value }
        if let value = change.maxFrameDuration { maxDuration = value }
        if change.minFrameDuration != nil && change.maxFrameDuration == nil && maxDuration < minDuration { maxDuration = minDuration }
        if change.maxFrameDuration != nil && change.minFrameDuration == nil && minDuration > maxDuration { minDuration = maxDuration }
        for duration in [minDuration, maxDuration] where !format.supports(duration) {
            throw DeviceError(
                .outOfRange,
                device: uniqueID,
                "format \(format.id) does not support a frame duration of \(duration); it allows \(format.frameRateRanges.map(\.description).joined(separator: "; "))",
                allowedRanges: format.frameRateRanges
            )
        }
        guard minDuration <= maxDuration else {
            throw DeviceError(.invalidArgument, device: uniqueID, "minimum frame duration \(minDuration) is longer than the maximum \(maxDuration)")
        }
        let settings = try resolve(change.settings, from: current.settings, format: format)
        for (id, value) in change.rawControls {
            guard let control = current.controls.first(where: { $0.id == id }) else {
                throw DeviceError(.unsupported, device: uniqueID, "has no control 0x\(String(id, radix: 16))")
            }
            if let reason = control.rejection(of: value) {
                throw DeviceError(.outOfRange, device: uniqueID, reason)
            }
        }
        return ResolvedConfiguration(
            format: format,
            minFrameDuration: minDuration,
            maxFrameDuration: maxDuration,
            settings: settings,
            rawControls: change.rawControls
        )
    }

    /// Validates and applies a change under `lock`. The device streams at the minimum frame duration.
    @discardableResult
    public func configure(_ change: DeviceConfigurationChange, lock: ConfigurationLock) throws(DeviceError) -> ResolvedConfiguration {
        try checkLock(lock)
        let resolved = try validate(change)
        let before = state.withLockedValue { $0 }
        if resolved.format != before.activeFormat || resolved.minFrameDuration != before.activeMinFrameDuration {
            let actual = try backend.activate(format: resolved.format, frameDuration: resolved.minFrameDuration)
            if actual != resolved.minFrameDuration {
                throw DeviceError(.outOfRange, device: uniqueID, "asked for \(resolved.minFrameDuration), the driver set \(actual)")
            }
        }
        // A zoom ramp starts from the current factor and moves there step by step (below).
        var applied = resolved.settings
        let rampRate = change.settings.zoomRampRate ?? 0
        let ramping = rampRate > 0 && change.settings.zoomFactor != nil && resolved.settings.zoomFactor != before.settings.zoomFactor
        if change.settings.zoomFactor != nil { cancelZoomRamp() }
        if ramping { applied.zoomFactor = before.settings.zoomFactor }
        if applied != before.settings {
            try backend.apply(settings: applied)
        }
        if !resolved.rawControls.isEmpty {
            try backend.writeControls(resolved.rawControls.sorted { $0.key < $1.key }.map { (id: $0.key, value: $0.value) })
        }
        state.withLockedValue { state in
            state.activeFormat = resolved.format
            state.activeMinFrameDuration = resolved.minFrameDuration
            state.activeMaxFrameDuration = resolved.maxFrameDuration
            state.settings = applied
        }
        if ramping {
            startZoomRamp(to: resolved.settings.zoomFactor, rate: rampRate)
        }
        return resolved
    }

    /// Whether a zoom ramp is under way.
    public var isRampingZoom: Bool { zoomRamp.withLockedValue { $0 != nil } }

    /// Moves the zoom factor geometrically towards `target` at `rate` doublings per second, about 30 steps
    /// a second, through the backend (`rampToVideoZoomFactor(_:withRate:)`).
    private func startZoomRamp(to target: Double, rate: Double) {
        let task = Task { [weak self] in
            let step = 1.0 / 30
            while !Task.isCancelled, let self {
                try? await Task.sleep(for: .milliseconds(33))
                guard !Task.isCancelled else { return }
                var settings = self.settings
                let factor = pow2(rate * step)
                let next = target > settings.zoomFactor ? min(settings.zoomFactor * factor, target) : max(settings.zoomFactor / factor, target)
                settings.zoomFactor = next
                do {
                    try self.backend.apply(settings: settings)
                } catch {
                    break
                }
                self.state.withLockedValue { $0.settings.zoomFactor = next }
                if next == target { break }
            }
            self?.zoomRamp.withLockedValue { $0 = nil }
        }
        zoomRamp.withLockedValue { $0 = task }
    }

    private func cancelZoomRamp() {
        zoomRamp.withLockedValue { task in
            task?.cancel()
            task = nil
        }
    }

    /// The format and range with the highest frame rate (ties: the larger image), as in AVFoundation's
    /// "configure for highest frame rate" example.
    public func highestFrameRateFormat() -> (format: DeviceFormat, range: FrameRateRange)? {
        var best: (format: DeviceFormat, range: FrameRateRange)?
        for format in formats {
            for range in format.frameRateRanges {
                guard let current = best else {
                    best = (format, range)
                    continue
                }
                if range.minFrameDuration < current.range.minFrameDuration
                    || (range.minFrameDuration == current.range.minFrameDuration && format.dimensions > current.format.dimensions)
                {
                    best = (format, range)
                }
            }
        }
        return best
    }

    /// Activates `highestFrameRateFormat()` with min = max frame duration at its fastest.
    @discardableResult
    public func configureForHighestFrameRate(lock: ConfigurationLock) throws(DeviceError) -> ResolvedConfiguration {
        guard let (format, range) = highestFrameRateFormat() else {
            throw DeviceError(.unsupported, device: uniqueID, "has no frame-rate ranges")
        }
        var change = DeviceConfigurationChange(formatID: format.id)
        change.minFrameDuration = range.minFrameDuration
        change.maxFrameDuration = range.minFrameDuration
        return try configure(change, lock: lock)
    }

    // MARK: Streaming

    /// Starts streaming the active format; frames arrive on the returned stream until the consumer stops
    /// iterating (or cancels), the device fails, or it vanishes (the stream then throws the error).
    ///
    /// At most `bufferLimit` frames wait for a slow consumer; older ones are dropped, and `dropped` counts them.
    public func frames(bufferLimit: Int = 4) throws(DeviceError) -> FrameStream {
        let alreadyStreaming: Bool = state.withLockedValue { state in
            defer { state.streaming = true }
            return state.streaming || !state.connected
        }
        if alreadyStreaming {
            if !isConnected { throw disconnectedError }
            throw DeviceError(.busy, device: uniqueID, "is already streaming")
        }
        let current = state.withLockedValue { $0 }
        do {
            _ = try backend.activate(format: current.activeFormat, frameDuration: current.activeMinFrameDuration)
            try backend.apply(settings: current.settings)
        } catch {
            state.withLockedValue { $0.streaming = false }
            throw error
        }
        let counter = NIOLockedValueBox<UInt64>(0)
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: CapturedFrame.self, bufferingPolicy: .bufferingNewest(max(bufferLimit, 1)))
        let backend = self.backend
        continuation.onTermination = { [weak self] _ in
            backend.stopStreaming()
            self?.state.withLockedValue { $0.streaming = false }
        }
        do {
            try backend.startStreaming(bufferCount: 4) { event in
                switch event {
                case .frame(let frame):
                    if case .dropped = continuation.yield(frame) {
                        counter.withLockedValue { $0 += 1 }
                    }
                case .ended(nil):
                    continuation.finish()
                case .ended(let error?):
                    continuation.finish(throwing: error)
                }
            }
        } catch {
            state.withLockedValue { $0.streaming = false }
            throw error
        }
        return FrameStream(stream: stream, dropped: counter)
    }

    private var disconnectedError: DeviceError {
        DeviceError(.disconnected, device: uniqueID, "is disconnected; check its cable and that it is listed by `camrig-agent --list-devices`")
    }

    private func checkLock(_ lock: ConfigurationLock) throws(DeviceError) {
        let current = state.withLockedValue { $0.lock }
        guard let current else {
            throw DeviceError(.notLocked, device: uniqueID, "is not locked for configuration: lock it first")
        }
        guard current == lock else {
            throw DeviceError(.lockHeld, device: uniqueID, "is locked for configuration by '\(current.holder)'")
        }
    }

    private func resolve(_ change: CameraSettingsChange, from current: CameraSettings, format: DeviceFormat) throws(DeviceError) -> CameraSettings {
        var settings = current
        let support = typedControlSupport
        func unsupported(_ what: String) -> DeviceError {
            DeviceError(.unsupported, device: uniqueID, "does not support \(what)")
        }
        if let mode = change.focusMode {
            guard support.focusModes.contains(mode) else { throw unsupported("focus mode \(mode.rawValue)") }
            settings.focusMode = mode
        }
        if let position = change.lensPosition {
            guard support.lensPosition else { throw unsupported("setting the lens position") }
            guard (0...1).contains(position) else {
                throw DeviceError(.outOfRange, device: uniqueID, "lens position must be within 0…1, got \(position)")
            }
            settings.lensPosition = position
            settings.focusMode = .locked
        }
        if let mode = change.exposureMode {
            guard support.exposureModes.contains(mode) else { throw unsupported("exposure mode \(mode.rawValue)") }
            settings.exposureMode = mode
        }
        if let duration = change.exposureDuration {
            guard support.exposureModes.contains(.custom) else { throw unsupported("a custom exposure duration") }
            settings.exposureDuration = duration
            settings.exposureMode = .custom
        }
        if let iso = change.iso {
            guard support.exposureModes.contains(.custom) else { throw unsupported("setting ISO") }
            guard (25...12_800).contains(iso) else {
                throw DeviceError(.outOfRange, device: uniqueID, "ISO must be within 25…12800, got \(iso)")
            }
            settings.iso = iso
            settings.exposureMode = .custom
        }
        if let bias = change.exposureTargetBias {
            guard (-8...8).contains(bias) else {
                throw DeviceError(.outOfRange, device: uniqueID, "exposure target bias must be within -8…8 EV, got \(bias)")
            }
            settings.exposureTargetBias = bias
        }
        if let mode = change.whiteBalanceMode {
            guard support.whiteBalanceModes.contains(mode) else { throw unsupported("white balance mode \(mode.rawValue)") }
            settings.whiteBalanceMode = mode
        }
        if let temperature = change.whiteBalanceTemperature {
            guard support.whiteBalanceModes.contains(.locked) else { throw unsupported("setting the white balance temperature") }
            guard (2_000...10_000).contains(temperature) else {
                throw DeviceError(.outOfRange, device: uniqueID, "white balance temperature must be within 2000…10000 K, got \(temperature)")
            }
            settings.whiteBalanceTemperature = temperature
            settings.whiteBalanceMode = .locked
        }
        for (name, gain) in [("red", change.whiteBalanceRedGain), ("blue", change.whiteBalanceBlueGain)] {
            guard let gain else { continue }
            guard support.whiteBalanceModes.contains(.locked) else { throw unsupported("white balance gains") }
            guard (0.25...4).contains(gain) else {
                throw DeviceError(.outOfRange, device: uniqueID, "\(name) white balance gain must be within 0.25…4, got \(gain)")
            }
            settings.whiteBalanceMode = .locked
        }
        if let gain = change.whiteBalanceRedGain { settings.whiteBalanceRedGain = gain }
        if let gain = change.whiteBalanceBlueGain { settings.whiteBalanceBlueGain = gain }
        if let factor = change.zoomFactor {
            guard support.zoom else { throw unsupported("zoom") }
            guard factor >= 1, factor <= format.maxZoomFactor else {
                throw DeviceError(.outOfRange, device: uniqueID, "zoom factor must be within 1…\(format.maxZoomFactor) in format \(format.id), got \(factor)")
            }
            settings.zoomFactor = factor
        }
        if let mode = change.torchMode {
            guard support.torch else { throw unsupported("a torch") }
            settings.torchMode = mode
        }
        if let level = change.torchLevel {
            guard support.torch else { throw unsupported("a torch") }
            guard (0...1).contains(level) else {
                throw DeviceError(.outOfRange, device: uniqueID, "torch level must be within 0…1, got \(level)")
            }
            settings.torchLevel = level
        }
        return settings
    }
}

/// Frames from a streaming device, and how many were dropped because the consumer fell behind.
public struct FrameStream: AsyncSequence, Sendable {
    public typealias Element = CapturedFrame
    let stream: AsyncThrowingStream<CapturedFrame, any Error>
    let droppedCounter: NIOLockedValueBox<UInt64>

    init(stream: AsyncThrowingStream<CapturedFrame, any Error>, dropped: NIOLockedValueBox<UInt64>) {
        self.stream = stream
        self.droppedCounter = dropped
    }

    /// Frames dropped so far because the consumer did not keep up.
    public var dropped: UInt64 { droppedCounter.withLockedValue { $0 } }

    public func makeAsyncIterator() -> AsyncThrowingStream<CapturedFrame, any Error>.AsyncIterator {
        stream.makeAsyncIterator()
    }
}

/// 2^x for the zoom ramp.
private func pow2(_ x: Double) -> Double {
    var result = 1.0
    var remaining = x
    while remaining >= 1 { result *= 2; remaining -= 1 }
    while remaining <= -1 { result /= 2; remaining += 1 }
    // exp(f ln 2) by its series; |f ln 2| < 0.7 converges fast.
    let y = remaining * 0.693_147_180_559_945
    var term = 1.0
    var sum = 1.0
    for n in 1...12 {
        term *= y / Double(n)
        sum += term
    }
    return result * sum
}
