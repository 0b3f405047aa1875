import CamRigStorage
import Foundation
import GRDB
import Testing

/// The SQLite catalog (`catalog.sqlite` in a captures directory): what every catalog does, and catalogs
/// made by earlier CamRig versions migrated in place.
@Suite("SQLite capture catalog", .timeLimit(.minutes(2)))
struct SQLiteCaptureCatalogTests {
    /// A new catalog in a new directory; removed after `body`.
    static func withCatalog(_ body: (SQLiteCaptureCatalog, URL) async throws -> Void) async throws {
        let directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("camrig-catalog-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let catalog = try SQLiteCaptureCatalog(directory: directory)
        do {
            try await body(catalog, directory)
        } catch {
            await catalog.close()
            throw error
        }
        await catalog.close()
    }

    @Test("a reserved id is taken for every rig until the capture's rows replace the placeholder")
    func reserve() async throws {
        try await Self.withCatalog { catalog, _ in try await CatalogChecks.reserve(catalog, namespace: "x") }
    }

    @Test("captures list newest first, of every rig or of one, at most a limit")
    func list() async throws {
        try await Self.withCatalog { catalog, _ in try await CatalogChecks.list(catalog, namespace: "x") }
    }

    @Test("unfinished captures are this rig's (and those from before rigs), oldest first")
    func unfinished() async throws {
        try await Self.withCatalog { catalog, _ in try await CatalogChecks.unfinished(catalog, namespace: "x", legacy: true) }
    }

    @Test("a capture is found by its id or a unique prefix of it")
    func lookup() async throws {
        try await Self.withCatalog { catalog, _ in try await CatalogChecks.lookup(catalog, namespace: "x") }
    }

    @Test("two coordinators writing one catalog file at once (2 × 200 captures in the same seconds) give no id twice and lose no row")
    func twoRigs() async throws {
        try await Self.withCatalog { catalog, directory in
            let other = try SQLiteCaptureCatalog(directory: directory)
            do {
                try await CatalogChecks.twoRigs(north: catalog, south: other, namespace: "x", count: 200)
            } catch {
                await other.close()
                throw error
            }
            await other.close()
        }
    }

    @Test("a catalog made by CamRig before v3 (GRDB's v1 and v2) keeps its rows and gains rig and store")
    func migratesVersionTwo() async throws {
        let directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("camrig-catalog-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("catalog.sqlite").path
        // The file as the earlier catalog left it: GRDB's schema builder's table and its migrator's record.
        let old = try DatabaseQueue(path: path)
        try await old.write { db in
            try db.execute(
                sql: """
                    CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY);
                    INSERT INTO grdb_migrations VALUES ('v1'), ('v2: state and missing results');
                    CREATE TABLE "capture" ("id" TEXT PRIMARY KEY NOT NULL, "kind" TEXT NOT NULL, "created" TEXT NOT NULL,
                        "session_id" TEXT NOT NULL, "directory" TEXT NOT NULL, "cameras" INTEGER NOT NULL, "sets" INTEGER NOT NULL,
                        "complete_sets" INTEGER NOT NULL, "incomplete_sets" INTEGER NOT NULL, "frames_delivered" INTEGER NOT NULL,
                        "dropped_frames" INTEGER NOT NULL, "skew_p50_ns" INTEGER NOT NULL, "skew_max_ns" INTEGER NOT NULL,
                        "state" TEXT NOT NULL DEFAULT 'complete', "missing" INTEGER NOT NULL DEFAULT 0);
                    INSERT INTO capture VALUES ('20261120-101500-photo', 'photo', '2026-11-20T10:15:00.123Z', 's-1', '20261120-101500-photo',
                        3, 1, 1, 0, 3, 0, 1200, 2400, 'complete', 0);
                    INSERT INTO capture VALUES ('20261121-090000-recording', 'recording', '2026-11-21T09:00:00.000Z', 's-2',
                        '20261121-090000-recording', 2, 60, 59, 1, 119, 1, 800, 5000, 'in_progress', 2);
                    """)
        }
        try old.close()

        let catalog = try SQLiteCaptureCatalog(path: path)
        let rows = try await catalog.list()
        #expect(rows.map(\.id) == ["20261121-090000-recording", "20261120-101500-photo"])
        #expect(rows.allSatisfy { $0.rig.isEmpty && $0.store.isEmpty })
        #expect(rows[0].sets == 60 && rows[0].incompleteSets == 1 && rows[0].droppedFrames == 1 && rows[0].skewMaxNs == 5000 && rows[0].missing == 2)
        #expect(try await catalog.unfinished(rig: "north").map(\.id) == ["20261121-090000-recording"], "an old capture left unfinished is still recovered")
        #expect(try await catalog.reserve(id: "20261120-101500-photo", kind: "photo", created: "2026-11-26T00:00:00.000Z", rig: "north", store: "/srv") == false)
        try await catalog.record(CatalogChecks.entry("20261126-053000-photo", rig: "north", created: "2026-11-26T05:30:00.000Z"))
        #expect(try await catalog.list(CaptureCatalog.Query(rig: "north")).map(\.id) == ["20261126-053000-photo"])
        await catalog.close()

        // v3 is recorded as GRDB records its migrations: opened again, nothing is migrated twice.
        let reopened = try SQLiteCaptureCatalog(path: path)
        #expect(try await reopened.list().count == 3)
        await reopened.close()
        let migrations = try DatabaseQueue(path: path)
        #expect(try await migrations.read { try String.fetchAll($0, sql: "SELECT identifier FROM grdb_migrations ORDER BY identifier") }
            == ["v1", "v2: state and missing results", "v3: rig and store"])
        try migrations.close()
    }

    @Test("a file that is not a catalog is refused, naming it and saying what to do")
    func unreadable() throws {
        let path = NSTemporaryDirectory() + "camrig-catalog-\(UUID().uuidString).sqlite"
        try Data(repeating: 0x41, count: 4096).write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let error = #expect(throws: StorageError.self) { try SQLiteCaptureCatalog(path: path) }
        #expect(error?.description.hasPrefix("cannot open the capture catalog \(path): ") == true)
        #expect(error?.description.contains("move the file away") == true)
    }
}
