import CamRigTestSupport
import Foundation
import Logging
import Testing

@testable import CamRigStorage

/// The PostgreSQL catalog against a real server (`scripts/postgres`, started once for the suite): what
/// every catalog does, two coordinators writing it at once, migrations run once, and errors that name
/// the catalog without its password.
@Suite("PostgreSQL capture catalog", .postgresServer, .timeLimit(.minutes(2)))
struct PostgresCaptureCatalogTests {
    /// Warnings and worse: the pool's info lines on every refused connection are what `serverGone` causes.
    static let logger = {
        var logger = Logger(label: "camrig.test.catalog")
        logger.logLevel = .warning
        return logger
    }()

    /// A catalog on the suite's server, closed after `body`; and a namespace of its own for ids and rigs.
    static func withCatalog(_ body: (PostgresCaptureCatalog, String) async throws -> Void) async throws {
        let server = try #require(PostgresTestServer.current, "the suite's PostgreSQL server did not start")
        let catalog = try await PostgresCaptureCatalog(url: server.url, logger: logger)
        do {
            try await body(catalog, String(UUID().uuidString.prefix(8)).lowercased())
        } catch {
            await catalog.close()
            throw error
        }
        await catalog.close()
    }

    @Test("a reserved id is taken for every rig until the capture's rows replace the placeholder")
    func reserve() async throws {
        try await Self.withCatalog { catalog, namespace in try await CatalogChecks.reserve(catalog, namespace: namespace) }
    }

    @Test("captures list newest first, of every rig or of one, at most a limit")
    func list() async throws {
        try await Self.withCatalog { catalog, namespace in try await CatalogChecks.list(catalog, namespace: namespace) }
    }

    @Test("unfinished captures are this rig's, oldest first")
    func unfinished() async throws {
        try await Self.withCatalog { catalog, namespace in try await CatalogChecks.unfinished(catalog, namespace: namespace, legacy: false) }
    }

    @Test("a capture is found by its id or a unique prefix of it")
    func lookup() async throws {
        try await Self.withCatalog { catalog, namespace in try await CatalogChecks.lookup(catalog, namespace: namespace) }
    }

    @Test("two coordinators (rigs north and south) reserving and recording 2 × 200 captures in the same seconds at once: no id twice, no row lost, both rigs seen by each")
    func twoRigs() async throws {
        try await Self.withCatalog { north, namespace in
            let server = try #require(PostgresTestServer.current)
            let south = try await PostgresCaptureCatalog(url: server.url, logger: Self.logger)
            do {
                try await CatalogChecks.twoRigs(north: north, south: south, namespace: namespace, count: 200)
            } catch {
                await south.close()
                throw error
            }
            await south.close()
        }
    }

