import CamRigDeviceModel
import NIOConcurrencyHelpers

extension CaptureDevice {
    /// What a change resolves to, once validated.
    public typealias ResolvedConfiguration = ResolvedDeviceConfiguration

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
            rawControls: change.rawControls,
            photoOutput: change.photoOutput ?? current.photoOutput
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
            state.photoOutput = resolved.photoOutput
        }
        if ramping {
            startZoomRamp(to: resolved.settings.zoomFactor, rate: rampRate)
        }
        return resolved
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

    func resolve(_ change: CameraSettingsChange, from current: CameraSettings, format: DeviceFormat) throws(DeviceError) -> CameraSettings {
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
