import CamRigDeviceModel

/// A recorded track's frame table (`STEM.frames.csv`, written on the camera's host): one row per grid
/// index (and per duplicate frame), saying which frame of which video file was exposed there and when on
/// the rig's clock. Pure parsing and set building: the offload reads the files, this reads the text.
public struct RecordedFrameTable: Sendable, Equatable {
    /// One row of the table; `line` writes it and `init(line:)` reads it, the table's only codec.
    public struct Row: Sendable, Equatable {
        /// What a row is: a frame, or a grid index without one.
        public enum Flag: String, Sendable, Equatable, CaseIterable {
            /// An ordinary frame, the first at its index.
            case frame = ""
            /// A second frame at an index: stored, and flagged.
            case duplicate
            /// An index no frame fell on.
            case gap
            /// A frame the agent took that did not reach the disk before the agent stopped, or an index the
            /// agent never reached.
            case lost
        }

        public var gridIndex: Int
        /// The frame's number in the track (all segments), nil for a gap or a lost frame.
        public var frame: Int?
        /// The video segment it is in.
        public var segment: Int?
        public var rigTimeNs: Int64
        public var uncertaintyNs: Int64?
        public var sensorTimestampNs: Int64?
        public var marks: String
        public var flag: Flag

        /// The flag as the table spells it: `gap`, `lost` or `duplicate`; empty for an ordinary frame.
        public var flags: String { flag.rawValue }

        /// A stored frame: `frame` is its number in the track (all segments, from 0), `segment` its file's.
        public init(
            gridIndex: Int, frame: Int, segment: Int, rigTimeNs: Int64, uncertaintyNs: Int64, sensorTimestampNs: Int64, marks: String,
            duplicate: Bool
        ) {
            self.gridIndex = gridIndex
            self.frame = frame
            self.segment = segment
            self.rigTimeNs = rigTimeNs
            self.uncertaintyNs = uncertaintyNs
            self.sensorTimestampNs = sensorTimestampNs
            self.marks = marks
            self.flag = duplicate ? .duplicate : .frame
        }

        /// A grid index without a frame (`gap` or `lost`), at its grid instant on the rig's clock.
        public init(missing gridIndex: Int, rigTimeNs: Int64, flag: Flag) {
            self.gridIndex = gridIndex
            self.rigTimeNs = rigTimeNs
            self.marks = ""
            self.flag = flag
        }

        /// The row without its frame: what a frame that never reached the disk leaves (`lost`).
        public var lost: Row { Row(missing: gridIndex, rigTimeNs: rigTimeNs, flag: .lost) }

        /// The row as a line of the table, with its newline.
        public var line: String {
            func field<T>(_ value: T?) -> String { value.map { "\($0)" } ?? "" }
            return "\(gridIndex),\(field(frame)),\(field(segment)),\(rigTimeNs),\(field(uncertaintyNs)),\(field(sensorTimestampNs)),\(marks),\(flag.rawValue)\n"
        }

        /// Reads a line of the table (without its newline); nil for one that is not a row.
        public init?<Line: StringProtocol>(line: Line) {
            let fields = line.split(separator: ",", omittingEmptySubsequences: false)
            guard fields.count == 8, let index = Int(fields[0]), let rigTime = Int64(fields[3]), let flag = Flag(rawValue: String(fields[7])) else {
                return nil
            }
            let frame = Int(fields[1])
            // A frame row names its frame and file; a gap or lost row names neither.
            guard (flag == .gap || flag == .lost) == (frame == nil), frame == nil || Int(fields[2]) != nil else { return nil }
            self.gridIndex = index
            self.frame = frame
            self.segment = Int(fields[2])
            self.rigTimeNs = rigTime
            self.uncertaintyNs = Int64(fields[4])
            self.sensorTimestampNs = Int64(fields[5])
            self.marks = String(fields[6])
            self.flag = flag
        }
    }

    public var rows: [Row]

    public static let header = "grid_index,frame,file,exposure_start_rig_ns,uncertainty_ns,sensor_timestamp_ns,sensor_timestamp_marks,flags"

    /// The table with `rows`.
    public init(rows: [Row]) {
        self.rows = rows
    }

