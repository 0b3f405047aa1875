extension RecordedFrameTable {
    /// Rows flagged `gap`: grid instants the camera delivered no frame for.
    public var gapCount: Int { rows.filter { $0.flag == .gap }.count }
    /// Rows flagged `lost`: frames that never reached the host's disk, and instants its agent never
    /// reached, in a track cut short. Counted apart from gaps: the camera did not drop them.
    public var lostCount: Int { rows.filter { $0.flag == .lost }.count }
}
