/// Copies a catalog's captures into another: a rig's own `catalog.sqlite` into the catalog several rigs
/// share (PostgreSQL), so that captures made before it was shared are listed with the rest.
///
/// Rows go in oldest first, each id taken with `reserve` as a coordinator takes one, so importing while
/// coordinators capture into the same catalog never overwrites their captures. A capture already there
/// with the same files (an import run again) is brought up to date; an id that another capture holds (of
/// another rig, or elsewhere) is left as it is and reported.
public enum CatalogImport {
    public struct Report: Codable, Sendable, Equatable {
        /// Captures that were not in the destination.
        public var imported = 0
        /// Captures that were, with the same files, whose row has changed since (state, counts).
        public var updated = 0
        /// Captures that were, identical.
        public var unchanged = 0
        /// Captures whose id the destination gives to another capture: not imported.
        public var conflicts: [Conflict] = []

        public init() {}
    }

    public struct Conflict: Codable, Sendable, Equatable {
        public var id: String
        /// The capture the source lists under the id: its rig, and where its files are.
        public var rig: String
        public var store: String
        /// The one the destination lists.
        public var existingRig: String
        public var existingStore: String
    }

    /// Copies every capture of `source` into `destination`. Rows of captures made before catalogs said
    /// which rig made them, and where their files are, get `rig` and `store`. `progress` is told how many
    /// of how many are done, now and then.
    public static func run(
        from source: any CaptureCatalog, into destination: any CaptureCatalog, rig: String, store: String,
        progress: (_ done: Int, _ total: Int) -> Void = { _, _ in }
    ) async throws -> Report {
        let entries = try await source.list().reversed()
        var report = Report()
        for (index, original) in entries.enumerated() {
            var entry = original
            if entry.rig.isEmpty { entry.rig = rig }
            if entry.store.isEmpty { entry.store = store }
            if try await destination.reserve(id: entry.id, kind: entry.kind, created: entry.created, rig: entry.rig, store: entry.store) {
                try await destination.record(entry)
                report.imported += 1
            } else if let existing = try await destination.entry(entry.id), existing.id == entry.id {
                if existing.store != entry.store || existing.directory != entry.directory || existing.rig != entry.rig {
                    report.conflicts.append(Conflict(id: entry.id, rig: entry.rig, store: entry.store, existingRig: existing.rig, existingStore: existing.store))
                } else if existing == entry {
                    report.unchanged += 1
                } else {
                    try await destination.record(entry)
                    report.updated += 1
                }
            } else {
                // Taken, yet not found by its id: reserved and let go meanwhile. Another capture's, at any rate.
                report.conflicts.append(Conflict(id: entry.id, rig: entry.rig, store: entry.store, existingRig: "", existingStore: ""))
            }
            if (index + 1) % 500 == 0 || index + 1 == entries.count { progress(index + 1, entries.count) }
        }
        return report
    }
}
