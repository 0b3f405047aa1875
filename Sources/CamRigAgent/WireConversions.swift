import CamRigDevices
import CamRigWire
import CamRigWireModel

/// The agent's device model in wire messages, and back.
extension WireDeviceType {
    init(_ type: DeviceType) {
        switch type {
        case .builtInWideAngle: self = .builtInWideAngle
        case .builtInTelephoto: self = .builtInTelephoto
        case .builtInUltraWide: self = .builtInUltraWide
        case .external: self = .external
        case .synthetic: self = .synthetic
        }
    }

    var deviceType: DeviceType? {
        switch self {
        case .builtInWideAngle: .builtInWideAngle
        case .builtInTelephoto: .builtInTelephoto
        case .builtInUltraWide: .builtInUltraWide
        case .external: .external
        case .synthetic: .synthetic
        case .unspecified, .UNRECOGNIZED: nil
        }
    }
}

extension WireDevicePosition {
    init(_ position: DevicePosition) {
        switch position {
        case .unspecified: self = .unspecified
        case .front: self = .front
        case .back: self = .back
        }
    }

    var position: DevicePosition {
        switch self {
        case .front: .front
        case .back: .back
        default: .unspecified
        }
    }
}

extension WireControlType {
    init(_ type: ControlType) {
        switch type {
        case .integer: self = .integer
        case .boolean: self = .boolean
        case .menu: self = .menu
        case .integerMenu: self = .integerMenu
        case .button: self = .button
        case .integer64: self = .integer64
        case .string: self = .string
        case .bitmask: self = .bitmask
        case .controlClass: self = .unspecified
        }
    }
}

extension FocusMode {
    var wire: WireFocusMode {
        switch self {
        case .locked: .locked
        case .auto: .auto
        case .continuous: .continuous
        }
    }
}

extension WireFocusMode {
    var mode: FocusMode? {
        switch self {
        case .locked: .locked
        case .auto: .auto
        case .continuous: .continuous
        default: nil
        }
    }
}

extension ExposureMode {
    var wire: WireExposureMode {
        switch self {
        case .locked: .locked
        case .auto: .auto
        case .continuous: .continuous
        case .custom: .custom
        }
    }
}

extension WireExposureMode {
    var mode: ExposureMode? {
        switch self {
        case .locked: .locked
        case .auto: .auto
        case .continuous: .continuous
        case .custom: .custom
        default: nil
        }
    }
}

extension WhiteBalanceMode {
    var wire: WireWhiteBalanceMode {
        switch self {
        case .locked: .locked
        case .auto: .auto
        case .continuous: .continuous
        }
    }
}

extension WireWhiteBalanceMode {
    var mode: WhiteBalanceMode? {
        switch self {
        case .locked: .locked
        case .auto: .auto
        case .continuous: .continuous
        default: nil
        }
    }
}

extension TorchMode {
    var wire: WireTorchMode {
        switch self {
        case .off: .off
        case .on: .on
        case .auto: .auto
        }
    }
}

extension WireTorchMode {
    var mode: TorchMode? {
        switch self {
        case .off: .off
        case .on: .on
        case .auto: .auto
        default: nil
        }
    }
}

extension WireDeviceState {
    init(device: CaptureDevice, rawValues: [UInt32: Int64]) {
        self.init()
        let settings = device.settings
        deviceID = device.uniqueID
        activeFormatID = device.activeFormat.id
        activeMinFrameDuration = WireRational(device.activeMinFrameDuration)
        activeMaxFrameDuration = WireRational(device.activeMaxFrameDuration)
        focus.mode = settings.focusMode.wire
        focus.lensPosition = settings.lensPosition
        exposure.mode = settings.exposureMode.wire
        exposure.duration = WireRational(settings.exposureDuration)
        exposure.iso = settings.iso
        exposure.targetBias = settings.exposureTargetBias
        whiteBalance.mode = settings.whiteBalanceMode.wire
        whiteBalance.temperatureKelvin = settings.whiteBalanceTemperature
        whiteBalance.redGain = settings.whiteBalanceRedGain
        whiteBalance.blueGain = settings.whiteBalanceBlueGain
        zoom.factor = settings.zoomFactor
        torch.mode = settings.torchMode.wire
        torch.level = settings.torchLevel
        rawControls = rawValues.sorted { $0.key < $1.key }.map { id, value in
            var control = WireControlValue()
            control.id = id
            control.integer = value
            return control
        }
    }
}

extension WireDeviceDescription {
    init(device: CaptureDevice, agentID: String, lease: LeaseTable.Lease?) {
        self.init()
        let values = (try? device.controlValues()) ?? [:]
        uniqueID = device.uniqueID
        localizedName = device.identity.localizedName
        modelID = device.identity.modelID
        deviceType = WireDeviceType(device.identity.deviceType)
        position = WireDevicePosition(device.identity.position)
        label = device.identity.label
        connected = device.isConnected
        self.agentID = agentID
        backend = device.identity.backend
        formats = device.formats.map(WireFormat.init)
        controls = device.controls.filter { $0.type != .controlClass }.map { control in
            var wire = WireControlDescription()
            wire.id = control.id
            wire.name = control.name
            wire.type = WireControlType(control.type)
            wire.minimum = control.minimum
            wire.maximum = control.maximum
            wire.step = control.step
            wire.defaultValue = control.defaultValue
            wire.flags = control.flags
            wire.menu = control.menu.map { item in
                var entry = WireMenuEntry()
                entry.index = item.index
                entry.name = item.name ?? ""
                entry.value = item.value ?? 0
                return entry
            }
            if let value = values[control.id] {
                wire.current.id = control.id
                wire.current.integer = value
            }
            return wire
        }
        let support = device.typedControlSupport
        controlSupport.focusModes = FocusMode.allCases.filter(support.focusModes.contains).map(\.wire)
        controlSupport.lensPosition = support.lensPosition
        controlSupport.exposureModes = ExposureMode.allCases.filter(support.exposureModes.contains).map(\.wire)
        controlSupport.whiteBalanceModes = WhiteBalanceMode.allCases.filter(support.whiteBalanceModes.contains).map(\.wire)
        controlSupport.zoom = support.zoom
        controlSupport.torch = support.torch
        state = WireDeviceState(device: device, rawValues: values)
        if let lease { self.lease = WireLeaseInfo(lease) }
    }
}

extension WireLeaseInfo {
    init(_ lease: LeaseTable.Lease) {
        self.init()
        leaseID = lease.id
        deviceID = lease.deviceID
        holder = lease.holder
        expiresAtNs = lease.expiresAt
    }
}

extension DeviceConfigurationChange {
    /// The change a `Configure` message asks for; unset fields stay as they are.
    init(_ configure: WireConfigure) throws(WireProtocolError) {
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

extension DeviceError {
    /// The wire error for this device error.
    func wire(agentID: String) -> WireError {
        var error = WireError()
        error.agentID = agentID
        error.deviceID = deviceID
        error.message = description
        error.allowedRanges = allowedRanges.map(WireFrameRateRange.init)
        if let errno { error.systemErrno = errno }
        switch code {
        case .notFound: error.code = .deviceNotFound
        case .disconnected: error.code = .deviceDisconnected
        case .busy: error.code = .deviceBusy
        case .unsupported: error.code = .unsupported
        case .outOfRange: error.code = .outOfRange
        case .notLocked: error.code = .leaseRequired
        case .lockHeld: error.code = .leaseHeld
        case .invalidArgument: error.code = .invalidArgument
        case .system: error.code = .internal
        }
        return error
    }
}
