import CamRigFiles
import CamRigMedia
import CamRigWire
import Foundation

extension AgentRecordings {
    /// Closes the recordings a previous run of the agent left open (it was killed or lost power while
    /// recording): every video segment is rewritten as a closed file with what could be read of it, the
    /// frame table loses the rows of frames that did not reach the disk (flagged `lost`), and the track is
    /// marked cut short. Tracks that had closed before keep what they were.
    func closeCutShortRecordings() {
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []).sorted()
        for name in names {
            let folder = directory.appendingPathComponent(name)
            guard let data = try? Data(contentsOf: folder.appendingPathComponent("state.pb")),
                let summary = try? WireRecordingSummary(serializedBytes: data), summary.state == .recording,
                let requestData = try? Data(contentsOf: folder.appendingPathComponent("request.pb")),
                let request = try? WireStartRecording(serializedBytes: requestData)
            else { continue }
            let grid = RecordingGrid(start: request.startAtNs, period: max(request.gridPeriodNs, 1), count: Int64(max(request.frameCount, 1)))
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
        let text = (try? String(contentsOf: tableURL, encoding: .utf8)) ?? FrameSidecar.header
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        // A torn last line (the agent stopped mid-write) is not a row.
        if !text.hasSuffix("\n") { lines.removeLast() } else if lines.last == "" { lines.removeLast() }
        var table = FrameSidecar.header
        var timecodes = FrameSidecar.timecodeHeader
        var frames: UInt64 = 0
        var gaps: UInt64 = 0
        var duplicates: UInt64 = 0
        var first: Int64 = -1
        var last: Int64 = -1
        var lastIndex: Int64 = -1
        let rows = lines.dropFirst().map { $0.split(separator: ",", omittingEmptySubsequences: false).map(String.init) }
        // Each segment's first frame number: frames are numbered across the track's segments.
        var base: [Int: Int] = [:]
        for fields in rows where fields.count == 8 {
            if let frame = Int(fields[1]), let file = Int(fields[2]) { base[file] = min(base[file] ?? frame, frame) }
        }
        for (line, fields) in zip(lines.dropFirst(), rows) {
            guard fields.count == 8, let index = Int64(fields[0]) else { continue }
            lastIndex = max(lastIndex, index)
            guard let frame = Int(fields[1]), let file = Int(fields[2]), file < kept.count, frame - (base[file] ?? 0) < kept[file] else {
                if fields[7] != "duplicate" { gaps += 1 }
                let flag = fields[7] == "gap" ? "gap" : "lost"
                table += "\(index),,,\(fields[3]),,,,\(flag)\n"
                continue
            }
            frames += 1
            if fields[7] == "duplicate" { duplicates += 1 }
            if first < 0 { first = index }
            last = index
            table += line + "\n"
            if let rigTime = Int64(fields[3]) { timecodes += FrameSidecar.timecode(rigTime: rigTime) }
        }
        // Grid indexes the agent never reached.
        if lastIndex + 1 < grid.count {
            for index in (lastIndex + 1)..<grid.count {
                table += "\(index),,,\(clock.rigTime(ofAgent: grid.instant(index))),,,,lost\n"
                gaps += 1
            }
        }
        do {
            try DurableFile.write(Data(table.utf8), to: tableURL)
            try DurableFile.write(Data(timecodes.utf8), to: timecodesURL)
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
