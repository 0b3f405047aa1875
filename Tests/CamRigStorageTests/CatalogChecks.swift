import CamRigCapture
import CamRigStorage
import Foundation
import Testing

/// What every capture catalog does, checked the same way on SQLite and on PostgreSQL. Ids and rigs carry
/// `namespace`, so that checks sharing one PostgreSQL database see only their own rows.
enum CatalogChecks {
    /// A complete capture of `rig` made at `created`, with `state` and `missing` as given.
    static func entry(_ id: String, rig: String, created: String, state: String = "complete", missing: Int = 0) -> CaptureCatalog.Entry {
        let manifest = CaptureStoreTests.manifest(id: id, kind: "photo", created: created)
        var entry = CaptureCatalog.Entry(manifest: manifest, directory: id, rig: rig, store: "/srv/\(rig)/captures")
        entry.state = state
        entry.missing = missing
        return entry
    }

    /// A reserved id is taken for every rig; the capture's rows then replace the placeholder.
    static func reserve(_ catalog: any CaptureCatalog, namespace: String) async throws {
        let (north, south) = ("north-\(namespace)", "south-\(namespace)")
        let id = "\(namespace)-20261126-053000-photo"
        let created = "2026-11-26T05:30:00.000Z"
        #expect(try await catalog.reserve(id: id, kind: "photo", created: created, rig: north, store: "/srv/north/captures"))
        #expect(try await catalog.reserve(id: id, kind: "photo", created: created, rig: north, store: "/srv/north/captures") == false, "reserved twice")
        #expect(try await catalog.reserve(id: id, kind: "photo", created: created, rig: south, store: "/srv/south/captures") == false, "another rig got the same id")

        let placeholder = try #require(try await catalog.entry(id))
        #expect(placeholder.state == "in_progress" && placeholder.rig == north && placeholder.store == "/srv/north/captures")
        #expect(placeholder.directory == id && placeholder.kind == "photo" && placeholder.created == created && placeholder.cameras == 0)
        #expect(try await catalog.unfinished(rig: north).map(\.id).contains(id), "a capture begun is unfinished until its rows say otherwise")

        let finished = entry(id, rig: north, created: created)
        try await catalog.record(finished)
        #expect(try await catalog.entry(id) == finished)
        #expect(try await catalog.unfinished(rig: north).map(\.id).contains(id) == false)
        #expect(try await catalog.reserve(id: id, kind: "photo", created: created, rig: south, store: "/srv/south/captures") == false)
        #expect(try await catalog.reserve(id: id + "-2", kind: "photo", created: created, rig: south, store: "/srv/south/captures"))
    }

    /// Newest first; every rig's captures or one rig's; at most `limit`.
    static func list(_ catalog: any CaptureCatalog, namespace: String) async throws {
        let (north, south) = ("north-\(namespace)", "south-\(namespace)")
        let rows = [
            entry("\(namespace)-a", rig: north, created: "2026-11-26T05:30:00.000Z"),
            entry("\(namespace)-b", rig: south, created: "2026-11-26T05:30:00.000Z"),
            entry("\(namespace)-c", rig: north, created: "2026-11-26T05:31:00.000Z"),
            entry("\(namespace)-d", rig: south, created: "2026-11-26T05:32:00.000Z"),
            entry("\(namespace)-e", rig: north, created: "2026-11-26T05:29:00.000Z"),
        ]
        for row in rows.shuffled() { try await catalog.record(row) }
        let ours = Set([north, south])
        let everyRig = try await catalog.list().filter { ours.contains($0.rig) }
        // Newest first; in one second, the later id first.
        #expect(everyRig.map(\.id) == ["d", "c", "b", "a", "e"].map { "\(namespace)-\($0)" })
        #expect(try await catalog.list(CaptureCatalog.Query(rig: north)).map(\.id) == ["c", "a", "e"].map { "\(namespace)-\($0)" })
        #expect(try await catalog.list(CaptureCatalog.Query(rig: south)) == [rows[3], rows[1]])
        #expect(try await catalog.list(CaptureCatalog.Query(rig: north, limit: 2)).map(\.id) == ["c", "a"].map { "\(namespace)-\($0)" })
        #expect(try await catalog.list(CaptureCatalog.Query(rig: "east-\(namespace)")).isEmpty)
    }

