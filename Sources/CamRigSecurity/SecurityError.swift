/// A certificate or TLS set-up problem, worded for the operator who has to fix it.
public struct SecurityError: Error, Sendable, CustomStringConvertible {
    /// What went wrong and what to do about it.
    public var message: String

    public init(_ message: String) {
        self.message = message
    }

    public var description: String { message }
}
