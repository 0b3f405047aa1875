import CamRigCapture
import Foundation

/// The catalog of captures: one row per capture, so that `camrig captures list` needs no directory walk
/// and survives moved or pruned frames.
///
/// Two implementations with one schema, one list of migrations and the same SQL (`CatalogSQL`):
/// `SQLiteCaptureCatalog`, `catalog.sqlite` in a captures directory (the default), and
/// `PostgresCaptureCatalog`, one catalog that the coordinators of several rigs write at once. Every
/// opener closes what it opened (`close()`).
public protocol CaptureCatalog: Sendable, CustomStringConvertible {
    /// Where the catalog is, for messages: a file's path, or `postgres://USER@HOST:PORT/DB` (never a
    /// password).
    var location: String { get }

    /// Adds a capture, or replaces the row with its id.
    func record(_ entry: CaptureCatalogEntry) async throws

    /// Captures newest first (by `created`, then id), of one rig or of every rig, at most `limit`.
    func list(_ query: CaptureCatalogQuery) async throws -> [CaptureCatalogEntry]

    /// Captures of rig `rig` (and those recorded before captures had a rig) that a coordinator left
    /// `in_progress` or `offloading`, or whose agents still hold results of them; oldest first.
    func unfinished(rig: String) async throws -> [CaptureCatalogEntry]

    /// The capture with this id, or the only one whose id starts with it; `nil` when there is none or
    /// the prefix is ambiguous.
    func entry(_ id: String) async throws -> CaptureCatalogEntry?

    /// Takes `id` for a capture about to begin: lists it `in_progress` (a placeholder its `started` or
    /// `finish` replaces) and returns true, or returns false when a capture of any rig has the id
    /// already. Two coordinators sharing a catalog never both get one id.
    func reserve(id: String, kind: String, created: String, rig: String, store: String) async throws -> Bool

    /// Lets go of the catalog's connections (and, for PostgreSQL, ends its client's task). Calls after
    /// it fail.
    func close() async
}

extension CaptureCatalog {
    public typealias Entry = CaptureCatalogEntry
    public typealias Query = CaptureCatalogQuery

    public var description: String { location }

    /// Every capture of every rig, newest first.
    public func list() async throws -> [CaptureCatalogEntry] { try await list(CaptureCatalogQuery()) }
}

/// Which captures `CaptureCatalog.list` returns.
public struct CaptureCatalogQuery: Sendable, Equatable {
    /// Only this rig's captures; `nil`: every rig's.
    public var rig: String?
    /// At most this many (the newest); `nil`: all.
    public var limit: Int?

    public init(rig: String? = nil, limit: Int? = nil) {
        self.rig = rig
        self.limit = limit
    }
}

/// One capture as the catalog lists it.
public struct CaptureCatalogEntry: Codable, Sendable, Equatable {
    public var id: String
    public var kind: String
    /// ISO 8601, UTC (the manifest's `created`).
    public var created: String
    public var sessionId: String
    /// The capture's folder, relative to its store (its captures directory).
    public var directory: String
    public var cameras: Int
    public var sets: Int
    public var completeSets: Int
    public var incompleteSets: Int
    public var framesDelivered: Int
    public var droppedFrames: Int
    public var skewP50Ns: Int64
    public var skewMaxNs: Int64
    /// `in_progress`, `offloading`, `complete` or `incomplete` (the manifest's `state`).
    public var state: String
    /// Results its agents still hold: missing ones that may be collected, and stored ones not yet
    /// acknowledged. Results known lost are in the manifest, not counted here.
    public var missing: Int
    /// The rig whose coordinator made the capture; empty for captures recorded before catalogs had rigs.
    public var rig: String
    /// Where the capture's files are: a captures directory's absolute path or an `s3://BUCKET/PREFIX`
    /// URL; empty for captures recorded before catalogs said.
    public var store: String

    public init(manifest: CaptureManifest, directory: String, rig: String, store: String) {
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
        self.rig = rig
        self.store = store
    }

    /// The placeholder `reserve` lists: nothing captured yet, `in_progress`.
    init(reservedID id: String, kind: String, created: String, rig: String, store: String) {
        self.id = id
        self.kind = kind
        self.created = created
        sessionId = ""
        directory = id
        cameras = 0
        sets = 0
        completeSets = 0
        incompleteSets = 0
        framesDelivered = 0
        droppedFrames = 0
        skewP50Ns = 0
        skewMaxNs = 0
        state = CaptureManifest.State.inProgress.rawValue
        missing = 0
        self.rig = rig
        self.store = store
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
        case state, missing, rig, store
    }
}

/// A storage failure, saying which file or catalog, why, and what to do.
public struct StorageError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
