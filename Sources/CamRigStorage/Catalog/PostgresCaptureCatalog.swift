import Foundation
import Logging
import NIOConcurrencyHelpers
import PostgresNIO

/// The capture catalog in PostgreSQL (postgres-nio's `PostgresClient`): one catalog that the coordinators
/// of several rigs write at once, each row saying its rig.
///
/// Opening starts the client, whose `run()` lives in a task this catalog owns until `close()`, and
/// migrates over a connection of its own (so that a server that is down or refuses the login fails at
/// once, with the server's reason, and nothing is left running). The migrations are
/// `CatalogSQL.migrations`, the SQL SQLite runs, recorded in `camrig_migrations` and applied in one
/// transaction holding an advisory lock: coordinators starting at once wait for one another, and each
/// migration runs once. Each operation then waits at most `connectionWait` for a pooled connection.
public final class PostgresCaptureCatalog: CaptureCatalog {
    /// Takes the advisory lock the migrations hold until their transaction ends: its key is `CamRig` in
    /// ASCII, a number no other program using the database is likely to take.
    static let lockMigrations = "SELECT pg_advisory_xact_lock(74085725006183)"

    /// The server, the login and the database.
    public let address: PostgresCatalogAddress
    /// `postgres://USER@HOST:PORT/DB`: never the password.
    public var location: String { address.description }
    private let client: PostgresClient
    private let running: Task<Void, Never>
    private let logger: Logger
    /// The migrations this opener applied (none when the catalog was up to date).
    let appliedMigrations: [String]

    /// Connects to the catalog at `address`, migrating it as needed. The error names the catalog (never
    /// its password), the server's or the network's reason, and what to do.
    public init(_ address: PostgresCatalogAddress, logger: Logger = Logger(label: "camrig.catalog")) async throws {
        var configuration = PostgresClient.Configuration(
            host: address.host, port: address.port, username: address.username, password: address.password, database: address.database,
            tls: Self.clientTLS(address.tls))
        configuration.options.connectTimeout = .seconds(5)
        configuration.options.maximumConnections = 8
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        // Detached: a catalog opened inside a service group's task is not ended by that group's graceful
        // shutdown, only by its opener's `close()`. Awaited until it is about to run the client, and the
        // migrations' round trips come before the first query: the client is running by then.
        let (started, start) = AsyncStream<Void>.makeStream()
        let running = Task.detached {
            start.finish()
            await client.run()
        }
        for await _ in started {}
        do {
            appliedMigrations = try await Self.migrate(address, logger: logger)
        } catch {
            running.cancel()
            await running.value
            throw Self.failure("cannot open the capture catalog \(address)", error, address: address)
        }
        self.address = address
        self.client = client
        self.logger = logger
        self.running = running
    }

    /// Opens the catalog `url` names (`postgres://…`).
    public convenience init(url: String, logger: Logger = Logger(label: "camrig.catalog")) async throws {
        try await self.init(PostgresCatalogAddress(url: url), logger: logger)
    }

    public func record(_ entry: CaptureCatalogEntry) async throws {
        do {
            let logger = self.logger
            try await withPooledConnection { connection in
                _ = try await connection.query(Self.query(CatalogSQL.upsert(entry)), logger: logger).collect()
            }
        } catch {
            throw Self.failure("cannot record capture \(entry.id) in the catalog \(address)", error, address: address)
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
            let logger = self.logger
            return try await withPooledConnection { connection in
                !(try await connection.query(Self.query(statement), logger: logger).collect()).isEmpty
            }
        } catch {
            throw Self.failure("cannot reserve capture id \(id) in the catalog \(address)", error, address: address)
        }
    }

    /// Ends the client's task: its connections are closed when this returns.
    public func close() async {
        running.cancel()
        await running.value
    }

    private func fetch(_ statement: CatalogSQL.Statement) async throws -> [CaptureCatalogEntry] {
        do {
            let logger = self.logger
            return try await withPooledConnection { connection in
                var entries: [CaptureCatalogEntry] = []
                for try await row in try await connection.query(Self.query(statement), logger: logger) {
                    entries.append(try CaptureCatalogEntry(PostgresCatalogRow(cells: Array(row))))
                }
                return entries
            }
        } catch {
            throw Self.failure("cannot read the capture catalog \(address)", error, address: address)
        }
    }

