/// The right to change a device, held by one client (`lockForConfiguration`). The agent leases it to
/// network clients; here it is just who holds it and a token that proves it.
public struct ConfigurationLock: Hashable, Sendable {
    public let deviceID: String
    public let holder: String
    public let token: UInt64

    public init(deviceID: String, holder: String, token: UInt64) {
        self.deviceID = deviceID
        self.holder = holder
        self.token = token
    }
}

/// A change to a device's configuration. `nil` fields stay as they are.
public struct DeviceConfigurationChange: Hashable, Sendable {
    public var formatID: String?
    public var minFrameDuration: FrameDuration?
    public var maxFrameDuration: FrameDuration?
    public var settings = CameraSettingsChange()
    public var rawControls: [UInt32: Int64] = [:]
    /// The photo output's configuration, replaced as a whole.
    public var photoOutput: PhotoOutputSettings?

    public init(formatID: String? = nil, minFrameDuration: FrameDuration? = nil, maxFrameDuration: FrameDuration? = nil) {
        self.formatID = formatID
        self.minFrameDuration = minFrameDuration
        self.maxFrameDuration = maxFrameDuration
    }
}

/// What a change resolves to, once validated.
public struct ResolvedDeviceConfiguration: Hashable, Sendable {
    public var format: DeviceFormat
    public var minFrameDuration: FrameDuration
    public var maxFrameDuration: FrameDuration
    public var settings: CameraSettings
    public var rawControls: [UInt32: Int64]
    public var photoOutput: PhotoOutputSettings

    public init(
        format: DeviceFormat, minFrameDuration: FrameDuration, maxFrameDuration: FrameDuration, settings: CameraSettings,
        rawControls: [UInt32: Int64], photoOutput: PhotoOutputSettings
    ) {
        self.format = format
        self.minFrameDuration = minFrameDuration
        self.maxFrameDuration = maxFrameDuration
        self.settings = settings
        self.rawControls = rawControls
        self.photoOutput = photoOutput
    }
}

/// A camera as the wire describes it: what it is and can do, and its state now. `CaptureDevice` is one;
/// the mapping to wire messages (CamRigWireModel) needs no more than this.
public protocol DescribedDevice: AnyObject, Sendable {
    var uniqueID: String { get }
    var identity: DeviceIdentity { get }
    var formats: [DeviceFormat] { get }
    /// Raw controls as the driver describes them.
    var controls: [ControlDescriptor] { get }
    var typedControlSupport: TypedControlSupport { get }
    var isConnected: Bool { get }
    var activeFormat: DeviceFormat { get }
    var activeMinFrameDuration: FrameDuration { get }
    var activeMaxFrameDuration: FrameDuration { get }
    var settings: CameraSettings { get }
    var photoOutput: PhotoOutputSettings { get }
    /// Current values of raw controls (read from the device).
    func controlValues() throws(DeviceError) -> [UInt32: Int64]
}
