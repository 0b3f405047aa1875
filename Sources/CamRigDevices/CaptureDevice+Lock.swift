import CamRigDeviceModel
import NIOConcurrencyHelpers

extension CaptureDevice {
    /// Takes the configuration lock for `holder`. Fails with `.lockHeld`, naming the holder, if taken.
    public func lockForConfiguration(holder: String) throws(DeviceError) -> ConfigurationLock {
        let result: Result<ConfigurationLock, DeviceError> = state.withLockedValue { state in
            guard state.connected else { return .failure(disconnectedError) }
            if let lock = state.lock {
                return .failure(DeviceError(.lockHeld, device: uniqueID, "is locked for configuration by '\(lock.holder)'"))
            }
            let lock = ConfigurationLock(deviceID: uniqueID, holder: holder, token: state.nextToken)
            state.nextToken &+= 1
            state.lock = lock
            return .success(lock)
        }
        return try result.get()
    }

    /// Releases the lock; a lock that is not the current one is ignored.
    public func unlockForConfiguration(_ lock: ConfigurationLock) {
        state.withLockedValue { state in
            if state.lock == lock { state.lock = nil }
        }
    }

    func checkLock(_ lock: ConfigurationLock) throws(DeviceError) {
        let current = state.withLockedValue { $0.lock }
        guard let current else {
            throw DeviceError(.notLocked, device: uniqueID, "is not locked for configuration: lock it first")
        }
        guard current == lock else {
            throw DeviceError(.lockHeld, device: uniqueID, "is locked for configuration by '\(current.holder)'")
        }
    }
}
