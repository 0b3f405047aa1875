import CLibV4L2
#if canImport(Glibc)
import CamRigDeviceModel
import Glibc
#endif

/// An open V4L2 device node, used through libv4l2 (so format conversion and plugins apply).
///
/// Every failing call becomes a `DeviceError` naming the device, the request and what to do.
final class V4L2Handle: @unchecked Sendable {
    let path: String
    let deviceID: String
    private(set) var fd: Int32

    init(path: String, deviceID: String? = nil) throws(DeviceError) {
        self.path = path
        self.deviceID = deviceID ?? path
        fd = camrig_v4l2_open(path, O_RDWR)
        if fd < 0 {
            throw Self.error(errno, device: deviceID ?? path, doing: "open \(path)")
        }
    }

    deinit { close() }

    func close() {
        if fd >= 0 {
            _ = camrig_v4l2_close(fd)
            fd = -1
        }
    }

    /// Runs one ioctl on `argument`.
    func ioctl<T>(_ request: UInt, _ argument: inout T, _ name: String) throws(DeviceError) {
        let result = withUnsafeMutablePointer(to: &argument) { camrig_v4l2_ioctl(fd, request, $0) }
        if result < 0 { throw Self.error(errno, device: deviceID, doing: name) }
    }

    /// Like `ioctl`, but returns false for EINVAL (the end of an enumeration) instead of throwing.
    func enumerate<T>(_ request: UInt, _ argument: inout T, _ name: String) throws(DeviceError) -> Bool {
        let result = withUnsafeMutablePointer(to: &argument) { camrig_v4l2_ioctl(fd, request, $0) }
        if result < 0 {
            let code = errno
            if code == EINVAL { return false }
            throw Self.error(code, device: deviceID, doing: name)
        }
        return true
    }

    /// errno → a `DeviceError` an operator can act on.
    static func error(_ code: Int32, device: String, doing what: String) -> DeviceError {
        let reason = String(cString: strerror(code))
        switch code {
        case EBUSY:
            return DeviceError(.busy, device: device, "\(what): device busy; another program or stream is using it (stop it, or check `fuser` on the device node)", errno: code)
        case ENODEV, ENXIO, ENOENT:
            return DeviceError(.disconnected, device: device, "\(what): the device is gone (\(reason)); check the cable and `camrig-agent --list-devices`", errno: code)
        case EIO:
            return DeviceError(.disconnected, device: device, "\(what): I/O error (\(reason)); the device may have been unplugged or reset", errno: code)
        case EACCES, EPERM:
            return DeviceError(.system, device: device, "\(what): permission denied; run the agent in the 'video' group (see deploy/70-camrig-cameras.rules)", errno: code)
        case ENOTTY, EINVAL:
            return DeviceError(.unsupported, device: device, "\(what): not supported by the driver (\(reason))", errno: code)
        case ERANGE:
            return DeviceError(.outOfRange, device: device, "\(what): value out of range (\(reason))", errno: code)
        default:
            return DeviceError(.system, device: device, "\(what): \(reason) (errno \(code))", errno: code)
        }
    }
}

/// Text of a fixed-size C character array imported as a tuple.
func cString<T>(_ tuple: T) -> String {
    withUnsafeBytes(of: tuple) { raw in
        let bytes = raw.prefix { $0 != 0 }
        return String(decoding: bytes, as: UTF8.self)
    }
}
