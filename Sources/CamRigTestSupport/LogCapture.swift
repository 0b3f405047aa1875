import Logging
import NIOConcurrencyHelpers

/// A logger that keeps its messages, so tests can check what an operator would read.
public final class LogCapture: Sendable {
    private let lines = NIOLockedValueBox<[String]>([])

    public init() {}

    /// A logger writing into this capture.
    public func logger(label: String = "test", level: Logger.Level = .trace) -> Logger {
        var logger = Logger(label: label) { _ in Handler(capture: self) }
        logger.logLevel = level
        return logger
    }

    /// Every message so far, as `level: message {metadata}`.
    public var messages: [String] { lines.withLockedValue { $0 } }

    /// Whether any message contains `text`.
    public func contains(_ text: String) -> Bool { messages.contains { $0.contains(text) } }

    fileprivate func append(_ line: String) { lines.withLockedValue { $0.append(line) } }

    struct Handler: LogHandler {
        let capture: LogCapture
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let merged = metadata.merging(event.metadata ?? [:]) { $1 }
            let rendered = merged.isEmpty ? "" : " " + merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            capture.append("\(event.level): \(event.message)\(rendered)")
        }
    }
}
