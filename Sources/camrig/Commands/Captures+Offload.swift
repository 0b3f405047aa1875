import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigCapture
import CamRigStorage
import Foundation

extension Captures {
    /// `camrig captures offload ID`: an on-host recording's files, from their hosts.
    struct Offload: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Fetch an on-host recording's files from the hosts that recorded them.",
            discussion: """
                Each file is fetched from where the capture's copy ends (an interrupted offload resumes), checked \
                against the SHA-256 its host recorded, flushed to the disk, and only then deleted from its host. \
                Once every file is here the recording's sync sets are built from the frame tables. Exit status 2 \
                while files remain on hosts (a host down, or still recording).
                """
        )

        @Argument(help: "Capture id (or a unique prefix).")
        var id: String
        @Option(name: .long, help: ArgumentHelp("Fetch at most this many MB/s from each host (default: as fast as the link goes).", valueName: "MB/s"))
        var rate: Double?
        @OptionGroup var captures: CaptureOptions
        @OptionGroup var rig: RigOptions
        @OptionGroup var output: OutputOptions

        func validate() throws {
            if let rate, rate <= 0 { throw ValidationError("--rate must be positive") }
        }

        func run() async throws {
            let logger = output.makeLogger()
            do {
                let quiet = output.json
                let (manifest, outcome) = try await captures.withStorage(rig: try rig.resolvedRigName(), settings: rig.storeSettings(), logger: logger) { store in
                    let entry = try await CaptureOptions.entry(id, in: store)
                    let manifest = try await store.manifest(of: entry)
                    guard manifest.hostRecording != nil else {
                        throw CommandFailure("\(manifest.id) is not a recording made on the hosts: it has no files to offload")
                    }
                    let handle = try store.handle(of: entry)
                    let outcome = try await rig.withPool(logger: logger, clockSamples: 2) { pool -> OffloadOutcome in
                        guard let claim = await store.claim(handle) else {
                            throw CommandFailure("\(manifest.id) is being written by another camrig process; try again when it has finished")
                        }
                        defer { claim.release() }
                        // Read again now that it is ours: another offload may have finished it meanwhile.
                        guard let current = try await store.reread(handle)?.manifest else {
                            return OffloadOutcome(id: manifest.id, directory: handle.location.captureLocation, state: "complete")
                        }
                        let manifest = current
                        return await StorageWork.offload(
                            store, manifest: manifest, capture: handle, pool: pool, logger: logger, maxBytesPerSecond: rate.map { UInt64($0 * 1e6) } ?? 0
                        ) { done, total in
                            guard !quiet else { return }
                            Record.showProgress(
                                RecordingProgress(elapsed: .zero, duration: .zero, framesPerCamera: [], sets: 0, offloadedBytes: done, offloadTotalBytes: total))
                        }
                    }
                    return (manifest, outcome)
                }
                if !quiet && isatty(STDERR_FILENO) == 1 { FileHandle.standardError.write(Data("\n".utf8)) }
                if output.json {
                    try printJSON(outcome, snakeCase: true)
                } else {
                    for name in outcome.offloaded { print("offloaded \(name)") }
                    for name in outcome.waiting where name != outcome.manifestError { print("still on its host: \(name)") }
                    for name in outcome.lost { print("lost: \(name)") }
                    if let failure = outcome.manifestError { print("manifest not written: \(failure)") }
                    print(
                        String(
                            format: "%@: %@; %.1f MB in %.1f s (%.1f MB/s)", manifest.id, outcome.state, Double(outcome.bytes) / 1e6, outcome.seconds,
                            outcome.seconds > 0 ? Double(outcome.bytes) / 1e6 / outcome.seconds : 0))
                }
                if !outcome.waiting.isEmpty { throw ExitCode(2) }
            } catch let exit as ExitCode {
                throw exit
            } catch {
                throw userFacing(error)
            }
        }
    }
}
