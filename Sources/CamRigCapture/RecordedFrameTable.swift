import CamRigDeviceModel

/// A recorded track's frame table (`STEM.frames.csv`, written on the camera's host): one row per grid
/// index (and per duplicate frame), saying which frame of which video file was exposed there and when on
/// the rig's clock. Pure parsing and set building: the offload reads the files, this reads the text.
public struct RecordedFrameTable: Sendable, Equatable {
    public struct Row: Sendable, Equatable {
        public var gridIndex: Int
        /// The frame's number in the track (all segments), nil for a gap or a lost frame.
        public var frame: Int?
        /// The video segment it is in.
        public var segment: Int?
        public var rigTimeNs: Int64
        public var uncertaintyNs: Int64?
        public var sensorTimestampNs: Int64?
        public var marks: String
        /// `gap`, `lost` or `duplicate`; empty for an ordinary frame.
        public var flags: String
    }

    public var rows: [Row]

    public static let header = "grid_index,frame,file,exposure_start_rig_ns,uncertainty_ns,sensor_timestamp_ns,sensor_timestamp_marks,flags"

    /// Parses the table; a line that is not a row of it is an error naming the line.
    public init(parsing text: String) throws {
        var rows: [Row] = []
        for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: true).enumerated() {
            if number == 0 {
                guard line == Self.header else { throw TableError("line 1 is not the frame table's header") }
                continue
            }
            let fields = line.split(separator: ",", omittingEmptySubsequences: false)
            guard fields.count == 8, let index = Int(fields[0]), let rigTime = Int64(fields[3]) else {
                throw TableError("line \(number + 1) is not a row: \(line.prefix(80))")
            }
            rows.append(
                Row(
                    gridIndex: index, frame: Int(fields[1]), segment: Int(fields[2]), rigTimeNs: rigTime, uncertaintyNs: Int64(fields[4]),
                    sensorTimestampNs: Int64(fields[5]), marks: String(fields[6]), flags: String(fields[7])))
        }
        self.rows = rows
    }

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
