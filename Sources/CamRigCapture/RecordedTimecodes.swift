/// A recorded track's timecodes (`STEM.timecodes.txt`): Matroska's "timecode format v2", as
/// `mkvmerge --timestamps` and `rpicam-vid --save-pts` read and write it: one line per stored frame, its
/// rig-clock time in milliseconds with six decimals.
public enum RecordedTimecodes {
    public static let header = "# timecode format v2\n"

    /// A frame's line: milliseconds with nanosecond digits.
    public static func line(rigTimeNs: Int64) -> String {
        let milliseconds = rigTimeNs / 1_000_000
        let rest = String(abs(rigTimeNs % 1_000_000))
        let sign = rigTimeNs < 0 && milliseconds == 0 ? "-" : ""
        return "\(sign)\(milliseconds).\(String(repeating: "0", count: 6 - rest.count))\(rest)\n"
    }

    /// The file for `table`'s stored frames, in its order.
    public static func text(for table: RecordedFrameTable) -> String {
        header + table.rows.filter { $0.frame != nil }.map { line(rigTimeNs: $0.rigTimeNs) }.joined()
    }
}
