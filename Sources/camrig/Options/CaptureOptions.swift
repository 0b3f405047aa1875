import ArgumentParser
import CamRigStorage
import Foundation

/// Where captures and their catalog live.
struct CaptureOptions: ParsableArguments {
    @Option(
        name: .long,
        help: ArgumentHelp("Captures directory: one folder per capture and catalog.sqlite (default $CAMRIG_CAPTURES or ./captures).", valueName: "dir")
    )
    var out: String?

    func store() throws -> CaptureStore {
        let path = out ?? ProcessInfo.processInfo.environment["CAMRIG_CAPTURES"] ?? "captures"
        return try CaptureStore(root: URL(fileURLWithPath: path))
    }
}
