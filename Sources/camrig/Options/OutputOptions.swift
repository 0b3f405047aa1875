import ArgumentParser
import CamRigCLI
import Logging

/// Logging level and machine-readable output.
struct OutputOptions: ParsableArguments {
    @Flag(name: .long, help: "Print one JSON object instead of text.")
    var json = false

    @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: Logger.Level = .warning

    /// Sends every log at `--log-level` or above to standard error, and returns a logger labelled `label`.
    func makeLogger(label: String = "camrig") -> Logger {
        let level = logLevel
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        return Logger(label: label)
    }
}

