import CamRigDeviceModel
import CamRigObjectStore
import Foundation

/// Where captures go: the coordinator hands a sink the frames and the manifest of every capture, and the
/// sink stores them (`CaptureStore` writes image files, `manifest.json` and a catalog).
///
/// The coordinator calls a sink from its own tasks, never from an actor that answers the network, and
/// may call it for many frames at once. A sink does its file I/O and image encoding on threads of its
/// own choosing, off the caller's executor: a slow disk or a large PNG then delays that frame only.
///
/// A capture goes `begin` → any number of `write` (photos) or `spill` then `convert` (recordings) →
/// `finish`. File names are relative to the capture and chosen by the coordinator (`cam0-NAME/000042`);
/// the sink adds the extension of what it stored.
public protocol CaptureSink: Sendable {
    /// Starts a capture: a new, empty place for its files, with the capture's id.
    func begin(_ kind: CaptureKind) async throws -> CaptureHandle

    /// Stores one frame as its image file (PNG for raw pixel formats, the bytes as they came for
    /// JPEG and formats it cannot convert), durably.
    ///
    /// - Returns: the stored file's name, relative to the capture.
    func write(_ bytes: some FrameBytes, layout: FrameLayout, named stem: String, in capture: CaptureHandle)
        async throws
        -> String

    /// Keeps a recording's frame as it came, as fast as possible and without encoding it, so that the
    /// stream keeps up with the camera; `convert` turns it into its image file after the recording.
    func spill(_ bytes: some FrameBytes, layout: FrameLayout, named stem: String, in capture: CaptureHandle)
        async throws
        -> SpilledFrame

    /// Turns a spilled frame into its image file and removes the spilled bytes; the image is durable
    /// once `finish` returns.
    ///
    /// - Returns: the image file's name, relative to the capture. When this throws, the spilled file
    ///   stays where `SpilledFrame.file` says.
    func convert(_ frame: SpilledFrame, in capture: CaptureHandle) async throws -> String

    /// Stores the capture's manifest, durably with every file it lists, and lists the capture (in a
    /// catalog, if the sink keeps one).
    func finish(_ manifest: CaptureManifest, in capture: CaptureHandle) async throws

    /// Stores the manifest of a capture that has just begun (state `in_progress`, everything missing),
    /// durably and listed, so that a coordinator that dies during the capture leaves a manifest saying
    /// what it was doing.
    func started(_ manifest: CaptureManifest, in capture: CaptureHandle) async throws
    /// Records one stored result durably, before its agent is told to delete it: what a manifest is
    /// rebuilt from when the coordinator died before writing it.
    func journal(_ entry: JournalEntry, in capture: CaptureHandle) async throws
    /// Captures started but not complete (`in_progress` or `incomplete`), with what each journaled.
    func unfinished() async throws -> [UnfinishedCapture]
    /// `capture` as it is on disk now, if it is still unfinished (`nil` once complete).
    func reread(_ capture: CaptureHandle) async throws -> UnfinishedCapture?
    /// Takes `capture` for this caller alone (to collect its missing results); `nil` when a capture in
    /// progress or another collector, in this process or another, has it.
    func claim(_ capture: CaptureHandle) async -> CaptureClaim?
    /// The capture failed before `finish`: gives up this process's hold on it, leaving its manifest
    /// `in_progress` for a collector to finish.
    func abandon(_ capture: CaptureHandle) async
    /// Stores a contact sheet of the capture's set as an image file; returns its name, relative to the
    /// capture (`nil` for a sink that keeps none).
    func writeContactSheet(_ sheet: ContactSheet, in capture: CaptureHandle) async throws -> String?
    /// A contact-sheet thumbnail `width` pixels wide of a photo as delivered, or why there is none. The
    /// sink owns the image codecs (the coordinator links none): JPEG photos are decoded here.
    func thumbnail(of bytes: UnsafeRawBufferPointer, layout: FrameLayout, width: Int) -> Result<ContactSheet.Thumbnail, ContactSheet.ThumbnailRefusal>

