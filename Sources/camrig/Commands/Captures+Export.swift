import ArgumentParser
import CamRigCLI
import CamRigCapture
import CamRigStorage
import Foundation

extension Captures {
    /// `camrig captures export ID --frames DIR | --videos DIR`.
    struct Export: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Write an on-host recording out as per-set image folders or per-camera videos.",
            discussion: """
                Both are trimmed to the sets every camera has a frame in: --frames writes DIR/set-NNNNNN/ with one \
                image per camera for every such set (for photogrammetry tools); --videos writes one video per camera \
                from the first such set to the last (for motion-capture tools that expect equal frame counts). \
                --sets or --seconds narrows either to part of the recording.
                """
        )

        @Argument(help: "Capture id (or a unique prefix).")
        var id: String
        @Option(name: .long, help: ArgumentHelp("Write per-set image folders here.", valueName: "dir"))
        var frames: String?
        @Option(name: .long, help: ArgumentHelp("Write per-camera videos here.", valueName: "dir"))
        var videos: String?
        @Option(name: .long, help: "Images: auto (JPEG as recorded for MJPEG, DNG for raw Bayer, PNG otherwise), png, jpeg or dng.")
        var format: String = "auto"
        @Option(name: .long, help: ArgumentHelp("Only sets A through B (grid indexes, as the manifest numbers sets).", valueName: "A:B"))
        var sets: String?
        @Option(name: .long, help: ArgumentHelp("Only sets from S to E seconds after the recording's start.", valueName: "S:E"))
        var seconds: String?
        @OptionGroup var captures: CaptureOptions
        @OptionGroup var output: OutputOptions

        func validate() throws {
            guard (frames == nil) != (videos == nil) else { throw ValidationError("give one of --frames DIR and --videos DIR") }
            guard RecordingExport.ImageFormat(rawValue: format) != nil else {
                throw ValidationError("--format must be one of \(RecordingExport.ImageFormat.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            guard sets == nil || seconds == nil else { throw ValidationError("give --sets or --seconds, not both") }
            _ = try selection()
        }

        func selection() throws -> RecordingExport.Selection {
            func pair(_ text: String, _ name: String) throws -> (Double, Double) {
                let parts = text.split(separator: ":", omittingEmptySubsequences: false)
                guard parts.count == 2, let a = Double(parts[0]), let b = Double(parts[1]), a >= 0, a <= b else {
                    throw ValidationError("--\(name) \(text): give FROM:TO with 0 ≤ FROM ≤ TO")
                }
                return (a, b)
            }
            if let sets {
                let (a, b) = try pair(sets, "sets")
                guard a == a.rounded(), b == b.rounded() else { throw ValidationError("--sets takes whole set numbers") }
                return .sets(Int(a)...Int(b))
            }
            if let seconds {
                let (a, b) = try pair(seconds, "seconds")
                return .seconds(a...b)
            }
            return .all
        }

        func run() async throws {
            do {
                let quiet = output.json
                // A capture in an object store is exported from a copy of its recorded files, fetched into
                // this machine's state folder (on disk, not in memory) and removed afterwards.
                var fetched: URL?
                defer { if let fetched { try? FileManager.default.removeItem(at: fetched) } }
                let (manifest, folder) = try await captures.withStorage(logger: output.makeLogger()) { store -> (CaptureManifest, URL) in
                    let entry = try await CaptureOptions.entry(id, in: store)
                    if let local = store as? CaptureStore {
                        return (try local.manifest(of: entry), local.root.appendingPathComponent(entry.directory))
                    }
                    guard let objects = store as? ObjectCaptureStore else { throw CommandFailure("cannot export from \(store.storeURL)") }
                    let manifest = try await objects.manifest(of: entry)
                    guard let recording = manifest.hostRecording else {
                        throw CommandFailure("capture \(entry.id) is not a recording made on the hosts: there is nothing to export")
                    }
                    let files = recording.tracks.flatMap(\.files)
                    guard files.allSatisfy(\.offloaded) else {
                        throw CommandFailure("capture \(entry.id) has files still on its hosts: `camrig captures offload \(entry.id)` first")
                    }
                    let folder = captures.stateDirectory.appendingPathComponent("exports").appendingPathComponent("\(entry.id)-\(UUID().uuidString.prefix(8))")
                    fetched = folder
                    var reported: UInt64 = 0
                    try await objects.download(files, of: try objects.handle(of: entry), into: folder) { copied, total in
                        guard !quiet, copied == total || copied - reported >= 64 << 20 else { return }
                        reported = copied
                        FileHandle.standardError.write(Data("fetched \(copied >> 20)/\(total >> 20) MiB from \(store.storeURL)\n".utf8))
                    }
                    return (manifest, folder)
                }
                let selection = try selection()
                let report: RecordingExport.Report
                if let frames {
                    report = try RecordingExport.frames(
                        of: manifest, in: folder, into: URL(fileURLWithPath: frames), format: RecordingExport.ImageFormat(rawValue: format)!,
                        selection: selection
                    ) { done, total in
                        guard !quiet, done % 50 == 0 || done == total else { return }
                        FileHandle.standardError.write(Data("exported \(done)/\(total) images\n".utf8))
                    }
                } else {
                    report = try RecordingExport.videos(of: manifest, in: folder, into: URL(fileURLWithPath: videos!), selection: selection)
                }
                if output.json {
                    try printJSON(report, snakeCase: true)
                } else if frames != nil {
                    print("\(report.sets) sets (\(report.firstSet)…\(report.lastSet)), \(report.files.count) images in \(report.directory)")
                    if !report.skippedIncompleteSets.isEmpty {
                        print("left out \(report.skippedIncompleteSets.count) set(s) a camera has no frame in: \(report.skippedIncompleteSets.prefix(20).map(String.init).joined(separator: ", "))")
                    }
                } else {
                    print("\(report.files.count) videos of \(report.sets) frames each (sets \(report.firstSet)…\(report.lastSet)) in \(report.directory)")
                }
            } catch {
                throw userFacing(error)
            }
        }
    }
}
