import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigCapture
import CamRigObjectStore
import CamRigStorage
import Foundation
import Logging

/// Where captures and their catalog live.
struct CaptureOptions: ParsableArguments {
    @Option(
        name: .long,
        help: ArgumentHelp(
            "Where captures go: a directory (one folder per capture, and catalog.sqlite unless --catalog names another), or s3://BUCKET/PREFIX, an S3-compatible store (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, or the rig file's store:). Default $CAMRIG_CAPTURES, else the rig file's store: url, else ./captures.",
            valueName: "dir|s3-url")
    )
    var out: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "With --out s3://…: this machine's folder for the catalog (catalog.sqlite, unless --catalog) and the store's work files. Default $CAMRIG_STATE, else ~/.local/state/camrig.",
            valueName: "dir"))
    var state: String?

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

    /// The catalog's entry for capture `id` (or a unique prefix of it) in `store`, or an error saying how
    /// to find one, or where it is instead.
    static func entry(_ id: String, in store: any CaptureStorage) async throws -> CaptureCatalog.Entry {
        do {
            return try await store.entry(id)
        } catch let error as StorageError {
            throw CommandFailure(error.description)
        }
    }

    /// Where captures go: --out, else $CAMRIG_CAPTURES, else the rig file's `store: url`, else ./captures.
    func address(_ settings: ObjectStoreLocation.Settings) -> String {
        out ?? ProcessInfo.processInfo.environment["CAMRIG_CAPTURES"] ?? settings.url ?? "captures"
    }

    /// This machine's folder for an object store's catalog and work: --state, else $CAMRIG_STATE, else
    /// $XDG_STATE_HOME/camrig (~/.local/state/camrig).
    var stateDirectory: URL {
        let environment = ProcessInfo.processInfo.environment
        if let path = state ?? environment["CAMRIG_STATE"] { return URL(fileURLWithPath: path) }
        let base = environment["XDG_STATE_HOME"].map { URL(fileURLWithPath: $0) }
            ?? FileManager.default.homeDirectoryForCurrentUser.appendingPathComponent(".local/state")
        return base.appendingPathComponent("camrig")
    }

    /// Runs `body` with the store --out names (a captures folder or an object store) and its catalog,
    /// as rig `rig`'s; both are closed after it.
    func withStorage<T>(
        rig: String = CaptureNaming.hostRig, settings: ObjectStoreLocation.Settings = ObjectStoreLocation.Settings(), logger: Logger,
        _ body: (any CaptureStorage) async throws -> T
    ) async throws -> T {
        let store: any CaptureStorage
        do {
            store = try await CaptureStorageOpener.open(
                address(settings), catalogURL: catalogURL, state: stateDirectory, rig: rig, settings: settings, logger: logger)
        } catch let error as ObjectStoreError {
            throw CommandFailure(error.description)
        }
        do {
            let result = try await body(store)
            await store.disconnect()
            return result
        } catch {
            await store.disconnect()
            throw error
        }
    }

    /// Runs `body` with the captures folder and its catalog, as rig `rig`'s store, for commands that read
    /// a capture's files where they lie; the catalog is closed after it.
    func withStore<T>(rig: String = CaptureNaming.hostRig, logger: Logger, _ body: (CaptureStore) async throws -> T) async throws -> T {
        try await withStorage(rig: rig, logger: logger) { store in
            guard let folder = store as? CaptureStore else {
                throw CommandFailure(
                    "this command works on a captures folder; copy the capture out of the store first (e.g. `aws s3 cp --recursive \(store.storeURL)/ID captures/ID`) and give --out captures")
            }
            return try await body(folder)
        }
    }

    /// Collects into `store` the results earlier captures lack from the agents of `pool` that hold them
    /// (an agent back after a cut or a restart), and says so on standard error. A failure is logged: it
    /// never stops the capture about to be made.
    func collectEarlier(pool: AgentPool, store: some CaptureSink, logger: Logger) async {
        do {
            let report = try await StorageWork.collect(store, pool: pool, logger: logger)
            for capture in report.captures where !capture.collected.isEmpty || capture.resumed {
                let what = capture.collected.isEmpty ? "" : "collected \(capture.collected.count) result(s) its agents still held; "
                FileHandle.standardError.write(Data("earlier capture \(capture.id): \(what)now \(capture.state)\n".utf8))
            }
        } catch {
            logger.warning("cannot collect the results earlier captures lack", metadata: ["error": "\(error)"])
        }
    }
}

/// The coordinator's work on a store opened as `any CaptureStorage` (generic types take no existential).
enum StorageWork {
    static func collect(_ store: some CaptureSink, pool: AgentPool, logger: Logger, only captureID: String? = nil) async throws -> CollectionReport {
        try await MissingResultCollector(pool: pool, sink: store, logger: logger).collect(only: captureID)
    }

    static func offload(
        _ store: some CaptureSink, manifest: CaptureManifest, capture: CaptureHandle, pool: AgentPool, logger: Logger, maxBytesPerSecond: UInt64,
        progress: (@Sendable (_ done: UInt64, _ total: UInt64) -> Void)?
    ) async -> OffloadOutcome {
        await RecordingOffload(pool: pool, sink: store, logger: logger, maxBytesPerSecond: maxBytesPerSecond).offload(manifest, capture: capture, progress: progress).1
    }
}
