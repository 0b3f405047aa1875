import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigStorage
import CamRigWire
import Foundation

extension Captures {
    /// `camrig captures finalize ID`: deferred photos' finals, now.
    struct Finalize: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Have the agents make a capture's deferred photos now and fetch them into it.",
            discussion: """
                A photo taken with --deferred is delivered at once as a proxy (its reference frame, half size); \
                its agent makes the final when idle, under the same photo id, and keeps both across restarts. \
                This command asks each agent holding finals of the capture to make them now, fetches them into \
                the capture's folder (the proxy stays beside the final as NAME-proxy) and updates its manifest. \
                Exit status 2 while finals are still to come (an agent down).
                """
        )

        @Argument(help: "Capture id (or a unique prefix).")
        var id: String
        @OptionGroup var captures: CaptureOptions
        @OptionGroup var rig: RigOptions
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let logger = output.makeLogger()
            do {
                let (manifest, report) = try await captures.withStorage(rig: try rig.resolvedRigName(), settings: rig.storeSettings(), logger: logger) { store in
                    let entry = try await CaptureOptions.entry(id, in: store)
                    let manifest = try await store.manifest(of: entry)
                    let awaiting = manifest.awaitingFinals
                    let report = try await rig.withPool(logger: logger, clockSamples: 8) { pool in
                        var refusals: [String] = []
                        for (agentID, frames) in Dictionary(grouping: awaiting, by: { manifest.cameras[$0.camera].agent }).sorted(by: { $0.key < $1.key }) {
                            guard let client = try? pool.agents.first(where: { $0.snapshot.agentID == agentID })?.client() else {
                                refusals.append("agent \(agentID) is not connected; its finals come when it is back")
                                continue
                            }
                            var finalize = WireFinalizePhotos()
                            finalize.photoIds = frames.compactMap(\.photo?.photoId)
                            do {
                                _ = try await client.request(.finalizePhotos(finalize), timeout: .seconds(120))
                            } catch {
                                refusals.append("agent \(agentID): \(error)")
                            }
                        }
                        for refusal in refusals { logger.warning("\(refusal)") }
                        return try await StorageWork.collect(store, pool: pool, logger: logger, only: manifest.id)
                    }
                    return (manifest, report)
                }
                let awaiting = manifest.awaitingFinals
                let outcome = report.captures.first
                if output.json {
                    try printJSON(report, snakeCase: true)
                } else if awaiting.isEmpty {
                    print("\(manifest.id) has no deferred photos waiting for their finals")
                } else {
                    for name in outcome?.finals ?? [] { print("final of \(name) stored") }
                    for name in outcome?.awaitingFinals ?? [] { print("still deferred: \(name)") }
                }
                if !(outcome?.awaitingFinals ?? []).isEmpty { throw ExitCode(2) }
            } catch let exit as ExitCode {
                throw exit
            } catch {
                throw userFacing(error)
            }
        }
    }
}
