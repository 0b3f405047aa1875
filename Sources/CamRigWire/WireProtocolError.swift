/// A violation of the wire protocol or a failure the protocol reports, with its stable code.
///
/// The `message` is written for the operator who reads it in a log: it says what was wrong with the
/// frame and, where it helps, what to do.
public struct WireProtocolError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The stable code sent to the peer.
    public var code: WireErrorCode
    /// What happened.
    public var message: String
    /// The request this error answers, or 0 for the connection as a whole.
    public var requestID: UInt64

    /// Creates an error.
    public init(_ code: WireErrorCode, _ message: String, requestID: UInt64 = 0) {
        self.code = code
        self.message = message
        self.requestID = requestID
    }

    /// Whether the code is a protocol violation after which the connection is closed.
    public var isFatal: Bool { code.isProtocolViolation }

    /// The `Error` message that tells the peer about this error.
    public var wireMessage: WireError {
        var error = WireError(code, message)
        error.fatal = isFatal
        return error
    }

    /// The frame that carries `wireMessage`.
    public var frame: WireFrame {
        WireFrame(requestID: requestID, .error(wireMessage))
    }

    public var description: String { "\(code.name): \(message)" }
}

extension WireError {
    /// The one way to build an error reply: its code, where it happened (the agent, and the device if
    /// one is concerned) and a message that says what failed and what to do.
    public init(_ code: WireErrorCode, agent: String = "", device: String = "", _ message: String) {
        self.init()
        self.code = code
        agentID = agent
        deviceID = device
        self.message = message
    }
}

extension WireErrorCode {
    /// Protocol violations (codes 1–19) end the connection.
    public var isProtocolViolation: Bool { (1...19).contains(rawValue) }

    /// The code's name as `PROTOCOL.md` and the schema spell it, e.g. `FRAME_TOO_LARGE`.
    public var name: String {
        switch self {
        case .unspecified: "UNSPECIFIED"
        case .malformedFrame: "MALFORMED_FRAME"
        case .frameTooLarge: "FRAME_TOO_LARGE"
        case .undecodableMessage: "UNDECODABLE_MESSAGE"
        case .unknownMessage: "UNKNOWN_MESSAGE"
        case .unexpectedMessage: "UNEXPECTED_MESSAGE"
        case .unsupportedVersion: "UNSUPPORTED_VERSION"
        case .handshakeTimeout: "HANDSHAKE_TIMEOUT"
        case .invalidRequestID: "INVALID_REQUEST_ID"
        case .permissionDenied: "PERMISSION_DENIED"
        case .invalidArgument: "INVALID_ARGUMENT"
        case .deviceNotFound: "DEVICE_NOT_FOUND"
        case .deviceDisconnected: "DEVICE_DISCONNECTED"
        case .deviceBusy: "DEVICE_BUSY"
        case .unsupported: "UNSUPPORTED"
        case .outOfRange: "OUT_OF_RANGE"
        case .leaseHeld: "LEASE_HELD"
        case .leaseRequired: "LEASE_REQUIRED"
        case .leaseExpired: "LEASE_EXPIRED"
        case .triggerLate: "TRIGGER_LATE"
        case .queueFull: "QUEUE_FULL"
        case .spoolFull: "SPOOL_FULL"
        case .notFound: "NOT_FOUND"
        case .unimplemented: "UNIMPLEMENTED"
        case .storeUnavailable: "STORE_UNAVAILABLE"
        case .storeRefused: "STORE_REFUSED"
        case .internal: "INTERNAL"
        case .shuttingDown: "SHUTTING_DOWN"
        case .resourceExhausted: "RESOURCE_EXHAUSTED"
        case .UNRECOGNIZED(let value): "UNRECOGNIZED(\(value))"
        }
    }
}
