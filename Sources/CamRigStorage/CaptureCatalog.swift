import CamRigCapture
import Foundation
import GRDB

/// The SQLite catalog of every capture under a captures directory (`catalog.sqlite`), so that
/// `camrig captures list` needs no directory walk and survives moved or pruned frames.
public final class CaptureCatalog: Sendable {
    /// One capture as the catalog lists it.
    public struct Entry: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
        public static let databaseTableName = "capture"

        public var id: String
        public var kind: String
        public var created: String
        public var sessionId: String
        /// Relative to the captures directory.
        public var directory: String
        public var cameras: Int
        public var sets: Int
        public var completeSets: Int
        public var incompleteSets: Int
        public var framesDelivered: Int
        public var droppedFrames: Int
        public var skewP50Ns: Int64
        public var skewMaxNs: Int64
        /// `in_progress`, `complete` or `incomplete` (the manifest's `state`).
        public var state: String
        /// Results its agents still hold: missing ones that may be collected, and stored ones not yet
        /// acknowledged. Results known lost are in the manifest, not counted here.
        public var missing: Int

        public init(manifest: CaptureManifest, directory: String) {
            id = manifest.id
            kind = manifest.kind
            created = manifest.created
            sessionId = manifest.sessionId
            self.directory = directory
            cameras = manifest.cameras.count
            sets = manifest.summary.sets
            completeSets = manifest.summary.completeSets
            incompleteSets = manifest.summary.incompleteSets
            framesDelivered = manifest.summary.framesDelivered
            droppedFrames = manifest.summary.droppedFrames
            skewP50Ns = manifest.summary.skewP50Ns
            skewMaxNs = manifest.summary.skewMaxNs
            state = (manifest.state ?? .complete).rawValue
            missing = manifest.collectable.count + (manifest.unacknowledged?.count ?? 0) + manifest.awaitingFinals.count
        }

        enum CodingKeys: String, CodingKey {
            case id, kind, created, directory, cameras, sets
            case sessionId = "session_id"
            case completeSets = "complete_sets"
            case incompleteSets = "incomplete_sets"
            case framesDelivered = "frames_delivered"
            case droppedFrames = "dropped_frames"
            case skewP50Ns = "skew_p50_ns"
            case skewMaxNs = "skew_max_ns"
            case state, missing
        }
    }

    private let database: DatabaseQueue
    public let path: String

    /// Opens (creating and migrating as needed) the catalog at `path`.
    public init(path: String) throws {
        self.path = path
        do {
            database = try DatabaseQueue(path: path)
            var migrator = DatabaseMigrator()
            migrator.registerMigration("v1") { db in
                try db.create(table: "capture") { table in
                    table.primaryKey("id", .text)
                    table.column("kind", .text).notNull()
                    table.column("created", .text).notNull()
                    table.column("session_id", .text).notNull()
                    table.column("directory", .text).notNull()
                    table.column("cameras", .integer).notNull()
                    table.column("sets", .integer).notNull()
                    table.column("complete_sets", .integer).notNull()
                    table.column("incomplete_sets", .integer).notNull()
                    table.column("frames_delivered", .integer).notNull()
                    table.column("dropped_frames", .integer).notNull()
                    table.column("skew_p50_ns", .integer).notNull()
                    table.column("skew_max_ns", .integer).notNull()
                }
            }
            migrator.registerMigration("v2: state and missing results") { db in
                try db.alter(table: "capture") { table in
                    table.add(column: "state", .text).notNull().defaults(to: "complete")
                    table.add(column: "missing", .integer).notNull().defaults(to: 0)
                }
            }
            try migrator.migrate(database)
        } catch {
            throw StorageError("cannot open the capture catalog \(path): \(error)")
        }
    }

    /// Adds or replaces a capture.
    public func record(_ entry: Entry) throws {
        do {
            try database.write { db in try entry.save(db) }
        } catch {
            throw StorageError("cannot record capture \(entry.id) in \(path): \(error)")
        }
    }

    /// Every capture, newest first.
    public func list() throws -> [Entry] {
        do {
            return try database.read { db in try Entry.order(Column("created").desc, Column("id").desc).fetchAll(db) }
        } catch {
            throw StorageError("cannot read the capture catalog \(path): \(error)")
        }
    }

    /// Captures a coordinator left `in_progress`, or whose agents still hold results of them; oldest first.
    public func unfinished() throws -> [Entry] {
        do {
            return try database.read { db in
                try Entry.filter(Column("state") == "in_progress" || Column("state") == "offloading" || Column("missing") > 0).order(Column("created"), Column("id")).fetchAll(db)
            }
        } catch {
            throw StorageError("cannot read the capture catalog \(path): \(error)")
        }
    }

    /// The capture with this id (or the only one whose id starts with it).
    public func entry(_ id: String) throws -> Entry? {
        let all = try list()
        if let exact = all.first(where: { $0.id == id }) { return exact }
        let matches = all.filter { $0.id.hasPrefix(id) }
        return matches.count == 1 ? matches[0] : nil
    }
}

/// A storage failure, saying which file and why.
public struct StorageError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