    /// Bytes of file `name` (a recording's video or sidecar, offloaded from its host) received so far:
    /// an offload resumes from there. Its whole size once the file is complete.
    func receivedBytes(of name: String, in capture: CaptureHandle) async throws -> UInt64
    /// Writes `bytes` into file `name` at `offset` (at most `receivedBytes`); the file stays partial
    /// (and unlisted) until `completeFile`.
    func receive(_ bytes: some FrameBytes, into name: String, at offset: UInt64, in capture: CaptureHandle) async throws
    /// File `name` is whole: its SHA-256 (hex) is checked against `sha256`, then it is flushed to the disk
    /// under its name. A file that does not match is deleted and the error says so.
    func completeFile(_ name: String, size: UInt64, sha256: String, in capture: CaptureHandle) async throws
    /// The bytes of a complete file of the capture.
    func readFile(_ name: String, in capture: CaptureHandle) async throws -> [UInt8]

    /// Where the capture's agents put their results themselves (photos, recorded files), under the
    /// capture's own prefix; nil when results come through the coordinator (`write`, `receive`).
    func directUpload(for capture: CaptureHandle) -> ObjectStoreLocation?
    /// An object an agent put in the store of `directUpload`: checked against what the store holds, and
    /// named as the capture lists it (relative to the capture). The agent is told to delete its copy only
    /// once the capture records the object durably (a recorded file: once the manifest lists it stored,
    /// `RecordedFileOffload`).
    func adopt(_ object: StoredObject, in capture: CaptureHandle) async throws -> String
}

/// A sink that stores no whole files (a test sink) refuses them.
public struct FilesNotStored: Error, CustomStringConvertible {
    public var description: String { "this capture sink stores no recorded files" }
    public init() {}
}

/// A capture held by one collector until `release()`.
public final class CaptureClaim: Sendable {
    private let onRelease: @Sendable () -> Void

    public init(onRelease: @escaping @Sendable () -> Void = {}) {
        self.onRelease = onRelease
    }

    public func release() { onRelease() }
}

extension CaptureSink {
    /// A sink that keeps no manifests until `finish` records nothing here.
    public func started(_ manifest: CaptureManifest, in capture: CaptureHandle) async throws {}
    /// A sink without a journal.
    public func journal(_ entry: JournalEntry, in capture: CaptureHandle) async throws {}
    /// A sink that cannot resume captures has none unfinished.
    public func unfinished() async throws -> [UnfinishedCapture] { [] }
    /// A sink that cannot resume captures has none to read again.
    public func reread(_ capture: CaptureHandle) async throws -> UnfinishedCapture? { nil }
    /// A sink without locks: every claim succeeds.
    public func claim(_ capture: CaptureHandle) async -> CaptureClaim? { CaptureClaim() }
    public func abandon(_ capture: CaptureHandle) async {}
    /// A sink that keeps no contact sheets.
    public func writeContactSheet(_ sheet: ContactSheet, in capture: CaptureHandle) async throws -> String? { nil }
    public func receivedBytes(of name: String, in capture: CaptureHandle) async throws -> UInt64 { throw FilesNotStored() }
    public func receive(_ bytes: some FrameBytes, into name: String, at offset: UInt64, in capture: CaptureHandle) async throws { throw FilesNotStored() }
    public func completeFile(_ name: String, size: UInt64, sha256: String, in capture: CaptureHandle) async throws { throw FilesNotStored() }
    public func readFile(_ name: String, in capture: CaptureHandle) async throws -> [UInt8] { throw FilesNotStored() }
    /// Results come through the coordinator.
    public func directUpload(for capture: CaptureHandle) -> ObjectStoreLocation? { nil }
    public func adopt(_ object: StoredObject, in capture: CaptureHandle) async throws -> String { throw FilesNotStored() }
    /// A sink without a JPEG decoder shows JPEG photos as undecodable.
    public func thumbnail(of bytes: UnsafeRawBufferPointer, layout: FrameLayout, width: Int) -> Result<ContactSheet.Thumbnail, ContactSheet.ThumbnailRefusal> {
        ContactSheet.thumbnail(of: bytes, layout: layout, width: width) { _ in nil }
    }
}