    /// Parses the table; a line that is not a row of it is an error naming the line.
    public init(parsing text: String) throws {
        var rows: [Row] = []
        for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: true).enumerated() {
            if number == 0 {
                guard line == Self.header else { throw TableError("line 1 is not the frame table's header") }
                continue
            }
            guard let row = Row(line: line) else { throw TableError("line \(number + 1) is not a row: \(line.prefix(80))") }
            rows.append(row)
        }
        self.rows = rows
    }

    /// Reads what an agent stopped mid-write left: a last line without its newline (torn) is not a row,
    /// and neither is any other line that does not read as one; both are counted in `skipped`.
    public init(recovering text: String) {
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        if lines.last?.isEmpty == true { lines.removeLast() } else if !lines.isEmpty { lines.removeLast() }
        var rows: [Row] = []
        var skipped = text.hasSuffix("\n") || text.isEmpty ? 0 : 1
        for line in lines.dropFirst(lines.first == Substring(Self.header) ? 1 : 0) {
            if let row = Row(line: line) { rows.append(row) } else { skipped += 1 }
        }
        self.rows = rows
        self.skipped = skipped
    }

    /// Lines `init(recovering:)` could not read.
    public private(set) var skipped = 0

    /// The whole table as a file holds it: the header, then every row.
    public var text: String { Self.header + "\n" + rows.map(\.line).joined() }

    public struct TableError: Error, CustomStringConvertible {
        public var description: String
        init(_ description: String) { self.description = description }
    }

    /// The first frame at each grid index (duplicates left out).
    public var framesByIndex: [Int: Row] {
        var byIndex: [Int: Row] = [:]
        for row in rows where row.frame != nil && byIndex[row.gridIndex] == nil { byIndex[row.gridIndex] = row }
        return byIndex
    }

    /// Frames per video segment, in segment order.
    public var framesPerSegment: [Int] {
        var counts: [Int] = []
        for row in rows {
            guard row.frame != nil, let segment = row.segment else { continue }
            while counts.count <= segment { counts.append(0) }
            counts[segment] += 1
        }
        return counts
    }

    /// The sync sets of an on-host recording: one per grid index, each camera's first frame there (its
    /// video file and place in it), the set's skew over the frames' rig-clock exposure starts, and
    /// whether every camera has one.
    public static func sets(
        tables: [(camera: Int, videos: [String], table: RecordedFrameTable)], cameraCount: Int, recording: CaptureManifest.HostRecording
    ) -> [CaptureManifest.SyncSet] {
        let indexed = tables.map { entry -> (camera: Int, videos: [String], byIndex: [Int: Row], starts: [Int]) in
            var starts: [Int] = []
            var total = 0
            for count in entry.table.framesPerSegment {
                starts.append(total)
                total += count
            }
            return (entry.camera, entry.videos, entry.table.framesByIndex, starts)
        }
        return (0..<recording.gridCount).map { k in
            var frames: [CaptureManifest.Frame] = []
            for track in indexed {
                guard let row = track.byIndex[k], let number = row.frame else { continue }
                let segment = row.segment ?? 0
                let file = track.videos.indices.contains(segment) ? track.videos[segment] : ""
                // The table spells its marks with hyphens (`start-of-exposure`); the manifest as every manifest does.
                let marks = TimestampMarks(name: row.marks)?.manifestName ?? row.marks
                var frame = CaptureManifest.Frame(
                    camera: track.camera, sequence: UInt64(number), file: file, timestampNs: row.rigTimeNs,
                    agentTimestampNs: row.sensorTimestampNs ?? 0, marks: marks, uncertaintyNs: row.uncertaintyNs ?? 0)
                frame.videoFrame = number - (track.starts.indices.contains(segment) ? track.starts[segment] : 0)
                frames.append(frame)
            }
            frames.sort { $0.camera < $1.camera }
            let times = frames.map(\.timestampNs)
            let present = Set(frames.map(\.camera))
            let instant = recording.startNs + Int64((Double(k) * recording.gridPeriodNs).rounded())
            return CaptureManifest.SyncSet(
                index: k, complete: present.count == cameraCount, referenceTimeNs: instant,
                skewNs: (times.max() ?? 0) - (times.min() ?? 0), missingCameras: (0..<cameraCount).filter { !present.contains($0) },
                frames: frames, gridInstantNs: instant)
        }
    }
}
