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

/// What a streaming backend reports.
public enum FrameEvent: Sendable {
    case frame(CapturedFrame)
    /// The stream ended: `nil` when stopped, an error when the device failed or vanished.
    case ended(DeviceError?)
}

/// One kind of camera: the synthetic camera or a V4L2 device (libcamera's pipeline handler).
///
/// `CaptureDevice` validates everything before it calls a backend, and serializes the calls, so a
/// backend may assume valid arguments and one caller at a time (except `stopStreaming`, which may
/// come from any thread while frames are delivered).
public protocol CameraBackend: AnyObject, Sendable {
    var identity: DeviceIdentity { get }
    var typedControlSupport: TypedControlSupport { get }
    func formats() throws(DeviceError) -> [DeviceFormat]
    func controlDescriptors() throws(DeviceError) -> [ControlDescriptor]
    func readControls(_ ids: [UInt32]) throws(DeviceError) -> [UInt32: Int64]
    func writeControls(_ values: [(id: UInt32, value: Int64)]) throws(DeviceError)
    /// Sets format and frame duration; returns the duration the device actually uses.
    func activate(format: DeviceFormat, frameDuration: FrameDuration) throws(DeviceError) -> FrameDuration
    /// Puts typed settings into effect (mapped onto the device's own controls).
    func apply(settings: CameraSettings) throws(DeviceError)
    /// Starts delivering frames to `sink` from the backend's own thread.
    func startStreaming(bufferCount: Int, sink: @escaping @Sendable (FrameEvent) -> Void) throws(DeviceError)
    /// Stops streaming; `sink` gets `.ended(nil)` once no more frames will come.
    func stopStreaming()
}

/// A camera whose exposures can be put on a time grid: the next stream's frames start exposing at
/// `anchor + k × frame duration` (`CLOCK_MONOTONIC`), so that cameras on several hosts told the same
/// instant expose together. Sensors with an external trigger input can do this; free-running V4L2
/// cameras cannot, and their frames are matched by timestamp instead.
public protocol FrameAlignableBackend: CameraBackend {
    /// Aligns the next `startStreaming` (within a second of `anchor`) to `anchor`.
    func alignNextStream(toMonotonic anchor: Int64)
}
