extension TimestampMarks {
    /// The mark's name in capture manifests (a frame's `marks`) and JSON output: `start_of_exposure`,
    /// `end_of_frame` or `dequeue`, snake_case as the manifests' other values. An agent's frame table
    /// (`STEM.frames.csv`, PROTOCOL.md §5) spells it as `rawValue` does, with hyphens.
    public var manifestName: String {
        switch self {
        case .startOfExposure: "start_of_exposure"
        case .endOfFrame: "end_of_frame"
        case .dequeue: "dequeue"
        }
    }

    /// The mark `name` names in either spelling: a manifest's (`start_of_exposure`), or a frame table's and
    /// that of manifests of host recordings written before their frames' marks were spelled as every
    /// other manifest's (`start-of-exposure`). `nil` for a name this version does not know.
    public init?(name: String) {
        switch name {
        case "start_of_exposure", Self.startOfExposure.rawValue: self = .startOfExposure
        case "end_of_frame", Self.endOfFrame.rawValue: self = .endOfFrame
        case "dequeue": self = .dequeue
        default: return nil
        }
    }
}
