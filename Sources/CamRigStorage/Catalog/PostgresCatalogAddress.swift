import Foundation

/// A PostgreSQL catalog's address, from `--catalog postgres://USER:PASSWORD@HOST:PORT/DB` (or
/// `postgresql://`, as libpq writes it), with `?sslmode=disable|prefer|require|verify-full`.
///
/// Its `description` never shows the password: it is what messages name the catalog by.
public struct PostgresCatalogAddress: Sendable, Equatable, CustomStringConvertible {
    /// How the connection is encrypted, as libpq's `sslmode` says it.
    public enum TLSMode: String, Sendable, CaseIterable {
        /// Plain TCP.
        case disable
        /// TLS when the server offers it, without checking its certificate.
        case prefer
        /// TLS, without checking the server's certificate.
        case require
        /// TLS with the server's certificate checked against the system's roots and the host name.
        case verifyFull = "verify-full"
    }

    public var host: String
    public var port: Int
    public var username: String
    public var password: String?
    public var database: String
    /// Default: `disable` on the loopback interface, `prefer` elsewhere.
    public var tls: TLSMode

    public init(host: String, port: Int = 5432, username: String, password: String?, database: String, tls: TLSMode? = nil) {
        self.host = host
        self.port = port
        self.username = username
        self.password = password
        self.database = database
        self.tls = tls ?? (Self.isLoopback(host) ? .disable : .prefer)
    }

    /// Whether `url` names a PostgreSQL catalog (its scheme is `postgres` or `postgresql`).
    public static func isPostgres(_ url: String) -> Bool {
        let scheme = url.prefix { $0 != ":" }.lowercased()
        return scheme == "postgres" || scheme == "postgresql"
    }

    /// Parses a `postgres://` URL; the error says what is wrong without repeating the password.
    public init(url: String) throws {
        let shown = Self.redacted(url)
        func failure(_ what: String) -> StorageError {
            StorageError("--catalog \(shown): \(what); give postgres://USER:PASSWORD@HOST:PORT/DB (optionally ?sslmode=disable|prefer|require|verify-full)")
        }
        guard Self.isPostgres(url), let components = URLComponents(string: url) else {
            throw failure("not a postgres:// URL")
        }
        guard var host = components.host, !host.isEmpty else { throw failure("there is no host") }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard let username = components.user, !username.isEmpty else { throw failure("there is no user") }
        let port = components.port ?? 5432
        guard (1...65_535).contains(port) else { throw failure("the port is not within 1…65535") }
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        guard !path.contains("/") else { throw failure("the database name '\(path)' has a slash") }
        var tls: TLSMode?
        for item in components.queryItems ?? [] {
            guard item.name == "sslmode" else { throw failure("'\(item.name)' is not understood (only sslmode is)") }
            guard let mode = item.value.flatMap(TLSMode.init(rawValue:)) else {
                throw failure("sslmode '\(item.value ?? "")' is not one of \(TLSMode.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            tls = mode
        }
        self.init(
            host: host, port: port, username: username, password: components.password, database: path.isEmpty ? username : path, tls: tls)
    }

    /// `postgres://USER@HOST:PORT/DB`, with the TLS mode when it is not the default: never the password.
    public var description: String {
        let shownHost = host.contains(":") ? "[\(host)]" : host
        let mode = tls == (Self.isLoopback(host) ? .disable : .prefer) ? "" : "?sslmode=\(tls.rawValue)"
        return "postgres://\(username)@\(shownHost):\(port)/\(database)\(mode)"
    }

    /// `url` with any password replaced by `…`, for messages about a URL that may not parse.
    public static func redacted(_ url: String) -> String {
        guard let schemeEnd = url.range(of: "://") else { return url }
        let rest = url[schemeEnd.upperBound...]
        // The user information ends at the last `@` before the path.
        let authority = rest.prefix { $0 != "/" && $0 != "?" }
        guard let at = authority.lastIndex(of: "@"), let colon = authority[..<at].firstIndex(of: ":") else { return url }
        return String(url[..<colon]) + ":…" + String(url[at...])
    }

    static func isLoopback(_ host: String) -> Bool {
        host == "localhost" || host == "::1" || host.hasPrefix("127.")
    }
}
