/// The capture catalog's schema, migrations and queries: one SQL text each, run as written by both
/// SQLite (through GRDB) and PostgreSQL (through postgres-nio).
///
/// The SQL is the part both speak: `TEXT` and `BIGINT` columns (SQLite gives `BIGINT` integer affinity),
/// `INSERT … ON CONFLICT … DO UPDATE/NOTHING` with `excluded`, `RETURNING`, `substr` and `length`. Values
/// are always bound, never written into the text; placeholders are `?`, which `numbered` turns into
/// PostgreSQL's `$1…` (the only difference between the two).
enum CatalogSQL {
    /// One migration: its name (the identifier GRDB's migrator and `camrig_migrations` record) and its
    /// statements, run in order in one transaction.
    struct Migration: Sendable {
        var name: String
        var statements: [String]
    }

    /// Every migration, oldest first. Names are never changed: v1 and v2 are what GRDB's migrator recorded
    /// in catalogs made before the SQL was shared (their tables were made by GRDB's schema builder, whose
    /// `INTEGER` SQLite treats as these `BIGINT`).
    static let migrations: [Migration] = [
        Migration(
            name: "v1",
            statements: [
                """
                CREATE TABLE capture (
                    id TEXT NOT NULL PRIMARY KEY,
                    kind TEXT NOT NULL,
                    created TEXT NOT NULL,
                    session_id TEXT NOT NULL,
                    directory TEXT NOT NULL,
                    cameras BIGINT NOT NULL,
                    sets BIGINT NOT NULL,
                    complete_sets BIGINT NOT NULL,
                    incomplete_sets BIGINT NOT NULL,
                    frames_delivered BIGINT NOT NULL,
                    dropped_frames BIGINT NOT NULL,
                    skew_p50_ns BIGINT NOT NULL,
                    skew_max_ns BIGINT NOT NULL
                )
                """
            ]),
        Migration(
            name: "v2: state and missing results",
            statements: [
                "ALTER TABLE capture ADD COLUMN state TEXT NOT NULL DEFAULT 'complete'",
                "ALTER TABLE capture ADD COLUMN missing BIGINT NOT NULL DEFAULT 0",
            ]),
        Migration(
            name: "v3: rig and store",
            statements: [
                "ALTER TABLE capture ADD COLUMN rig TEXT NOT NULL DEFAULT ''",
                "ALTER TABLE capture ADD COLUMN store TEXT NOT NULL DEFAULT ''",
                // `captures list` newest first, of every rig and of one.
                "CREATE INDEX capture_created ON capture (created, id)",
                "CREATE INDEX capture_rig_created ON capture (rig, created, id)",
            ]),
    ]

    /// The columns every query returns, in `CaptureCatalogEntry`'s order (see `CatalogRow`).
    static let columns =
        "id, kind, created, session_id, directory, cameras, sets, complete_sets, incomplete_sets, frames_delivered, dropped_frames, skew_p50_ns, skew_max_ns, state, missing, rig, store"

    static let upsert = """
        INSERT INTO capture (\(columns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (id) DO UPDATE SET
            kind = excluded.kind, created = excluded.created, session_id = excluded.session_id,
            directory = excluded.directory, cameras = excluded.cameras, sets = excluded.sets,
            complete_sets = excluded.complete_sets, incomplete_sets = excluded.incomplete_sets,
            frames_delivered = excluded.frames_delivered, dropped_frames = excluded.dropped_frames,
            skew_p50_ns = excluded.skew_p50_ns, skew_max_ns = excluded.skew_max_ns, state = excluded.state,
            missing = excluded.missing, rig = excluded.rig, store = excluded.store
        """

    /// Returns the id when it was free (and is now taken), no row when it was taken.
    static let reserve = """
        INSERT INTO capture (\(columns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (id) DO NOTHING RETURNING id
        """

    static let listAll = "SELECT \(columns) FROM capture ORDER BY created DESC, id DESC"
    static let listAllLimited = "SELECT \(columns) FROM capture ORDER BY created DESC, id DESC LIMIT ?"
    static let listRig = "SELECT \(columns) FROM capture WHERE rig = ? ORDER BY created DESC, id DESC"
    static let listRigLimited = "SELECT \(columns) FROM capture WHERE rig = ? ORDER BY created DESC, id DESC LIMIT ?"

    static let unfinished = """
        SELECT \(columns) FROM capture
        WHERE (rig = ? OR rig = '') AND (state = 'in_progress' OR state = 'offloading' OR missing > 0)
        ORDER BY created, id
        """

