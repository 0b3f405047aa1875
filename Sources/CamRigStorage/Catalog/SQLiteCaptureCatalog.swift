import Foundation
import GRDB

/// The capture catalog in one SQLite file, `catalog.sqlite` in a captures directory (GRDB): the default,
/// for one rig.
///
/// GRDB's migrator applies `CatalogSQL.migrations` and records them by name, so a catalog made by an
/// earlier CamRig is migrated in place. Queries run on GRDB's own serial queue: callers in Swift
/// concurrency never block on the disk.
public final class SQLiteCaptureCatalog: CaptureCatalog {
    /// The catalog's file name in a captures directory.
    public static let fileName = "catalog.sqlite"

    private let database: DatabaseQueue
    /// The file's path.
    public let path: String

    /// The file's path.
    public var location: String { path }

    /// Opens (creating and migrating as needed) the catalog at `path`.
    public init(path: String) throws {
        self.path = path
        do {
            var configuration = Configuration()
            // `camrig captures list` may read while `camrig serve` writes: wait for the other's transaction.
            configuration.busyMode = .timeout(10)
            database = try DatabaseQueue(path: path, configuration: configuration)
            var migrator = DatabaseMigrator()
            for migration in CatalogSQL.migrations {
                migrator.registerMigration(migration.name) { db in
                    for statement in migration.statements { try db.execute(sql: statement) }
                }
            }
            try migrator.migrate(database)
        } catch {
            throw StorageError(
                "cannot open the capture catalog \(path): \(Self.reason(error)); check the file and its folder's permissions, or move the file away to start a new catalog")
        }
    }

    /// Opens the catalog of the captures directory `directory` (`catalog.sqlite` in it).
    public convenience init(directory: URL) throws {
        try self.init(path: directory.appendingPathComponent(Self.fileName).path)
    }

    public func record(_ entry: CaptureCatalogEntry) async throws {
        let statement = CatalogSQL.upsert(entry)
        do {
            try await database.write { db in try db.execute(sql: statement.sql, arguments: Self.arguments(statement)) }
        } catch {
            throw StorageError("cannot record capture \(entry.id) in the catalog \(path): \(Self.reason(error))")
        }
    }

    public func list(_ query: CaptureCatalogQuery) async throws -> [CaptureCatalogEntry] {
        try await fetch(CatalogSQL.list(query))
    }

    public func unfinished(rig: String) async throws -> [CaptureCatalogEntry] {
        try await fetch(CatalogSQL.unfinished(rig: rig))
    }

    public func entry(_ id: String) async throws -> CaptureCatalogEntry? {
        try await CatalogSQL.entry(id) { try await fetch($0) }
    }

    public func reserve(id: String, kind: String, created: String, rig: String, store: String) async throws -> Bool {
        let statement = CatalogSQL.reserve(CaptureCatalogEntry(reservedID: id, kind: kind, created: created, rig: rig, store: store))
        do {
            return try await database.write { db in
                try String.fetchOne(db, sql: statement.sql, arguments: Self.arguments(statement)) != nil
            }
        } catch {
            throw StorageError("cannot reserve capture id \(id) in the catalog \(path): \(Self.reason(error))")
        }
    }

    public func close() async {
        try? database.close()
    }

    private func fetch(_ statement: CatalogSQL.Statement) async throws -> [CaptureCatalogEntry] {
        do {
            return try await database.read { db in
                try Array(Row.fetchCursor(db, sql: statement.sql, arguments: Self.arguments(statement)).map { try CaptureCatalogEntry($0) })
            }
        } catch {
            throw StorageError("cannot read the capture catalog \(path): \(Self.reason(error))")
        }
    }

    private static func arguments(_ statement: CatalogSQL.Statement) -> StatementArguments {
        StatementArguments(
            statement.bindings.map { value -> (any DatabaseValueConvertible)? in
                switch value {
                case .text(let text): text
                case .integer(let integer): integer
                }
            })
    }

    /// SQLite's own words (GRDB's description adds the statement and its arguments).
    static func reason(_ error: any Error) -> String {
        if let error = error as? DatabaseError { return error.message ?? "\(error.resultCode)" }
        return "\(error)"
    }
}

extension Row: CatalogRow {
    func text(_ index: Int) throws -> String { try decode(String.self, atIndex: index) }
    func integer(_ index: Int) throws -> Int64 { try decode(Int64.self, atIndex: index) }
}
