import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigStorage
import Foundation

extension Captures {
    /// `camrig captures recover`: finish captures that lack results.
    struct Recover: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Collect the results earlier captures lack from the agents that still hold them.",
            discussion: """
                A photo whose agent was cut off, restarted or down while the capture gathered is listed as \
                incomplete, its missing results as still held by their agents. A coordinator killed during a \
                capture leaves its manifest in_progress. This command rebuilds such manifests from each \
                capture's journal, fetches every missing result its agent still holds into the capture's \
                folder, and marks the capture complete, or says what is still missing and why. Every capture \
                command does the same for the agents it connects to before it starts. Exit status 2 while agents \
                still hold results the captures lack (agents down, or captures begun in the last seconds).
                """
        )

        @OptionGroup var captures: CaptureOptions
        @OptionGroup var rig: RigOptions
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let logger = output.makeLogger()
            do {
                let (report, root) = try await captures.withStorage(rig: try rig.resolvedRigName(), settings: rig.storeSettings(), logger: logger) { store in
                    let report = try await rig.withPool(logger: logger, clockSamples: 8) { pool in
                        try await StorageWork.collect(store, pool: pool, logger: logger)
                    }
                    return (report, store.storeURL)
                }
                if output.json {
                    try printJSON(report, snakeCase: true)
                    if report.waiting > 0 { throw ExitCode(2) }
                    return
                }
                if report.captures.isEmpty {
                    print("every capture in \(root) is complete")
                    return
                }
                for capture in report.captures {
                    print("\(capture.id): \(capture.state)\(capture.resumed ? " (the coordinator had stopped during it; rebuilt from its journal)" : "")")
                    for name in capture.collected { print("  collected \(name)") }
                    for line in capture.waiting { print("  still held by its agent: \(line)") }
                    for line in capture.lost { print("  lost: \(line)") }
                }
                print("collected \(report.collected), still held by agents \(report.waiting), lost \(report.lost)")
                if report.waiting > 0 { throw ExitCode(2) }
            } catch let exit as ExitCode {
                throw exit
            } catch {
                throw userFacing(error)
            }
        }
    }
}
