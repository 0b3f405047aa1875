import Foundation

/// How captures are named, and the names of the rigs that make them.
public enum CaptureNaming {
    /// The ids a capture of `kind` begun at `date` may take, in order: `20261126-053000-photo`, then
    /// `20261126-053000-photo-2`, `-3`, … (1000 in all).
    ///
    /// A store takes the first that is both free in its own place (a directory it makes, a prefix with no
    /// object) and reserved in the catalog (`CaptureCatalog.reserve`), so that coordinators sharing a
    /// catalog never give two captures one id.
    public static func candidates(kind: String, date: Date) -> some Sequence<String> {
        let base = "\(stamp(date))-\(kind)"
        return (1...1000).lazy.map { $0 == 1 ? base : "\(base)-\($0)" }
    }

    /// `date` as an id's time: `yyyyMMdd-HHmmss`, UTC.
    static func stamp(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyyMMdd-HHmmss"
        return formatter.string(from: date)
    }

    /// `date` as a catalog's `created`: ISO 8601, UTC, with milliseconds, as manifests write it.
    public static func created(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: date)
    }

    /// This host's name (up to its first dot): the rig's name when neither `--rig-name` nor the rig file's
    /// `name:` gives one.
    public static var hostRig: String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "rig" }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let short = String(name.prefix { $0 != "." })
        return (try? checkRig(short, from: "the host name")) ?? "rig"
    }

    /// `name` if it can name a rig: 1 to 64 letters, digits, `.`, `_` or `-`. `source` says where it came
    /// from, for the error.
    @discardableResult
    public static func checkRig(_ name: String, from source: String) throws -> String {
        let allowed = name.unicodeScalars.allSatisfy { scalar in
            scalar.isASCII && (CharacterSet.alphanumerics.contains(scalar) || scalar == "." || scalar == "_" || scalar == "-")
        }
        guard (1...64).contains(name.count), allowed else {
            throw StorageError("\(source) '\(name)' cannot name a rig: use 1 to 64 letters, digits, '.', '_' or '-'")
        }
        return name
    }
}
