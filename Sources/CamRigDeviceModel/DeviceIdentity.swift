/// AVFoundation's device types, as far as they make sense for a rig.
public enum DeviceType: String, Hashable, Sendable, CaseIterable {
    /// A sensor on the host's camera connector (CSI).
    case builtInWideAngle = "built-in-wide-angle"
    case builtInTelephoto = "built-in-telephoto"
    case builtInUltraWide = "built-in-ultra-wide"
    /// A USB (UVC) camera.
    case external
    /// CamRig's synthetic camera.
    case synthetic
}

public enum DevicePosition: String, Hashable, Sendable, CaseIterable {
    case unspecified, front, back
}

/// What a device is, fixed when it is discovered.
public struct DeviceIdentity: Hashable, Sendable {
    /// Stable across reboots and re-plugging: built from bus info and serial number, never the /dev node.
    public var uniqueID: String
    public var localizedName: String
    public var modelID: String
    public var deviceType: DeviceType
    public var position: DevicePosition
    /// Where the device sits in the rig, e.g. "ring-a/03" (operator-assigned; empty if none).
    public var label: String
    /// "synthetic" or "v4l2".
    public var backend: String

    public init(
        uniqueID: String,
        localizedName: String,
        modelID: String,
        deviceType: DeviceType,
        position: DevicePosition = .unspecified,
        label: String = "",
        backend: String
    ) {
        self.uniqueID = uniqueID
        self.localizedName = localizedName
        self.modelID = modelID
        self.deviceType = deviceType
        self.position = position
        self.label = label
        self.backend = backend
    }
}

/// Which typed controls a device supports (`isFocusModeSupported(_:)` and friends).
public struct TypedControlSupport: Hashable, Sendable {
    public var focusModes: Set<FocusMode> = []
    public var lensPosition = false
    public var exposureModes: Set<ExposureMode> = []
    public var whiteBalanceModes: Set<WhiteBalanceMode> = []
    public var zoom = false
    public var torch = false
    /// The camera applies `exposureTargetBias` while exposing automatically.
    public var exposureTargetBias = false

    public init() {}
}
