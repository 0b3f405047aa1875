import CamRigDeviceModel
extension CaptureDevice {
    /// Whether the camera starts exposing on command (its exposures go on a grid by being triggered at
    /// a grid instant), rather than free-running.
    public var startsExposuresOnCommand: Bool { backend is any FrameAlignableBackend }

    /// How this camera's exposures can be put on a time grid.
    public var phaseSteering: PhaseSteering {
        get throws(DeviceError) {
            if backend is any FrameAlignableBackend { return .triggered }
            guard let freeRunning = backend as? any FreeRunningBackend else { return .restart }
            if !isConnected { throw disconnectedError }
            return try freeRunning.frameDurationControl().map(PhaseSteering.frameDuration) ?? .restart
        }
    }

    /// Sets the lines of the frames that start from now on (see `FreeRunningBackend.setFrameLines`).
    public func setFrameLines(_ lines: Int64) throws(DeviceError) {
        guard let freeRunning = backend as? any FreeRunningBackend else {
            throw DeviceError(.unsupported, device: uniqueID, "has no frame-duration control")
        }
        if !isConnected { throw disconnectedError }
        try freeRunning.setFrameLines(lines)
    }

    /// Restarts the running stream at `monotonic` (see `FreeRunningBackend.restartStream`).
    public func restartStream(atMonotonic monotonic: Int64) throws(DeviceError) {
        guard let freeRunning = backend as? any FreeRunningBackend else {
            throw DeviceError(.unsupported, device: uniqueID, "cannot restart its stream at an instant")
        }
        if !isConnected { throw disconnectedError }
        guard state.withLockedValue({ $0.streaming }) else {
            throw DeviceError(.invalidArgument, device: uniqueID, "is not streaming, so there is no stream to restart")
        }
        try freeRunning.restartStream(atMonotonic: monotonic)
    }
}
