/// A device failure that names the device and says what to do.
public struct DeviceError: Error, Hashable, Sendable, CustomStringConvertible {
    public enum Code: String, Hashable, Sendable {
        case notFound = "not-found"
        case disconnected
        case busy
        case unsupported
        case outOfRange = "out-of-range"
        case notLocked = "not-locked"
        case lockHeld = "lock-held"
        case invalidArgument = "invalid-argument"
        case system
    }

    public var code: Code
    public var deviceID: String
    public var message: String
    /// For `.outOfRange` on frame durations: what the active format allows.
    public var allowedRanges: [FrameRateRange]
    /// The errno of a failed system call, when there was one.
    public var errno: Int32?

    public init(_ code: Code, device: String, _ message: String, allowedRanges: [FrameRateRange] = [], errno: Int32? = nil) {
        self.code = code
        self.deviceID = device
        self.message = message
        self.allowedRanges = allowedRanges
        self.errno = errno
    }

    public var description: String { "device \(deviceID): \(message)" }
}
