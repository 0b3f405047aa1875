/// A sink that can say whether one of a recording's files is already in a capture, whole: what an offload
/// asks when the file's agent no longer holds it (deleted after an acknowledgement whose record was
/// never written), before it calls the file lost.
public protocol RecordedFileLookup: Sendable {
    /// Whether file `name` of `capture` is there with `size` bytes and SHA-256 `sha256` (hex). Throws
    /// when the place cannot be asked (a store that does not answer).
    func lookUp(_ name: String, size: UInt64, sha256: String, in capture: CaptureHandle) async throws
        -> RecordedFileFound
}

/// What a capture holds under a recorded file's name.
public enum RecordedFileFound: Sendable, Equatable {
    /// The file, whole: its size and SHA-256 are those its host recorded.
    case matches
    /// No such file (or only part of it).
    case absent
    /// Other bytes under its name: what they are, in words.
    case differs(String)
}
