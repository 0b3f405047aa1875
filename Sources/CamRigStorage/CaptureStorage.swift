import CamRigCapture
import CamRigObjectStore
import Foundation
import Logging

/// Where a rig keeps its captures and lists them: a local folder (`CaptureStore`), or an S3-compatible
/// object store (`ObjectCaptureStore`), each with its catalog. What the command line and the service need
/// beyond a sink: the catalog, and a capture's manifest and files read back.
public protocol CaptureStorage: CaptureSink {
    var catalog: any CaptureCatalog { get }
    /// The rig whose captures this store writes.
    var rig: String { get }
    /// Where the captures are, as the catalog's `store` says it: a folder's absolute path, or
    /// `s3://BUCKET/PREFIX`.
    var storeURL: String { get }
    /// Whether `entry`'s files are in this store.
    func holds(_ entry: CaptureCatalogEntry) -> Bool
    /// The capture's manifest, read from the store.
    func manifest(of entry: CaptureCatalogEntry) async throws -> CaptureManifest
    /// The capture as a sink names it, to read its files (`readFile`) or collect for it.
    func handle(of entry: CaptureCatalogEntry) throws -> CaptureHandle
    /// Lets go of the store's connections and closes the catalog.
    func disconnect() async
}

extension CaptureStorage {
    /// The catalog's entry for capture `id` (or a unique prefix of it) held by this store, or an error
    /// saying where else it is, or how to find one.
    public func entry(_ id: String) async throws -> CaptureCatalogEntry {
        guard let entry = try await catalog.entry(id) else {
            throw StorageError("no capture '\(id)' in the catalog \(catalog.location); `camrig captures list` shows them")
        }
        guard holds(entry) else {
            throw StorageError(
                "capture \(entry.id) is rig \(entry.rig.isEmpty ? "?" : entry.rig)'s, stored in \(entry.store), not in \(storeURL): run the command with --out \(entry.store), or on that rig's coordinator")
        }
        return entry
    }
}

extension CaptureStore: CaptureStorage {
    public var storeURL: String { location }

    public func handle(of entry: CaptureCatalogEntry) throws -> CaptureHandle {
        guard let kind = CaptureKind(rawValue: entry.kind) else { throw StorageError("capture \(entry.id) is of an unknown kind \(entry.kind)") }
        return CaptureHandle(id: entry.id, kind: kind, location: root.appendingPathComponent(entry.directory))
    }
}

extension ObjectCaptureStore: CaptureStorage {
    public func handle(of entry: CaptureCatalogEntry) throws -> CaptureHandle {
        guard let kind = CaptureKind(rawValue: entry.kind) else { throw StorageError("capture \(entry.id) is of an unknown kind \(entry.kind)") }
        return handle(entry.id, kind: kind)
    }

    /// Lets go of the HTTP client and closes the catalog.
    public func disconnect() async {
        await shutdown()
        await catalog.close()
    }
}

/// Opens the store `out` names.
public enum CaptureStorageOpener {
    /// The store `out` names, connected: `s3://BUCKET/PREFIX` (with `settings` over the environment's
    /// AWS_* variables; the bucket made if missing and writing under the prefix checked), or a captures
    /// folder. Its catalog is `catalogURL` (`postgres://…`), else `catalog.sqlite` in the folder, or in
    /// `state` for an object store. An object store keeps its local work (locks, spilled frames) in
    /// `state` too.
    public static func open(
        _ out: String, catalogURL: String?, state: URL, rig: String, settings: ObjectStoreLocation.Settings = ObjectStoreLocation.Settings(),
        logger: Logger
    ) async throws -> any CaptureStorage {
        guard ObjectStoreLocation.isObjectStoreURL(out) else {
            return try await CaptureStore.connect(root: URL(fileURLWithPath: out), catalogURL: catalogURL, rig: rig, logger: logger)
        }
        let location = try ObjectStoreLocation.parse(out, settings: settings)
        do {
            try FileManager.default.createDirectory(at: state, withIntermediateDirectories: true)
        } catch {
            throw StorageError("cannot create the local state folder \(state.path) (--state): \(error.localizedDescription)")
        }
        let catalog: any CaptureCatalog
        if let catalogURL, !catalogURL.isEmpty {
            guard PostgresCatalogAddress.isPostgres(catalogURL) else {
                throw StorageError("--catalog \(PostgresCatalogAddress.redacted(catalogURL)) is not a PostgreSQL URL: give postgres://USER:PASSWORD@HOST:PORT/DB")
            }
            catalog = try await PostgresCaptureCatalog(url: catalogURL, logger: logger)
        } else {
            catalog = try SQLiteCaptureCatalog(directory: state)
        }
        do {
            let store = try ObjectCaptureStore(
                location: location, catalog: catalog, rig: rig, scratch: state.appendingPathComponent("object-store"),
                agentCredentials: settings.agentCredentials())
            do {
                try await store.prepare()
            } catch {
                await store.shutdown()
                throw error
            }
            return store
        } catch {
            await catalog.close()
            throw error
        }
    }
}