    /// How long an operation waits for a connection of the client's pool. (The pool itself keeps trying a
    /// server that is down for a minute before it fails what waits.)
    static let connectionWait: Duration = .seconds(10)

    /// No connection of the pool came within `connectionWait`.
    struct NoConnection: Error {}

    /// Runs `body` over a connection of the client's pool, waiting at most `connectionWait` for one; a
    /// query that has its connection runs to its end.
    private func withPooledConnection<Result: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> Result) async throws -> Result {
        let client = self.client
        let leased = NIOLockedValueBox(false)
        return try await withThrowingTaskGroup(of: Result?.self) { group in
            group.addTask {
                try await client.withConnection { connection in
                    leased.withLockedValue { $0 = true }
                    return try await body(connection)
                }
            }
            group.addTask {
                try await Task.sleep(for: Self.connectionWait)
                return nil
            }
            while let outcome = try await group.next() {
                if let result = outcome {
                    group.cancelAll()
                    return result
                }
                if !leased.withLockedValue({ $0 }) {
                    group.cancelAll()
                    throw NoConnection()
                }
            }
            throw CancellationError()
        }
    }

    /// The statement with PostgreSQL's placeholders and its values bound.
    static func query(_ statement: CatalogSQL.Statement) -> PostgresQuery {
        var bindings = PostgresBindings(capacity: statement.bindings.count)
        for value in statement.bindings {
            switch value {
            case .text(let text): bindings.append(text)
            case .integer(let integer): bindings.append(integer)
            }
        }
        return PostgresQuery(unsafeSQL: statement.numbered, binds: bindings)
    }

    // MARK: Migrations

    /// Applies the migrations `camrig_migrations` does not list, over a connection of its own, in one
    /// transaction holding the advisory lock of `lockMigrations`; returns the names of those applied.
    static func migrate(_ address: PostgresCatalogAddress, logger: Logger) async throws -> [String] {
        try await withConnection(to: address, logger: logger) { connection in
            try await connection.withTransaction(logger: logger) { connection in
                try await connection.query(PostgresQuery(unsafeSQL: lockMigrations), logger: logger)
                try await connection.query(
                    "CREATE TABLE IF NOT EXISTS camrig_migrations (name TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
                    logger: logger)
                var applied: Set<String> = []
                for try await name in try await connection.query("SELECT name FROM camrig_migrations", logger: logger).decode(String.self) {
                    applied.insert(name)
                }
                var names: [String] = []
                for migration in CatalogSQL.migrations where !applied.contains(migration.name) {
                    for statement in migration.statements {
                        try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                    }
                    try await connection.query("INSERT INTO camrig_migrations (name) VALUES (\(migration.name))", logger: logger)
                    names.append(migration.name)
                }
                return names
            }
        }
    }

    /// Runs `body` over a connection of its own to `address`, closed after it.
    static func withConnection<Result: Sendable>(
        to address: PostgresCatalogAddress, logger: Logger, _ body: (PostgresConnection) async throws -> Result
    ) async throws -> Result {
        var configuration = PostgresConnection.Configuration(
            host: address.host, port: address.port, username: address.username, password: address.password, database: address.database,
            tls: try connectionTLS(address.tls))
        configuration.options.connectTimeout = .seconds(5)
        let connection = try await PostgresConnection.connect(configuration: configuration, id: 0, logger: logger)
        do {
            let result = try await body(connection)
            try? await connection.close()
            return result
        } catch {
            try? await connection.close()
            throw error
        }
    }

    // MARK: TLS

    static func tlsConfiguration(_ mode: PostgresCatalogAddress.TLSMode) -> TLSConfiguration {
        var tls = TLSConfiguration.makeClientConfiguration()
        // libpq's prefer and require encrypt without checking the server's certificate.
        if mode != .verifyFull { tls.certificateVerification = .none }
        return tls
    }

    static func clientTLS(_ mode: PostgresCatalogAddress.TLSMode) -> PostgresClient.Configuration.TLS {
        switch mode {
        case .disable: .disable
        case .prefer: .prefer(tlsConfiguration(mode))
        case .require, .verifyFull: .require(tlsConfiguration(mode))
        }
    }

    static func connectionTLS(_ mode: PostgresCatalogAddress.TLSMode) throws -> PostgresConnection.Configuration.TLS {
        switch mode {
        case .disable: .disable
        case .prefer: .prefer(try NIOSSLContext(configuration: tlsConfiguration(mode)))
        case .require, .verifyFull: .require(try NIOSSLContext(configuration: tlsConfiguration(mode)))
        }
    }

    // MARK: Errors

    /// `what` failed: the reason PostgreSQL or the network gave, and what to do about it.
    static func failure(_ what: String, _ error: any Error, address: PostgresCatalogAddress) -> StorageError {
        let (reason, advice) = explain(error, address: address)
        return StorageError("\(what): \(reason)" + (advice.map { "; \($0)" } ?? ""))
    }

    /// A person's words for a postgres-nio error (whose own description hides everything), and advice.
    static func explain(_ error: any Error, address: PostgresCatalogAddress) -> (reason: String, advice: String?) {
        let server = "\(address.host.contains(":") ? "[\(address.host)]" : address.host):\(address.port)"
        let fallback = "or drop --catalog (and CAMRIG_CATALOG) to use the SQLite catalog in the captures directory"
        if let error = error as? PostgresTransactionError {
            if let inner = error.beginError ?? error.closureError ?? error.commitError { return explain(inner, address: address) }
        }
        if let error = error as? PSQLError {
            if let info = error.serverInfo, let message = info[.message] {
                let state = info[.sqlState] ?? ""
                let reason = "PostgreSQL says: \(message)" + (state.isEmpty ? "" : " (SQLSTATE \(state))")
                switch state {
                case "28P01", "28000":
                    return (reason, "check the user and password in --catalog (or CAMRIG_CATALOG), \(fallback)")
                case "3D000":
                    return (reason, "create the database (createdb -h \(address.host) -p \(address.port) -U \(address.username) \(address.database)), \(fallback)")
                case "42501":
                    return (reason, "grant \(address.username) the right to create tables in \(address.database), \(fallback)")
                default:
                    return (reason, nil)
                }
            }
            switch error.code {
            case .connectionError, .serverClosedConnection, .clientClosedConnection, .uncleanShutdown, .poolClosed:
                let underlying = error.underlying.map(networkReason) ?? "\(error.code)"
                return (
                    "cannot connect (\(underlying))",
                    "is PostgreSQL running at \(server)? start it, \(fallback)"
                )
            case .sslUnsupported:
                return ("the server does not offer TLS", "add ?sslmode=disable to --catalog for a server on a trusted network, or turn on ssl in postgresql.conf")
            case .failedToAddSSLHandler:
                return ("TLS could not be set up (\(error.underlying.map { "\($0)" } ?? "no reason given"))", nil)
            default:
                return ("\(error.code)\(error.underlying.map { ": \($0)" } ?? "")", nil)
            }
        }
        if error is NIOSSLError {
            return ("TLS failed (\(error))", "check the server's certificate (sslmode=verify-full checks it against the system's roots and the host name), or use sslmode=require")
        }
        if error is NoConnection {
            return ("no connection within \(connectionWait)", "is PostgreSQL running at \(server)? start it, \(fallback)")
        }
        if "\(error)".contains("connectionCreationCircuitBreakerTripped") {
            return ("no connection could be made for a minute", "is PostgreSQL running at \(server)? start it, \(fallback)")
        }
        return ("\(error)", nil)
    }
}

/// The system's words for a failed connection ("Connection refused"), else the error's own.
private func networkReason(_ error: any Error) -> String {
    if let error = error as? NIOConnectionError, let first = error.connectionErrors.first?.error ?? error.dnsAAAAError ?? error.dnsAError {
        return networkReason(first)
    }
    if let error = error as? IOError { return String(cString: strerror(error.errnoCode)) }
    return "\(error)"
}

/// A PostgreSQL result row's cells, read by index.
struct PostgresCatalogRow: CatalogRow {
    var cells: [PostgresCell]
    func text(_ index: Int) throws -> String { try cells[index].decode(String.self) }
    func integer(_ index: Int) throws -> Int64 { try cells[index].decode(Int64.self) }
}
