import CamRigDeviceModel
import CamRigWire

// A Configure request as a device configuration change.

extension DeviceConfigurationChange {
    /// The change a `Configure` message asks for; unset fields stay as they are.
    public init(_ configure: WireConfigure) throws(WireProtocolError) {
        self.init()
        if configure.hasFormatID { formatID = configure.formatID }
        if configure.hasMinFrameDuration {
            guard let duration = configure.minFrameDuration.duration else {
                throw WireProtocolError(.invalidArgument, "min_frame_duration \(configure.minFrameDuration.numerator)/\(configure.minFrameDuration.denominator) is not a duration")
            }
            minFrameDuration = duration
        }
        if configure.hasMaxFrameDuration {
            guard let duration = configure.maxFrameDuration.duration else {
                throw WireProtocolError(.invalidArgument, "max_frame_duration \(configure.maxFrameDuration.numerator)/\(configure.maxFrameDuration.denominator) is not a duration")
            }
            maxFrameDuration = duration
        }
        if configure.hasFocus {
            settings.focusMode = configure.focus.mode.mode
            if configure.focus.hasLensPosition { settings.lensPosition = configure.focus.lensPosition }
        }
        if configure.hasExposure {
            let exposure = configure.exposure
            settings.exposureMode = exposure.mode.mode
            if exposure.hasDuration {
                guard let duration = exposure.duration.duration else {
                    throw WireProtocolError(.invalidArgument, "exposure duration \(exposure.duration.numerator)/\(exposure.duration.denominator) is not a duration")
                }
                settings.exposureDuration = duration
            }
            if exposure.hasIso { settings.iso = exposure.iso }
            if exposure.hasTargetBias { settings.exposureTargetBias = exposure.targetBias }
        }
        if configure.hasWhiteBalance {
            let balance = configure.whiteBalance
            settings.whiteBalanceMode = balance.mode.mode
            if balance.hasTemperatureKelvin { settings.whiteBalanceTemperature = balance.temperatureKelvin }
            if balance.hasRedGain { settings.whiteBalanceRedGain = balance.redGain }
            if balance.hasBlueGain { settings.whiteBalanceBlueGain = balance.blueGain }
        }
        if configure.hasZoom {
            if configure.zoom.hasFactor { settings.zoomFactor = configure.zoom.factor }
            if configure.zoom.rampRate > 0 { settings.zoomRampRate = configure.zoom.rampRate }
        }
        if configure.hasTorch {
            settings.torchMode = configure.torch.mode.mode
            if configure.torch.hasLevel { settings.torchLevel = configure.torch.level }
        }
        if configure.hasPhotoOutput { photoOutput = PhotoOutputSettings(configure.photoOutput) }
        for control in configure.rawControls {
            switch control.value {
            case .integer(let value): rawControls[control.id] = value
            case .boolean(let value): rawControls[control.id] = value ? 1 : 0
            case .text, .none:
                throw WireProtocolError(.invalidArgument, "control 0x\(String(control.id, radix: 16)) needs an integer or boolean value")
            }
        }
    }
}
