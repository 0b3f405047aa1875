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
        help: ArgumentHelp("Captures directory: one folder per capture, and catalog.sqlite unless --catalog names another (default $CAMRIG_CAPTURES or ./captures).", valueName: "dir")
    )
    var out: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "The capture catalog, when several rigs share one: postgres://USER:PASSWORD@HOST:PORT/DB (optionally ?sslmode=disable|prefer|require|verify-full). Default $CAMRIG_CATALOG; without either, catalog.sqlite in the captures directory.",
            valueName: "url"))
    var catalog: String?

    /// --catalog, else $CAMRIG_CATALOG; nil for the SQLite catalog in the captures directory.
    var catalogURL: String? {
        let url = catalog ?? ProcessInfo.processInfo.environment["CAMRIG_CATALOG"]
        return url?.isEmpty == false ? url : nil
    }

    /// The captures directory: --out, else $CAMRIG_CAPTURES, else ./captures.
    var directory: URL {
        URL(fileURLWithPath: out ?? ProcessInfo.processInfo.environment["CAMRIG_CAPTURES"] ?? "captures")
    }

    /// The catalog's entry for capture `id` (or a unique prefix of it), or an error saying how to find one.
    static func entry(_ id: String, in store: CaptureStore) async throws -> CaptureCatalog.Entry {
        guard let entry = try await store.catalog.entry(id) else {
            throw CommandFailure("no capture '\(id)' in the catalog \(store.catalog.location); `camrig captures list` shows them")
        }
        return entry
    }

    /// Runs `body` with the captures directory and its catalog, as rig `rig`'s store; the catalog is
    /// closed after it.
    func withStore<T>(rig: String = CaptureNaming.hostRig, logger: Logger, _ body: (CaptureStore) async throws -> T) async throws -> T {
        let store = try await CaptureStore.connect(root: directory, catalogURL: catalogURL, rig: rig, logger: logger)
        do {
            let result = try await body(store)
            await store.disconnect()
            return result
        } catch {
            await store.disconnect()
            throw error
        }
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
