import CamRigCapture
import CamRigFiles
import CamRigMedia
import CamRigWire
import Foundation

extension AgentRecordings {
    /// Closes the recordings a previous run of the agent left open (it was killed or lost power while
    /// recording): every video segment is rewritten as a closed file with what could be read of it, the
    /// frame table loses the rows of frames that did not reach the disk (flagged `lost`), and the track is
    /// marked cut short. Tracks that had closed before keep what they were. Returns how many bytes the
    /// rewriting added to the recordings' folder (negative when it freed some).
    @discardableResult
    nonisolated func closeCutShortRecordings() -> Int64 {
        var change: Int64 = 0
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []).sorted()
        for name in names {
            let folder = directory.appendingPathComponent(name)
            guard let data = try? Data(contentsOf: folder.appendingPathComponent("state.pb")),
                let summary = try? WireRecordingSummary(serializedBytes: data), summary.state == .recording,
                let requestData = try? Data(contentsOf: folder.appendingPathComponent("request.pb")),
                let request = try? WireStartRecording(serializedBytes: requestData)
            else { continue }
            let grid = RecordingGrid(start: request.startAtNs, period: max(request.gridPeriodNs, 1), count: Int64(max(request.frameCount, 1)))
            let before = Int64(Self.size(of: folder))
            defer { change += Int64(Self.size(of: folder)) - before }
            var tracks: [WireRecordedTrack] = []
            for track in request.tracks {
                let known = summary.tracks.first { $0.deviceID == track.deviceID }
                if let known, known.state != .recording {
                    tracks.append(known)
                    continue
                }
                tracks.append(Self.repair(track, format: known?.format, in: folder, grid: grid, clock: RigClockMapping(request.clock)))
            }
            do {
                try Self.writeState(.cutShort, tracks: tracks, of: request, in: folder)
            } catch {
                continue
            }
            let logger = self.logger
            logger.warning(
                "closed a recording cut short by the agent's stop",
                metadata: ["recording": "\(name)", "frames": "\(tracks.map(\.frames))", "errors": "\(tracks.map(\.error).filter { !$0.isEmpty })"])
        }
        return change
    }

    /// Closes one track left open.
    static func repair(_ track: WireRecordingTrack, format: WireFormat?, in folder: URL, grid: RecordingGrid, clock: RigClockMapping) -> WireRecordedTrack {
        let stem = track.fileStem
        var recorded = WireRecordedTrack()
        recorded.deviceID = track.deviceID
        recorded.fileStem = stem
        recorded.codec = track.codec
        recorded.state = .cutShort
        if let format { recorded.format = format }
        var problems: [String] = []
        // Segments in order, and the frames each holds. Only the last can be open: the others were closed
        // when the next one began.
        var segments: [String] = []
        while FileManager.default.fileExists(atPath: folder.appendingPathComponent(TrackFiles.segmentName(stem: stem, segment: segments.count)).path) {
            segments.append(TrackFiles.segmentName(stem: stem, segment: segments.count))
        }
        var kept: [Int] = []
        for (index, name) in segments.enumerated() {
            let url = folder.appendingPathComponent(name)
            if index < segments.count - 1 {
                kept.append((try? MediaFile.frameCount(url.path)) ?? 0)
                continue
            }
            let repaired = folder.appendingPathComponent(".\(name).repaired")
            try? FileManager.default.removeItem(at: repaired)
            do {
                let size = (try? FileManager.default.attributesOfItem(atPath: url.path)[.size] as? NSNumber)?.uint64Value ?? 0
                var stats = statvfs()
                if statvfs(folder.path, &stats) == 0, UInt64(stats.f_bavail) * UInt64(stats.f_frsize) < size + (64 << 20) {
                    throw MediaFileError("no room on the disk to rewrite it (\(size >> 20) MiB)")
                }
                let frames = try MediaFile.repair(url.path, into: repaired.path)
                guard rename(repaired.path, url.path) == 0 else {
                    throw MediaFileError("cannot put the closed file in place: \(String(cString: strerror(errno)))")
                }
                try? DurableFile.flushDirectory(folder)
                kept.append(frames)
            } catch {
                // Left as the agent's stop left it: readable up to its last whole cluster, and offered as it is.
                try? FileManager.default.removeItem(at: repaired)
                kept.append((try? MediaFile.frameCount(url.path)) ?? 0)
                problems.append("\(name) was not rewritten (\(error)); it is offered as the agent's stop left it")
            }
        }
        // The frame table: rows for frames beyond what the videos kept become `lost`.
        let tableURL = folder.appendingPathComponent("\(stem).frames.csv")
        let timecodesURL = folder.appendingPathComponent("\(stem).timecodes.txt")
        let read = RecordedFrameTable(recovering: (try? String(contentsOf: tableURL, encoding: .utf8)) ?? "")
        // Each segment's first frame number: frames are numbered across the track's segments.
        var base: [Int: Int] = [:]
        for row in read.rows {
            if let frame = row.frame, let segment = row.segment { base[segment] = min(base[segment] ?? frame, frame) }
        }
        var rows: [RecordedFrameTable.Row] = []
        for row in read.rows {
            let kept = row.frame.flatMap { frame in row.segment.map { segment in kept.indices.contains(segment) && frame - (base[segment] ?? 0) < kept[segment] } }
            switch (row.flag, kept) {
            case (.gap, _), (.lost, _), (.frame, true), (.duplicate, true): rows.append(row)
            // A frame the videos do not hold: its index is lost (a duplicate's index has its first frame).
            case (.frame, _): rows.append(row.lost)
            case (.duplicate, _): continue
            }
        }
        // Grid indexes the agent never reached.
        let reached = Int64(read.rows.map(\.gridIndex).max() ?? -1) + 1
        if reached < grid.count {
            for index in reached..<grid.count {
                rows.append(RecordedFrameTable.Row(missing: Int(index), rigTimeNs: clock.rigTime(ofAgent: grid.instant(index)), flag: .lost))
            }
        }
        let table = RecordedFrameTable(rows: rows)
        let stored = rows.filter { $0.frame != nil }
        let frames = UInt64(stored.count)
        let duplicates = UInt64(stored.filter { $0.flag == .duplicate }.count)
        // Gaps are indexes no frame fell on; lost ones are the table's to tell, counted apart.
        let gaps = UInt64(rows.filter { $0.flag == .gap }.count)
        let first = Int64(stored.first?.gridIndex ?? -1)
        let last = Int64(stored.last?.gridIndex ?? -1)
        do {
            try DurableFile.write(Data(table.text.utf8), to: tableURL)
            try DurableFile.write(Data(RecordedTimecodes.text(for: table).utf8), to: timecodesURL)
        } catch {
            problems.append("the frame table: \(error)")
        }
        recorded.frames = frames
        recorded.gaps = gaps
        recorded.duplicates = duplicates
        recorded.firstGridIndex = first
        recorded.lastGridIndex = last
        recorded.files = TrackSummary.files(in: folder, names: segments + ["\(stem).frames.csv", "\(stem).timecodes.txt"])
        try? DurableFile.flushDirectory(folder)
        recorded.error = (["the agent stopped during the recording; the track was closed at its next start"] + problems).joined(separator: "; ")
        try? TrackSummary(recorded, grid: grid, clock: clock, cutShort: true).write(to: folder)
        return recorded
    }
}
