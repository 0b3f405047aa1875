import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigSecurity
import CamRigStorage
import CamRigWire
import Foundation
import Logging

/// How to authenticate to agents.
struct ConnectionOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("Directory with ca.pem and this client's certificate.", valueName: "dir"))
    var tlsDir: String?

    @Option(name: .long, help: ArgumentHelp("Certificate name to present (default: the only coordinator certificate in --tls-dir, else the only viewer certificate).", valueName: "name"))
    var identity: String?

    @Flag(name: .long, help: "Connect without TLS, to agents started with --insecure. Development only.")
    var insecure = false

    func validate() throws {
        if insecure && tlsDir != nil {
            throw ValidationError("--insecure and --tls-dir exclude each other")
        }
        if !insecure && tlsDir == nil {
            throw ValidationError("agents require TLS: pass --tls-dir DIR (see `camrig certs init`), or --insecure for agents started with --insecure")
        }
    }

    func security(logger: Logger) throws -> ClientSecurity {
        if insecure {
            logger.warning("connecting WITHOUT TLS (--insecure): nothing is encrypted or authenticated")
            return .insecure
        }
        return .tls(try MutualTLS.client(directory: TLSDirectory(path: tlsDir!), identityName: identity))
    }
}

/// Logging level and machine-readable output.
struct OutputOptions: ParsableArguments {
    @Flag(name: .long, help: "Print one JSON object instead of text.")
    var json = false

    @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: Logger.Level = .warning

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

extension Logger.Level: @retroactive ExpressibleByArgument {}

/// Turns a library error into the message and exit code the user sees.
func userFacing(_ error: any Error) -> any Error {
    switch error {
    case let error as AgentClientError: return ValidationFailure(error.description)
    case let error as SecurityError: return ValidationFailure(error.message)
    case let error as RigSession.CommitError: return ValidationFailure(error.description)
    case let error as FrameRatePlanner.PlanError: return ValidationFailure(error.description)
    case let error as StorageError: return ValidationFailure(error.description)
    default: return error
    }
}

/// An error printed as `Error: message` with exit status 1.
struct ValidationFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
