import CamRigStorage
import Foundation
import Testing

/// `--catalog` as written by a person: PostgreSQL URLs read as libpq reads them, passwords never shown,
/// and catalogs that cannot be reached named with what to do.
@Suite("Capture catalog addresses", .timeLimit(.minutes(1)))
struct CatalogAddressTests {
    @Test("a postgres:// URL gives the server, the login and the database; the description has no password")
    func parse() throws {
        let address = try PostgresCatalogAddress(url: "postgres://cam%40rig:p%2541ss%3Aw@db.studio.lan:6432/captures?sslmode=verify-full")
        #expect(address.host == "db.studio.lan" && address.port == 6432)
        #expect(address.username == "cam@rig" && address.password == "p%41ss:w" && address.database == "captures")
        #expect(address.tls == .verifyFull)
        #expect(address.description == "postgres://cam@rig@db.studio.lan:6432/captures?sslmode=verify-full")

        let local = try PostgresCatalogAddress(url: "postgresql://camrig:secret@127.0.0.1/camrig")
        #expect(local.port == 5432 && local.tls == .disable && local.description == "postgres://camrig@127.0.0.1:5432/camrig")
        #expect(try PostgresCatalogAddress(url: "postgres://camrig@[::1]:5433").database == "camrig", "the database defaults to the user's name")
        #expect(try PostgresCatalogAddress(url: "postgres://camrig:x@db.lan/c").tls == .prefer, "TLS when offered, off the loopback interface")
    }

    @Test("a URL that cannot be used says what is wrong, without its password")
    func refused() {
        for (url, reason) in [
            ("postgres://camrig:hunter2@/camrig", "there is no host"),
            ("postgres://db.lan/camrig", "there is no user"),
            ("postgres://camrig:hunter2@db.lan/camrig?sslmode=allow", "sslmode 'allow' is not one of disable, prefer, require, verify-full"),
            ("postgres://camrig:hunter2@db.lan/camrig?timeout=3", "'timeout' is not understood"),
            ("mysql://camrig:hunter2@db.lan/camrig", "not a postgres:// URL"),
        ] {
            let error = #expect(throws: StorageError.self, "\(url)") { try PostgresCatalogAddress(url: url) }
            let message = error?.description ?? ""
            #expect(message.contains(reason), "\(message)")
            #expect(!message.contains("hunter2"), "\(message)")
        }
        #expect(PostgresCatalogAddress.redacted("postgres://u:p@ss@h:1/d") == "postgres://u:…@h:1/d")
    }

    @Test("a catalog URL that is not PostgreSQL's is refused before anything is opened")
    func notPostgres() async throws {
        let root = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("camrig-catalog-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let error = await #expect(throws: StorageError.self) {
            try await CaptureStore.connect(root: root, catalogURL: "sqlite:///srv/catalog.sqlite", rig: "north")
        }
        #expect(error?.description.contains("leave --catalog (and CAMRIG_CATALOG) out for the SQLite catalog") == true)
    }

    @Test("a server that is not there: the catalog, the network's reason and what to do")
    func noServer() async throws {
        // Nothing listens on port 1 of the loopback interface.
        let error = await #expect(throws: StorageError.self) {
            try await PostgresCaptureCatalog(url: "postgres://camrig:hunter2@127.0.0.1:1/camrig")
        }
        let message = error?.description ?? ""
        #expect(message.hasPrefix("cannot open the capture catalog postgres://camrig@127.0.0.1:1/camrig: cannot connect ("), "\(message)")
        #expect(message.contains("is PostgreSQL running at 127.0.0.1:1? start it, or drop --catalog"), "\(message)")
        #expect(!message.contains("hunter2"))
    }
}
