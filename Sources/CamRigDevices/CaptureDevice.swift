import CamRigDeviceModel
import NIOConcurrencyHelpers

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
        var photoOutput = PhotoOutputSettings()
        var controls: [ControlDescriptor]
        var lock: ConfigurationLock?
        var connected = true
        var streaming = false
        var nextToken: UInt64 = 1
    }

    let state: NIOLockedValueBox<State>
    let zoomRamp = NIOLockedValueBox<Task<Void, Never>?>(nil)

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
    /// How the device makes photos (set with `configure`).
    public var photoOutput: PhotoOutputSettings { state.withLockedValue { $0.photoOutput } }
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

    var disconnectedError: DeviceError {
        DeviceError(.disconnected, device: uniqueID, "is disconnected; check its cable and that it is listed by `camrig-agent --list-devices`")
    }
}
