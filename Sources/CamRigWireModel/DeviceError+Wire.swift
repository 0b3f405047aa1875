import CamRigDeviceModel
import CamRigWire

// Device failures as wire errors.

extension DeviceError {
    /// The wire error for this device error.
    public func wire(agentID: String) -> WireError {
        var error = WireError(.internal, agent: agentID, device: deviceID, description)
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
