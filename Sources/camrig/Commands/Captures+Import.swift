import ArgumentParser
import CamRigCLI
import CamRigStorage
import Foundation

extension Captures {
    /// `camrig captures import CATALOG.sqlite --catalog postgres://…`: a rig's own catalog into the shared one.
    struct Import: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Copy a rig's catalog.sqlite into the catalog several rigs share (--catalog).",
            discussion: """
                For a rig that moves to a shared PostgreSQL catalog: its captures made before are listed there \
                with the rest. The captures' files stay where they are; only their rows are copied. Captures \
                recorded before catalogs said which rig made them, and where their files are, get --rig and the \
                folder the catalog is in. Run again, it brings rows up to date and adds none twice. An id the \
                shared catalog already gives to another capture is not imported: the command lists those and \
                exits with status 1 after importing the rest. Opening an older catalog.sqlite updates its \
                schema in place, as any camrig command does.
                """
        )

        @Argument(help: ArgumentHelp("The rig's catalog: a catalog.sqlite, or the captures folder that holds one.", valueName: "catalog"))
        var source: String

        @Option(
            name: .long,
            help: ArgumentHelp(
                "The shared catalog to import into: postgres://USER:PASSWORD@HOST:PORT/DB. Default $CAMRIG_CATALOG.", valueName: "url"))
        var catalog: String?

        @Option(
            name: .long,
            help: ArgumentHelp("The rig of captures the source does not say (those made before catalogs had rigs). Default: this host's name.", valueName: "name"))
        var rig: String?

        @OptionGroup var output: OutputOptions

        func run() async throws {
            let logger = output.makeLogger()
            guard let url = catalog ?? ProcessInfo.processInfo.environment["CAMRIG_CATALOG"], !url.isEmpty else {
                throw CommandFailure("give the catalog to import into: --catalog postgres://USER:PASSWORD@HOST:PORT/DB (or CAMRIG_CATALOG)")
            }
            var file = URL(fileURLWithPath: source).standardizedFileURL
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: file.path, isDirectory: &isDirectory) else {
                throw CommandFailure("there is no \(file.path): give a catalog.sqlite or the captures folder that holds it")
            }
            if isDirectory.boolValue { file = file.appendingPathComponent("catalog.sqlite") }
            guard FileManager.default.fileExists(atPath: file.path) else {
                throw CommandFailure("\(file.deletingLastPathComponent().path) holds no catalog.sqlite: give the captures folder a coordinator wrote to")
            }
            do {
                guard PostgresCatalogAddress.isPostgres(url) else {
                    throw CommandFailure("--catalog \(PostgresCatalogAddress.redacted(url)) is not a PostgreSQL URL: give postgres://USER:PASSWORD@HOST:PORT/DB")
                }
                let from = try SQLiteCaptureCatalog(path: file.path)
                let into: PostgresCaptureCatalog
                do {
                    into = try await PostgresCaptureCatalog(url: url, logger: logger)
                } catch {
                    await from.close()
                    throw error
                }
                let json = output.json
                let outcome: Result<CatalogImport.Report, any Error>
                do {
                    outcome = .success(
                        try await CatalogImport.run(from: from, into: into, rig: rig ?? CaptureNaming.hostRig, store: file.deletingLastPathComponent().path) { done, total in
                            if !json, total >= 500 { FileHandle.standardError.write(Data("\(done) of \(total) captures\n".utf8)) }
                        })
                } catch {
                    outcome = .failure(error)
                }
                await into.close()
                await from.close()
                let report = try outcome.get()
                if output.json {
                    try printJSON(report, snakeCase: true)
                } else {
                    print("\(report.imported) imported, \(report.updated) updated, \(report.unchanged) already there, into \(into.location)")
                    for conflict in report.conflicts {
                        let holder = conflict.existingStore.isEmpty ? "another capture" : "a capture of rig \(conflict.existingRig) in \(conflict.existingStore)"
                        print("not imported: \(conflict.id) (rig \(conflict.rig), \(conflict.store)): the catalog gives its id to \(holder)")
                    }
                }
                if !report.conflicts.isEmpty { throw ExitCode(1) }
            } catch let exit as ExitCode {
                throw exit
            } catch {
                throw userFacing(error)
            }
        }
    }
}