    static let entry = "SELECT \(columns) FROM capture WHERE id = ?"
    /// Two at most: one is the answer, two say the prefix is ambiguous. (A range over the primary key
    /// would be faster, but PostgreSQL orders text by the database's collation, where a range of
    /// prefixes is not what it is in bytes.)
    static let entriesWithPrefix = "SELECT \(columns) FROM capture WHERE substr(id, 1, length(?)) = ? ORDER BY id LIMIT 2"

    /// A statement and the values bound to its placeholders, in order.
    struct Statement: Sendable {
        var sql: String
        var bindings: [Value]

        /// The text with PostgreSQL's numbered placeholders: the n-th `?` becomes `$n`. No statement here
        /// has a `?` inside a literal.
        var numbered: String {
            var result = ""
            var index = 0
            for character in sql {
                if character == "?" {
                    index += 1
                    result += "$\(index)"
                } else {
                    result.append(character)
                }
            }
            return result
        }
    }

    /// A bound value: the catalog stores only text and integers.
    enum Value: Sendable, Equatable {
        case text(String)
        case integer(Int64)
    }

    static func upsert(_ entry: CaptureCatalogEntry) -> Statement {
        Statement(sql: upsert, bindings: values(of: entry))
    }

    static func reserve(_ entry: CaptureCatalogEntry) -> Statement {
        Statement(sql: reserve, bindings: values(of: entry))
    }

    static func list(_ query: CaptureCatalogQuery) -> Statement {
        switch (query.rig, query.limit) {
        case (nil, nil): Statement(sql: listAll, bindings: [])
        case (nil, let limit?): Statement(sql: listAllLimited, bindings: [.integer(Int64(max(limit, 0)))])
        case (let rig?, nil): Statement(sql: listRig, bindings: [.text(rig)])
        case (let rig?, let limit?): Statement(sql: listRigLimited, bindings: [.text(rig), .integer(Int64(max(limit, 0)))])
        }
    }

    static func unfinished(rig: String) -> Statement { Statement(sql: unfinished, bindings: [.text(rig)]) }

    static func entry(_ id: String) -> Statement { Statement(sql: entry, bindings: [.text(id)]) }

    static func entries(withPrefix prefix: String) -> Statement {
        Statement(sql: entriesWithPrefix, bindings: [.text(prefix), .text(prefix)])
    }

    /// The entry's values in `columns`' order.
    static func values(of entry: CaptureCatalogEntry) -> [Value] {
        [
            .text(entry.id), .text(entry.kind), .text(entry.created), .text(entry.sessionId), .text(entry.directory),
            .integer(Int64(entry.cameras)), .integer(Int64(entry.sets)), .integer(Int64(entry.completeSets)),
            .integer(Int64(entry.incompleteSets)), .integer(Int64(entry.framesDelivered)), .integer(Int64(entry.droppedFrames)),
            .integer(entry.skewP50Ns), .integer(entry.skewMaxNs), .text(entry.state), .integer(Int64(entry.missing)),
            .text(entry.rig), .text(entry.store),
        ]
    }

    /// `entry` as the catalog answers it: the exact id, else the only id with that prefix.
    static func entry(_ id: String, fetch: (Statement) async throws -> [CaptureCatalogEntry]) async throws -> CaptureCatalogEntry? {
        if let exact = try await fetch(entry(id)).first { return exact }
        guard !id.isEmpty else { return nil }
        let matches = try await fetch(entries(withPrefix: id))
        return matches.count == 1 ? matches[0] : nil
    }
}

/// A result row of a catalog query, read by column index in `CatalogSQL.columns`' order.
protocol CatalogRow {
    func text(_ index: Int) throws -> String
    func integer(_ index: Int) throws -> Int64
}

extension CaptureCatalogEntry {
    init(_ row: some CatalogRow) throws {
        id = try row.text(0)
        kind = try row.text(1)
        created = try row.text(2)
        sessionId = try row.text(3)
        directory = try row.text(4)
        cameras = Int(try row.integer(5))
        sets = Int(try row.integer(6))
        completeSets = Int(try row.integer(7))
        incompleteSets = Int(try row.integer(8))
        framesDelivered = Int(try row.integer(9))
        droppedFrames = Int(try row.integer(10))
        skewP50Ns = try row.integer(11)
        skewMaxNs = try row.integer(12)
        state = try row.text(13)
        missing = Int(try row.integer(14))
        rig = try row.text(15)
        store = try row.text(16)
    }
}