    /// A rig's captures left in progress or offloading, or with results its agents hold, oldest first;
    /// never another rig's; captures from before rigs were recorded count as every rig's.
    static func unfinished(_ catalog: any CaptureCatalog, namespace: String, legacy: Bool) async throws {
        let (north, south) = ("north-\(namespace)", "south-\(namespace)")
        let rows = [
            entry("\(namespace)-1", rig: north, created: "2026-11-26T05:33:00.000Z", state: "in_progress"),
            entry("\(namespace)-2", rig: north, created: "2026-11-26T05:30:00.000Z", state: "complete"),
            entry("\(namespace)-3", rig: north, created: "2026-11-26T05:31:00.000Z", state: "incomplete", missing: 2),
            entry("\(namespace)-4", rig: north, created: "2026-11-26T05:32:00.000Z", state: "offloading"),
            entry("\(namespace)-5", rig: north, created: "2026-11-26T05:29:00.000Z", state: "incomplete"),
            entry("\(namespace)-6", rig: south, created: "2026-11-26T05:28:00.000Z", state: "in_progress"),
        ]
        for row in rows { try await catalog.record(row) }
        #expect(try await catalog.unfinished(rig: north).map(\.id) == ["3", "4", "1"].map { "\(namespace)-\($0)" })
        #expect(try await catalog.unfinished(rig: south).map(\.id) == ["\(namespace)-6"])
        if legacy {
            // Only a catalog of its own may hold rows without a rig: a shared one would give them to every rig.
            try await catalog.record(entry("\(namespace)-0", rig: "", created: "2026-11-26T05:27:00.000Z", state: "in_progress"))
            #expect(try await catalog.unfinished(rig: north).map(\.id) == ["0", "3", "4", "1"].map { "\(namespace)-\($0)" })
        }
    }

    /// An exact id, or the only id with that prefix; nothing for an ambiguous or unknown one.
    static func lookup(_ catalog: any CaptureCatalog, namespace: String) async throws {
        let rig = "north-\(namespace)"
        let photo = entry("\(namespace)-20261126-053000-photo", rig: rig, created: "2026-11-26T05:30:00.000Z")
        let second = entry("\(namespace)-20261126-053000-photo-2", rig: rig, created: "2026-11-26T05:30:00.000Z")
        let recording = entry("\(namespace)-20261126-053100-recording", rig: rig, created: "2026-11-26T05:31:00.000Z")
        for row in [photo, second, recording] { try await catalog.record(row) }
        #expect(try await catalog.entry(photo.id) == photo, "an exact id that also begins another")
        #expect(try await catalog.entry("\(namespace)-20261126-0531") == recording)
        #expect(try await catalog.entry(second.id) == second)
        #expect(try await catalog.entry("\(namespace)-20261126-0530") == nil, "two ids begin so")
        #expect(try await catalog.entry("\(namespace)-2027") == nil)
        #expect(try await catalog.entry("") == nil)
    }

    /// Two coordinators (rigs north and south, each its own captures directory and its own connection to
    /// one catalog) begin `count` captures each, eight at a time, many in the same seconds: no id is given
    /// twice, no row is lost, and each sees both rigs' captures.
    static func twoRigs(north northCatalog: any CaptureCatalog, south southCatalog: any CaptureCatalog, namespace: String, count: Int) async throws {
        let folder = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("camrig-two-rigs-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        let north = try CaptureStore(root: folder.appendingPathComponent("north"), catalog: northCatalog, rig: "north-\(namespace)")
        let south = try CaptureStore(root: folder.appendingPathComponent("south"), catalog: southCatalog, rig: "south-\(namespace)")
        // A start no other check uses; 20 captures a second on each rig.
        let start = Date(timeIntervalSince1970: 1_000_000_000 + Double(Int.random(in: 0..<100_000) * 1000))

        @Sendable func capture(_ store: CaptureStore) async throws -> [String] {
            try await withThrowingTaskGroup(of: String.self) { group in
                var ids: [String] = []
                for index in 0..<count {
                    if index >= 8, let id = try await group.next() { ids.append(id) }
                    group.addTask {
                        let date = start.addingTimeInterval(Double(index / 20))
                        let (id, _) = try await store.makeCaptureDirectory(kind: "photo", date: date)
                        let manifest = CaptureStoreTests.manifest(id: id, kind: "photo", created: CaptureNaming.created(date))
                        try await store.catalog.record(CaptureCatalog.Entry(manifest: manifest, directory: id, rig: store.rig, store: store.location))
                        return id
                    }
                }
                for try await id in group { ids.append(id) }
                return ids
            }
        }
        async let northIDs = capture(north)
        async let southIDs = capture(south)
        let (northTaken, southTaken) = try await (northIDs, southIDs)

        #expect(northTaken.count == count && southTaken.count == count)
        #expect(Set(northTaken + southTaken).count == 2 * count, "an id was given twice")
        #expect(Set(northTaken).intersection(southTaken).isEmpty)
        for catalog in [northCatalog, southCatalog] {
            let northRows = try await catalog.list(CaptureCatalog.Query(rig: north.rig))
            let southRows = try await catalog.list(CaptureCatalog.Query(rig: south.rig))
            #expect(Set(northRows.map(\.id)) == Set(northTaken), "north's rows as \(catalog) lists them")
            #expect(Set(southRows.map(\.id)) == Set(southTaken), "south's rows as \(catalog) lists them")
            #expect((northRows + southRows).allSatisfy { $0.state == "complete" && $0.cameras == 1 }, "a placeholder left where a capture was recorded")
            #expect(try await catalog.unfinished(rig: north.rig).isEmpty)
            #expect(try await catalog.unfinished(rig: south.rig).isEmpty)
        }
        // Both rigs took ids in the same seconds: the first of each second went to one of them.
        let firsts = (northTaken + southTaken).filter { $0.hasSuffix("-photo") }
        #expect(firsts.count == (count + 19) / 20)
    }
}
