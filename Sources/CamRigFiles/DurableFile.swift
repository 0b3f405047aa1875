import Foundation

#if canImport(Glibc)
    import Glibc

    private let systemWrite = Glibc.write
#elseif canImport(Darwin)
    import Darwin

    private let systemWrite = Darwin.write
#endif

/// The one way CamRig writes a file that must not be seen half-written: capture images and manifests,
/// the agent's result spool, certificates, keys, revocation lists and token lists.
///
/// The bytes go to a temporary name beside the target (or in `temporaryDirectory`), are flushed to
/// the disk, and the file is renamed into place; then the directory is flushed so the rename itself
/// survives. After a crash the target is either whole or absent, and once `write` returns it survives
/// a power cut. This blocks on the disk: call it from a thread that may block, never from an event
/// loop or an actor.
public enum DurableFile {
    /// How much a write promises.
    public enum Guarantee: Sendable, Hashable {
        /// Whole or absent after a crash, and kept after a power cut once `write` returns: the file
        /// and its directory are flushed to the disk.
        case durable
        /// As `durable`, except that the directory is not flushed: the caller flushes it once after
        /// writing many files there (`flushDirectory`), which costs one flush instead of one per file.
        /// Until then a power cut may lose the file's name.
        case durableOnceDirectoryFlushed
        /// Whole or absent after a crash of this process, but not flushed: a power cut may lose it.
        /// For scratch files that are rewritten durably later (a recording's spilled frames).
        case atomic
    }

    /// Writes `bytes` to `url`, replacing any file there.
    ///
    /// - Parameters:
    ///   - permissions: of the new file (before the umask).
    ///   - temporaryDirectory: where the temporary file is made; must be on the target's file system.
    ///     The target's directory when `nil`.
    /// - Throws: `DurableFileError`, naming the step, the path and the system's reason.
    public static func write(
        _ bytes: UnsafeRawBufferPointer,
        to url: URL,
        permissions: mode_t = 0o644,
        guarantee: Guarantee = .durable,
        temporaryDirectory: URL? = nil
    ) throws {
        let directory = url.deletingLastPathComponent()
        // A name of its own per write: two writers of one target never share a temporary file, and a
        // leftover from a crash (hidden, ends in .partial) is never mistaken for the target.
        let temporary = (temporaryDirectory ?? directory)
            .appendingPathComponent(
                ".\(url.lastPathComponent).\(String(UInt32.random(in: 0...UInt32.max), radix: 16)).partial")
        let fd = open(temporary.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, permissions)
        guard fd >= 0 else { throw DurableFileError(.create, path: temporary.path, errno: errno) }
        var closed = false
        do {
            var offset = 0
            while offset < bytes.count {
                let written = systemWrite(fd, bytes.baseAddress! + offset, bytes.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    throw DurableFileError(.write, path: temporary.path, errno: errno)
                }
                offset += written
            }
            if guarantee != .atomic, fsync(fd) != 0 {
                throw DurableFileError(.flush, path: temporary.path, errno: errno)
            }
            closed = true
            // A failed close can be a failed write reported late (NFS, quota).
            if close(fd) != 0 { throw DurableFileError(.write, path: temporary.path, errno: errno) }
            if rename(temporary.path, url.path) != 0 { throw DurableFileError(.rename, path: url.path, errno: errno) }
        } catch {
            if !closed { close(fd) }
            unlink(temporary.path)
            throw error
        }
        if guarantee == .durable { try flushDirectory(directory) }
    }

    /// Writes `bytes` (`Data`, `[UInt8]`, …) to `url` like the `UnsafeRawBufferPointer` variant.
    public static func write(
        _ bytes: some ContiguousBytes,
        to url: URL,
        permissions: mode_t = 0o644,
        guarantee: Guarantee = .durable,
        temporaryDirectory: URL? = nil
    ) throws {
        try bytes.withUnsafeBytes {
            try write(
                $0, to: url, permissions: permissions, guarantee: guarantee, temporaryDirectory: temporaryDirectory)
        }
    }

    /// Flushes a directory's entries to the disk, so that files created, renamed or removed in it stay
    /// so after a power cut.
    /// Appends `bytes` to the file at `url` (created if needed) and flushes it to the disk, with its
    /// directory when the file is new. A crash during the append leaves at most a torn last record,
    /// which a reader of line-based records skips.
    public static func append(_ record: [UInt8], to url: URL, permissions: mode_t = 0o644) throws {
        let existed = FileManager.default.fileExists(atPath: url.path)
        let fd = open(url.path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, permissions)
        guard fd >= 0 else { throw DurableFileError(.create, path: url.path, errno: errno) }
        defer { close(fd) }
        // A record torn by a crash has no line end: end it, so this record starts on a line of its own.
        var bytes = record
        let size = lseek(fd, 0, SEEK_END)
        if size > 0 {
            var last: UInt8 = 0
            if pread(fd, &last, 1, size - 1) == 1, last != UInt8(ascii: "\n") { bytes.insert(UInt8(ascii: "\n"), at: 0) }
        }
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { Foundation.write(fd, $0.baseAddress! + offset, bytes.count - offset) }
            if written < 0 {
                if errno == EINTR { continue }
                throw DurableFileError(.write, path: url.path, errno: errno)
            }
            offset += written
        }
        guard fsync(fd) == 0 else { throw DurableFileError(.flush, path: url.path, errno: errno) }
        if !existed { try flushDirectory(url.deletingLastPathComponent()) }
    }

    public static func flushDirectory(_ directory: URL) throws {
        let fd = open(directory.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw DurableFileError(.flushDirectory, path: directory.path, errno: errno) }
        defer { close(fd) }
        // Some file systems cannot flush a directory and say so; their entries are as safe as they get.
        if fsync(fd) != 0, errno != EINVAL, errno != EROFS {
            throw DurableFileError(.flushDirectory, path: directory.path, errno: errno)
        }
    }
}

/// A durable write that failed: which step, on which path, and the system's reason.
public struct DurableFileError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The step of a durable write.
    public enum Step: String, Sendable, Hashable {
        case create = "create"
        case write = "write"
        case flush = "flush"
        case rename = "move into place"
        case flushDirectory = "flush the directory"
    }

    public var step: Step
    /// The file (or, for `.flushDirectory`, the directory) the step failed on.
    public var path: String
    /// The `errno` the system reported.
    public var code: Int32
    /// The system's text for `code` (`strerror`).
    public var reason: String

    public init(_ step: Step, path: String, errno code: Int32) {
        self.step = step
        self.path = path
        self.code = code
        reason = String(cString: strerror(code))
    }

    public var description: String {
        let hint =
            switch code {
            case ENOSPC, EDQUOT: "; free some space or choose another directory"
            case EACCES, EPERM, EROFS: "; check that the directory is writable"
            default: ""
            }
        return "cannot \(step.rawValue) \(path): \(reason)\(hint)"
    }
}
