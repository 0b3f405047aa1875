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
}
