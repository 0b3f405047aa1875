import ArgumentParser
import CamRigCLI
import CamRigCapture
import CamRigClock
import CamRigStorage
import CamRigText
import Foundation

/// `camrig-bench catalog`: the capture catalog on SQLite and on PostgreSQL in the same run, filled alike.
///
/// 1. Fill: `--captures` captures of two rigs (north and south, one capture a second each), each reserved
///    then recorded as a coordinator does (`reserve`, `record`), `--writers` at once. SQLite: one catalog
///    file, as one coordinator has; PostgreSQL: one connection pool per rig, as two coordinators have.
/// 2. Queries a second, one client, for `--seconds` each: `captures list` as it runs (newest first, every
///    rig, every row), the same filtered by one rig, a page of 100 of each, and a capture found by a
///    prefix of its id (`captures show 20261126-0530…`) and by its whole id.
///
/// Each PostgreSQL figure is printed beside SQLite's, with the ratio. The PostgreSQL server is the one
/// `--postgres` names (best an empty database: `scripts/postgres start DIR` makes one); without it only
/// SQLite is measured.
struct CatalogBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "catalog",
        abstract: "Capture catalog: inserts and `captures list` queries a second on SQLite and on PostgreSQL, filled alike, with the ratio."
    )

    @Option(name: .long, help: "Captures to fill each catalog with (two rigs, half each).")
    var captures = 100_000

    @Option(name: .long, help: ArgumentHelp("The PostgreSQL catalog to measure, postgres://USER:PASSWORD@HOST:PORT/DB (best an empty database).", valueName: "url"))
    var postgres: String?

    @Option(name: .long, help: "Captures being reserved and recorded at once while filling.")
    var writers = 4

    @Option(name: .long, help: "Seconds each query is repeated for.")
    var seconds = 5.0

    @OptionGroup var options: BenchOptions

    /// One catalog's figures.
    struct Engine: Encodable {
        var catalog: String
        /// Rows the catalog held before the fill (other than this run's).
        var rowsBefore: Int
        var fillSeconds: Double
        var capturesPerSecond: Double
        /// Queries a second, by query (`Query.allCases`' names).
        var queriesPerSecond: [String: Double]
        /// Rows each query returned.
        var rows: [String: Int]
    }

    /// The queries measured, as `camrig captures list` and `show` run them.
    enum Query: String, CaseIterable, Encodable {
        case listAll = "list"
        case listRig = "list_rig"
        case pageAll = "list_limit_100"
        case pageRig = "list_rig_limit_100"
        case prefix = "entry_prefix"
        case exact = "entry_id"

        var label: String {
            switch self {
            case .listAll: "captures list (every rig, every row)"
            case .listRig: "captures list --rig north"
            case .pageAll: "captures list --limit 100"
            case .pageRig: "captures list --rig north --limit 100"
            case .prefix: "captures show PREFIX (by a prefix)"
            case .exact: "captures show ID (by its id)"
            }
        }
    }

    struct Result: BenchResult {
        var machine: MachineDescription
        var captures: Int
        var writers: Int
        var sqlite: Engine
        var postgres: Engine?
        /// PostgreSQL's figure over SQLite's, by query, and for the fill (`fill`).
        var postgresOverSQLite: [String: Double]?

        var text: String {
            var lines = [
                "camrig-bench catalog — \(machine.text)",
                "\(captures) captures of two rigs, reserved then recorded, \(writers) at once",
                "",
            ]
            let header = ["MEASURED", "SQLITE", postgres == nil ? nil : "POSTGRESQL", postgres == nil ? nil : "RATIO"].compactMap { $0 }
            var rows: [[String]] = []
            func row(_ label: String, _ value: (Engine) -> Double, _ key: String, unit: String) {
                var cells = [label, String(format: "%.1f %@", value(sqlite), unit)]
                if let postgres {
                    cells.append(String(format: "%.1f %@", value(postgres), unit))
                    cells.append(postgresOverSQLite?[key].map(times) ?? "")
                }
                rows.append(cells)
            }
            row("fill: captures reserved and recorded", \.capturesPerSecond, "fill", unit: "/s")
            for query in Query.allCases {
                row("\(query.label), \(sqlite.rows[query.rawValue] ?? 0) rows", { $0.queriesPerSecond[query.rawValue] ?? 0 }, query.rawValue, unit: "/s")
            }
            lines.append(table(header, rows))
            lines.append("")
            lines.append("SQLite: \(sqlite.catalog)")
            if let postgres {
                lines.append("PostgreSQL: \(postgres.catalog)\(postgres.rowsBefore > 0 ? " (held \(postgres.rowsBefore) other rows before)" : "")")
            } else {
                lines.append("PostgreSQL: not measured (give --postgres URL)")
            }
            return lines.joined(separator: "\n")
        }
    }

    func validate() throws {
        guard (2...10_000_000).contains(captures) else { throw ValidationError("--captures must be within 2…10000000") }
        guard (1...64).contains(writers) else { throw ValidationError("--writers must be within 1…64") }
        guard seconds > 0, seconds <= 600 else { throw ValidationError("--seconds must be within (0, 600]") }
    }

    func run() async throws {
        let logger = options.makeLogger("camrig.bench.catalog")
        let folder = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("camrig-bench-catalog-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        // Rig names of this run: a PostgreSQL catalog measured before keeps its rows.
        let run = String(UUID().uuidString.prefix(6)).lowercased()
        let rigs = ["north-\(run)", "south-\(run)"]

        options.say("SQLite: filling \(folder.path)/catalog.sqlite with \(captures) captures")
        let sqlite = try SQLiteCaptureCatalog(directory: folder)
        let sqliteResult: Engine
        do {
            sqliteResult = try await measure(north: sqlite, south: sqlite, rigs: rigs)
        } catch {
            await sqlite.close()
            throw error
        }
        await sqlite.close()

        var postgresResult: Engine?
        if let postgres {
            let north = try await PostgresCaptureCatalog(url: postgres, logger: logger)
            options.say("PostgreSQL: filling \(north.location) with \(captures) captures")
            do {
                let south = try await PostgresCaptureCatalog(url: postgres, logger: logger)
                do {
                    postgresResult = try await measure(north: north, south: south, rigs: rigs)
                } catch {
                    await south.close()
                    throw error
                }
                await south.close()
            } catch {
                await north.close()
                throw error
            }
            await north.close()
        }
        var ratios: [String: Double]?
        if let postgresResult {
            var byKey = ["fill": ratio(postgresResult.capturesPerSecond, sqliteResult.capturesPerSecond)]
            for query in Query.allCases {
                byKey[query.rawValue] = ratio(postgresResult.queriesPerSecond[query.rawValue] ?? 0, sqliteResult.queriesPerSecond[query.rawValue] ?? 0)
            }
            ratios = byKey
        }
        try options.emit(
            Result(
                machine: .current, captures: captures, writers: writers, sqlite: sqliteResult, postgres: postgresResult,
                postgresOverSQLite: ratios))
    }

    /// Fills the catalog (north's captures through `north`, south's through `south`), then times each query.
    func measure(north: any CaptureCatalog, south: any CaptureCatalog, rigs: [String]) async throws -> Engine {
        let before = try await north.list().filter { !rigs.contains($0.rig) }.count
        // One capture a second on each rig, the rigs in step: every second has an id of each, as two
        // coordinators capturing at once make them (the second one's with -2).
        let start = Date(timeIntervalSince1970: 1_795_000_000)
        let perRig = captures / 2
        let (captures, writers) = (self.captures, self.writers)
        let began = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<captures {
                if index >= writers { try await group.next() }
                group.addTask {
                    let rig = index % 2
                    let catalog = rig == 0 ? north : south
                    let date = start.addingTimeInterval(Double(index / 2))
                    let created = CaptureNaming.created(date)
                    for id in CaptureNaming.candidates(kind: "photo", date: date) {
                        guard try await catalog.reserve(id: id, kind: "photo", created: created, rig: rigs[rig], store: "/srv/\(rigs[rig])/captures") else { continue }
                        try await catalog.record(Self.entry(id: id, created: created, rig: rigs[rig]))
                        return
                    }
                    throw CommandFailure("no free id for capture \(index)")
                }
                if index > 0, index % 10_000 == 0 { options.say("  \(index) captures") }
            }
            try await group.waitForAll()
        }
        let fill = (ContinuousClock.now - began).seconds

        // A capture in the middle, by its id and by a prefix only it has (its second holds `…-photo` and
        // `…-photo-2`: the latter less its last character).
        let ids = Array(CaptureNaming.candidates(kind: "photo", date: start.addingTimeInterval(Double(perRig / 2))).prefix(2))
        let (middle, prefix) = (ids[0], String(ids[1].dropLast()))
        var perSecond: [String: Double] = [:]
        var rows: [String: Int] = [:]
        for query in Query.allCases {
            let (rate, count) = try await time {
                switch query {
                case .listAll: try await north.list().count
                case .listRig: try await north.list(CaptureCatalog.Query(rig: rigs[0])).count
                case .pageAll: try await north.list(CaptureCatalog.Query(limit: 100)).count
                case .pageRig: try await north.list(CaptureCatalog.Query(rig: rigs[0], limit: 100)).count
                case .prefix: try await north.entry(prefix) == nil ? 0 : 1
                case .exact: try await north.entry(middle) == nil ? 0 : 1
                }
            }
            perSecond[query.rawValue] = rate
            rows[query.rawValue] = count
            options.say(String(format: "  %@: %.1f/s (%d rows)", query.label, rate, count))
        }
        return Engine(
            catalog: north.location, rowsBefore: before, fillSeconds: fill, capturesPerSecond: Double(captures) / fill, queriesPerSecond: perSecond,
            rows: rows)
    }

    /// Runs `query` over and over for `seconds` (at least 3 times); the rate and the rows of the last run.
    func time(_ query: () async throws -> Int) async throws -> (Double, Int) {
        var count = 0
        var rows = 0
        let began = ContinuousClock.now
        while count < 3 || (ContinuousClock.now - began).seconds < seconds {
            rows = try await query()
            count += 1
        }
        return (Double(count) / (ContinuousClock.now - began).seconds, rows)
    }

    /// A capture of 8 cameras with one complete set, as a photo's row reads.
    static func entry(id: String, created: String, rig: String) -> CaptureCatalog.Entry {
        let summary = CaptureManifest.Summary(sets: [], framesDelivered: 8, droppedFrames: 0, unmatchedFrames: 0)
        var manifest = CaptureManifest(id: id, kind: "photo", created: created, sessionId: "s-\(rig)", cameras: [], sets: [], unmatched: [], summary: summary)
        manifest.state = .complete
        var entry = CaptureCatalog.Entry(manifest: manifest, directory: id, rig: rig, store: "/srv/\(rig)/captures")
        entry.cameras = 8
        entry.sets = 1
        entry.completeSets = 1
        entry.skewP50Ns = 1_200
        entry.skewMaxNs = 2_400
        return entry
    }
}