    @Test("coordinators opening a new catalog at once wait for one another: each migration runs once")
    func migrationsOnce() async throws {
        // A server of its own: the suite's has been migrated by the other tests.
        let server = try await PostgresTestServer.start()
        do {
            let catalogs = try await withThrowingTaskGroup(of: PostgresCaptureCatalog.self) { group in
                for _ in 0..<4 { group.addTask { try await PostgresCaptureCatalog(url: server.url, logger: Self.logger) } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            let applied = catalogs.flatMap(\.appliedMigrations)
            #expect(applied.sorted() == CatalogSQL.migrations.map(\.name).sorted(), "migrations applied: \(catalogs.map(\.appliedMigrations))")
            #expect(catalogs.filter { !$0.appliedMigrations.isEmpty }.count == 1, "one opener migrates, the others find it done")
            try await CatalogChecks.reserve(catalogs[3], namespace: "m")
            let reopened = try await PostgresCaptureCatalog(url: server.url, logger: Self.logger)
            #expect(reopened.appliedMigrations.isEmpty)
            #expect(try await reopened.entry("m-20261126-053000-photo")?.rig == "north-m")
            for catalog in catalogs + [reopened] { await catalog.close() }
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }

    @Test("a server that goes away: an operation fails within seconds, naming the catalog and what to do; back, the catalog works again")
    func serverGone() async throws {
        let server = try await PostgresTestServer.start()
        do {
            let catalog = try await PostgresCaptureCatalog(url: server.url, logger: Self.logger)
            #expect(try await catalog.reserve(id: "gone-1", kind: "photo", created: "2026-11-26T05:30:00.000Z", rig: "north", store: "/srv"))
            try await server.pause()
            let began = ContinuousClock.now
            let error = await #expect(throws: StorageError.self) {
                try await catalog.reserve(id: "gone-2", kind: "photo", created: "2026-11-26T05:30:00.000Z", rig: "north", store: "/srv")
            }
            #expect(ContinuousClock.now - began < .seconds(20), "the pool's own minute of retries was waited for")
            let message = error?.description ?? ""
            #expect(message.hasPrefix("cannot reserve capture id gone-2 in the catalog \(catalog.location): "), "\(message)")
            #expect(message.contains("is PostgreSQL running at 127.0.0.1:"), "\(message)")
            try await server.resume()
            #expect(try await catalog.reserve(id: "gone-2", kind: "photo", created: "2026-11-26T05:30:00.000Z", rig: "north", store: "/srv"))
            await catalog.close()
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }

    @Test("a wrong password is refused with PostgreSQL's reason and what to do, the password never shown")
    func wrongPassword() async throws {
        let server = try #require(PostgresTestServer.current)
        var address = try PostgresCatalogAddress(url: server.url)
        address.password = "not-the-password-\(UUID().uuidString.prefix(6))"
        let error = await #expect(throws: StorageError.self) { try await PostgresCaptureCatalog(address, logger: Self.logger) }
        let message = error?.description ?? ""
        #expect(message.hasPrefix("cannot open the capture catalog postgres://camrig@127.0.0.1:\(address.port)/camrig: PostgreSQL says: "))
        #expect(message.contains("password authentication failed") && message.contains("28P01"))
        #expect(message.contains("check the user and password in --catalog"))
        let realPassword = try #require(try PostgresCatalogAddress(url: server.url).password)
        #expect(!message.contains(address.password ?? "") && !message.contains(realPassword))
    }

    @Test("the catalog's connections end with close(): queries after it fail")
    func close() async throws {
        let server = try #require(PostgresTestServer.current)
        let catalog = try await PostgresCaptureCatalog(url: server.url, logger: Self.logger)
        _ = try await catalog.list(CaptureCatalog.Query(limit: 1))
        await catalog.close()
        await #expect(throws: StorageError.self) { try await catalog.list(CaptureCatalog.Query(limit: 1)) }
    }

    @Test("a rig's catalog.sqlite imported with `camrig captures import`: listed with the other rig's captures, old rows given the rig and folder, run again it adds nothing, an id another capture holds is reported and left alone")
    func importRigCatalog() async throws {
        try await Self.withCatalog { shared, namespace in
            let server = try #require(PostgresTestServer.current)
            let (west, north) = ("west-\(namespace)", "north-\(namespace)")
            let folder = FileManager.default.temporaryDirectory.appendingPathComponent("camrig-import-\(namespace)")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: folder) }
            // The rig's own catalog: a capture from before catalogs had rigs, one of the rig's, and one whose
            // id the shared catalog already gives to rig north's capture.
            var old = CatalogChecks.entry("\(namespace)-20250101-120000-photo", rig: "", created: "2025-01-01T12:00:00.000Z")
            old.store = ""
            let recent = CatalogChecks.entry("\(namespace)-20261126-100000-record", rig: west, created: "2026-11-26T10:00:00.000Z", state: "offloading", missing: 2)
            let clash = CatalogChecks.entry("\(namespace)-20261126-110000-photo", rig: west, created: "2026-11-26T11:00:00.000Z")
            let local = try SQLiteCaptureCatalog(directory: folder)
            for entry in [old, recent, clash] { try await local.record(entry) }
            await local.close()
            let northCapture = CatalogChecks.entry(clash.id, rig: north, created: clash.created)
            try await shared.record(northCapture)

            func importFolder() async throws -> Executables.Result {
                try await Executables.run("camrig", ["captures", "import", folder.path, "--catalog", server.url, "--rig", west, "--json"])
            }
            let first = try await importFolder()
            #expect(first.status == 1, "an id held by another capture is an error: \(first.stderr)")
            let report = try JSONDecoder().decode(CatalogImportReportJSON.self, from: Data(first.stdout.utf8))
            #expect(report.imported == 2 && report.updated == 0 && report.unchanged == 0)
            #expect(report.conflicts.map(\.id) == [clash.id] && report.conflicts.first?.existing_rig == north)
            #expect(!first.stdout.contains(try #require(try PostgresCatalogAddress(url: server.url).password)))

            let listed = try await shared.list(CaptureCatalog.Query(rig: west))
            #expect(listed.map(\.id) == [recent.id, old.id])
            #expect(listed.last?.rig == west && listed.last?.store == folder.standardizedFileURL.path, "rows without a rig or a folder get --rig and the catalog's folder")
            #expect(listed.first == recent, "a row the rig's catalog says where to find is copied as it is")
            #expect(try await shared.entry(clash.id) == northCapture, "rig north's capture is left alone")

            // Later, the rig's recording finished offloading: imported again, its row is brought up to date.
            var finished = recent
            finished.state = "complete"
            finished.missing = 0
            let again = try SQLiteCaptureCatalog(directory: folder)
            try await again.record(finished)
            await again.close()
            let second = try await importFolder()
            let report2 = try JSONDecoder().decode(CatalogImportReportJSON.self, from: Data(second.stdout.utf8))
            #expect(report2.imported == 0 && report2.updated == 1 && report2.unchanged == 1 && report2.conflicts.count == 1)
            #expect(try await shared.entry(recent.id) == finished)
            #expect(try await shared.list(CaptureCatalog.Query(rig: west)).count == 2, "nothing added twice")

            let text = try await Executables.run("camrig", ["captures", "import", folder.path, "--catalog", server.url, "--rig", west])
            #expect(text.stdout.contains("0 imported, 0 updated, 2 already there"))
            #expect(text.stdout.contains("not imported: \(clash.id)") && text.stdout.contains("rig \(north)"))
            let missing = try await Executables.run("camrig", ["captures", "import", folder.appendingPathComponent("nothing-here").path, "--catalog", server.url])
            #expect(missing.status != 0 && missing.stderr.contains("there is no"), "\(missing.stderr)")
        }
    }

    /// `camrig captures import --json` as a script reads it.
    struct CatalogImportReportJSON: Decodable {
        struct Conflict: Decodable {
            var id: String
            var existing_rig: String
        }
        var imported: Int
        var updated: Int
        var unchanged: Int
        var conflicts: [Conflict]
    }
}
