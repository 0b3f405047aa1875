import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigStorage
import Foundation
import Logging

/// Where captures and their catalog live.
struct CaptureOptions: ParsableArguments {
    @Option(
        name: .long,
        help: ArgumentHelp("Captures directory: one folder per capture and catalog.sqlite (default $CAMRIG_CAPTURES or ./captures).", valueName: "dir")
    )
    var out: String?

    /// The catalog's entry for capture `id` (or a unique prefix of it), or an error saying how to find one.
    static func entry(_ id: String, in store: CaptureStore) throws -> CaptureCatalog.Entry {
        guard let entry = try store.catalog.entry(id) else {
            throw CommandFailure("no capture '\(id)' in \(store.catalog.path); `camrig captures list` shows them")
        }
        return entry
    }

    func store() throws -> CaptureStore {
        let path = out ?? ProcessInfo.processInfo.environment["CAMRIG_CAPTURES"] ?? "captures"
        return try CaptureStore(root: URL(fileURLWithPath: path))
    }

    /// Collects into `store` the results earlier captures lack from the agents of `pool` that hold them
    /// (an agent back after a cut or a restart), and says so on standard error. A failure is logged: it
    /// never stops the capture about to be made.
    func collectEarlier(pool: AgentPool, store: CaptureStore, logger: Logger) async {
        do {
            let report = try await MissingResultCollector(pool: pool, sink: store, logger: logger).collect()
            for capture in report.captures where !capture.collected.isEmpty || capture.resumed {
                let what = capture.collected.isEmpty ? "" : "collected \(capture.collected.count) result(s) its agents still held; "
                FileHandle.standardError.write(Data("earlier capture \(capture.id): \(what)now \(capture.state)\n".utf8))
            }
        } catch {
            logger.warning("cannot collect the results earlier captures lack", metadata: ["error": "\(error)"])
        }
    }
}