/// One stored result, as the capture's journal keeps it.
public struct JournalEntry: Codable, Sendable, Equatable {
    /// The agent's id of the result (acknowledged once this entry is durable).
    public var resultId: String
    public var agent: String
    public var frame: CaptureManifest.Frame

    public init(resultId: String, agent: String, frame: CaptureManifest.Frame) {
        self.resultId = resultId
        self.agent = agent
        self.frame = frame
    }
}

/// A capture that was started and is not complete: its manifest as last written and its journal.
public struct UnfinishedCapture: Sendable {
    public var handle: CaptureHandle
    public var manifest: CaptureManifest
    public var journal: [JournalEntry]

    public init(handle: CaptureHandle, manifest: CaptureManifest, journal: [JournalEntry]) {
        self.handle = handle
        self.manifest = manifest
        self.journal = journal
    }
}

/// What a capture is: one photo per camera, or a recording matched into sync sets.
public enum CaptureKind: String, Sendable, Hashable, CaseIterable {
    case photo
    case recording
}

/// One capture as its sink knows it.
public struct CaptureHandle: Sendable, Hashable {
    /// Unique within the sink (a directory name for `CaptureStore`).
    public var id: String
    public var kind: CaptureKind
    /// Where its files are (the capture's directory for `CaptureStore`).
    public var location: URL

    public init(id: String, kind: CaptureKind, location: URL) {
        self.id = id
        self.kind = kind
        self.location = location
    }
}

/// How a frame's bytes are laid out: what a sink needs to turn them into an image.
public struct FrameLayout: Sendable, Hashable {
    public var pixelFormat: PixelFormat
    public var dimensions: Dimensions
    /// Bytes from the start of one row to the next (rows may be padded); ignored for compressed formats.
    public var bytesPerLine: Int

    public init(pixelFormat: PixelFormat, dimensions: Dimensions, bytesPerLine: Int) {
        self.pixelFormat = pixelFormat
        self.dimensions = dimensions
        self.bytesPerLine = bytesPerLine
    }
}

/// A recording's frame kept as it came, waiting to become its image file.
public struct SpilledFrame: Sendable, Hashable {
    /// Relative to the capture.
    public var file: String
    /// The name the image file gets (without extension), relative to the capture.
    public var stem: String
    public var layout: FrameLayout

    public init(file: String, stem: String, layout: FrameLayout) {
        self.file = file
        self.stem = stem
        self.layout = layout
    }
}

/// A frame's bytes, readable in place: a sink reads received frames where they are instead of copying
/// them first.
public protocol FrameBytes: Sendable {
    /// Calls `body` with the bytes; the pointer is valid only during the call.
    func withFrameBytes<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result
}

extension FrameBytes where Self: ContiguousBytes {
    /// The bytes, as `withUnsafeBytes` gives them.
    public func withFrameBytes<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        try withUnsafeBytes(body)
    }
}

extension Array: FrameBytes where Element == UInt8 {}

extension Data: FrameBytes {}

/// How a capture names its files.
public enum CaptureFileNames {
    /// The stem of a photo of camera stem `stem`: a deferred photo's proxy beside its final
    /// (`STEM-proxy`), each image of an exposure bracket after the first under a name of its own
    /// (`STEM-bN`).
    public static func photo(_ stem: String, proxy: Bool, bracketIndex: Int) -> String {
        proxy ? stem + "-proxy" : bracketIndex > 1 ? stem + "-b\(bracketIndex)" : stem
    }

    /// Whether `relative` may name a file inside a capture: '/'-separated parts, none empty or starting
    /// with '.' (so no `..`, and none of the hidden files stores keep).
    public static func isValid(_ relative: String) -> Bool {
        let components = relative.split(separator: "/", omittingEmptySubsequences: false)
        return !relative.isEmpty && !components.contains { $0.isEmpty || $0.hasPrefix(".") }
    }
}

extension URL {
    /// Where a capture is, as an operator reads it: a folder's path, or the store's `s3://…` address.
    public var captureLocation: String { isFileURL ? path : absoluteString }
}
