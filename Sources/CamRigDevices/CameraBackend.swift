import CamRigDeviceModel
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
