import CamRigDeviceModel
import CamRigWire

// Devices in wire messages and back: identity, types, modes, controls, description and state.

/// The agent's device model in wire messages, and back.

extension WireDeviceType {
    public init(_ type: DeviceType) {
        switch type {
        case .builtInWideAngle: self = .builtInWideAngle
        case .builtInTelephoto: self = .builtInTelephoto
        case .builtInUltraWide: self = .builtInUltraWide
        case .external: self = .external
        case .synthetic: self = .synthetic
        }
    }

    public var deviceType: DeviceType? {
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
    public init(_ position: DevicePosition) {
        switch position {
        case .unspecified: self = .unspecified
        case .front: self = .front
        case .back: self = .back
        }
    }

    public var position: DevicePosition {
        switch self {
        case .front: .front
        case .back: .back
        default: .unspecified
        }
    }
}

extension WireControlType {
    public init(_ type: ControlType) {
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
    public var wire: WireFocusMode {
        switch self {
        case .locked: .locked
        case .auto: .auto
        case .continuous: .continuous
        }
    }
}

extension WireFocusMode {
    public var mode: FocusMode? {
        switch self {
        case .locked: .locked
        case .auto: .auto
        case .continuous: .continuous
        default: nil
        }
    }
}

extension ExposureMode {
    public var wire: WireExposureMode {
        switch self {
        case .locked: .locked
        case .auto: .auto
        case .continuous: .continuous
        case .custom: .custom
        }
    }
}

extension WireExposureMode {
    public var mode: ExposureMode? {
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
    public var wire: WireWhiteBalanceMode {
        switch self {
        case .locked: .locked
        case .auto: .auto
        case .continuous: .continuous
        }
    }
}

extension WireWhiteBalanceMode {
    public var mode: WhiteBalanceMode? {
        switch self {
        case .locked: .locked
        case .auto: .auto
        case .continuous: .continuous
        default: nil
        }
    }
}

extension TorchMode {
    public var wire: WireTorchMode {
        switch self {
        case .off: .off
        case .on: .on
        case .auto: .auto
        }
    }
}

extension WireTorchMode {
    public var mode: TorchMode? {
        switch self {
        case .off: .off
        case .on: .on
        case .auto: .auto
        default: nil
        }
    }
}

extension WireDeviceState {
    /// The device's state now.
    public init(device: some DescribedDevice, rawValues: [UInt32: Int64]) {
        self.init(
            deviceID: device.uniqueID, formatID: device.activeFormat.id, minFrameDuration: device.activeMinFrameDuration,
            maxFrameDuration: device.activeMaxFrameDuration, settings: device.settings, rawValues: rawValues)
        photoOutput = WirePhotoOutputSettings(device.photoOutput)
    }

    /// The state the device would have after a change that was only validated (`validate_only`):
    /// `resolved` as `CaptureDevice.validate` resolved it, over the device's raw control values now.
    public init(device: some DescribedDevice, resolved: ResolvedDeviceConfiguration, rawValues: [UInt32: Int64]) {
        self.init(
            deviceID: device.uniqueID, formatID: resolved.format.id, minFrameDuration: resolved.minFrameDuration,
            maxFrameDuration: resolved.maxFrameDuration, settings: resolved.settings,
            rawValues: rawValues.merging(resolved.rawControls) { _, new in new })
        photoOutput = WirePhotoOutputSettings(resolved.photoOutput)
    }

    private init(
        deviceID: String, formatID: String, minFrameDuration: FrameDuration, maxFrameDuration: FrameDuration,
        settings: CameraSettings, rawValues: [UInt32: Int64]
    ) {
        self.init()
        self.deviceID = deviceID
        activeFormatID = formatID
        activeMinFrameDuration = WireRational(minFrameDuration)
        activeMaxFrameDuration = WireRational(maxFrameDuration)
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
    /// The device as it is now: what it is and can do, its state, its controls' values and its lease.
    public init(device: some DescribedDevice, agentID: String, lease: LeaseTable.Lease?) {
        self.init(describing: device, agentID: agentID)
        update(device: device, lease: lease)
    }

    /// What stays the same for the device's life: identity, formats, control descriptions and typed
    /// control support, without the state, the controls' values or the lease (see `update`). An agent
    /// keeps it per device, so a description costs a copy and the values that change.
    public init(describing device: some DescribedDevice, agentID: String) {
        self.init()
        uniqueID = device.uniqueID
        localizedName = device.identity.localizedName
        modelID = device.identity.modelID
        deviceType = WireDeviceType(device.identity.deviceType)
        position = WireDevicePosition(device.identity.position)
        label = device.identity.label
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
            return wire
        }
        let support = device.typedControlSupport
        controlSupport.focusModes = FocusMode.allCases.filter(support.focusModes.contains).map(\.wire)
        controlSupport.lensPosition = support.lensPosition
        controlSupport.exposureModes = ExposureMode.allCases.filter(support.exposureModes.contains).map(\.wire)
        controlSupport.whiteBalanceModes = WhiteBalanceMode.allCases.filter(support.whiteBalanceModes.contains).map(\.wire)
        controlSupport.zoom = support.zoom
        controlSupport.torch = support.torch
    }

    /// Fills in what changes: whether the device is connected, its state, its controls' current values
    /// and its lease.
    public mutating func update(device: some DescribedDevice, lease: LeaseTable.Lease?) {
        let values = (try? device.controlValues()) ?? [:]
        connected = device.isConnected
        for index in controls.indices {
            let id = controls[index].id
            if let value = values[id] {
                controls[index].current.id = id
                controls[index].current.integer = value
            } else {
                controls[index].clearCurrent()
            }
        }
        state = WireDeviceState(device: device, rawValues: values)
        if let lease { self.lease = WireLeaseInfo(lease) } else { clearLease() }
    }
}

extension WirePhotoOutputSettings {
    public init(_ settings: PhotoOutputSettings) {
        self.init()
        maxPhotoDimensions = WireDimensions(settings.maxPhotoDimensions)
        maxQualityPrioritization = WireQualityPrioritization(settings.maxQualityPrioritization)
        responsiveCapture = settings.responsiveCapture
        deferredDelivery = settings.deferredDelivery
    }
}

extension PhotoOutputSettings {
    /// The settings a message asks for; an unspecified level allows every level.
    public init(_ wire: WirePhotoOutputSettings) {
        self.init(
            maxPhotoDimensions: wire.maxPhotoDimensions.dimensions,
            maxQualityPrioritization: wire.maxQualityPrioritization == .unspecified ? .quality : PhotoQualityPrioritization(wire.maxQualityPrioritization),
            responsiveCapture: wire.responsiveCapture, deferredDelivery: wire.deferredDelivery)
    }
}
