import CamRigCapture
import CamRigDeviceModel
import CamRigWire
import CamRigWireModel
import Foundation
import Testing

/// Every manifest spells a value one way, whichever capture wrote it; older manifests' other spelling
/// still reads.
@Suite("Manifest spelling", .timeLimit(.minutes(1)))
struct ManifestSpellingTests {
    @Test("a host recording's frames say what their stamps mark as photos' and streamed recordings' frames do")
    func hostRecordingMarks() throws {
        // The agent's frame table spells marks with hyphens (PROTOCOL.md §5).
        let table = try RecordedFrameTable(
            parsing: """
                grid_index,frame,file,exposure_start_rig_ns,uncertainty_ns,sensor_timestamp_ns,sensor_timestamp_marks,flags
                0,0,0,1000,900,5000,start-of-exposure,
                1,1,0,1033,900,5033,end-of-frame,
                2,2,0,1066,900,5066,dequeue,
                """)
        let recording = CaptureManifest.HostRecording(
            recordingId: "r", startNs: 1000, gridPeriodNs: 33, gridCount: 3, tracks: [])
        let sets = RecordedFrameTable.sets(tables: [(0, ["cam0.mkv"], table)], cameraCount: 1, recording: recording)
        let marks = sets.flatMap(\.frames).map(\.marks)
        // What a photo's or a streamed frame's manifest entry says for the same stamps.
        let photoMarks = [WireTimestampMarks.startOfExposure, .endOfFrame, .dequeue].map(\.name)
        #expect(marks == ["start_of_exposure", "end_of_frame", "dequeue"])
        #expect(marks == photoMarks)
    }

    @Test("a manifest's frame marks read in either spelling: as written now, and as host recordings once wrote them")
    func readsBothSpellings() throws {
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        func frame(marks: String) throws -> CaptureManifest.Frame {
            let json = """
                {"camera": 0, "sequence": 3, "file": "cam0.mkv", "timestamp_ns": 1000, "agent_timestamp_ns": 5000,
                 "marks": "\(marks)", "uncertainty_ns": 900, "video_frame": 3}
                """
            return try decoder.decode(CaptureManifest.Frame.self, from: Data(json.utf8))
        }
        for (old, new, mark) in [
            ("start-of-exposure", "start_of_exposure", TimestampMarks.startOfExposure),
            ("end-of-frame", "end_of_frame", .endOfFrame),
        ] {
            #expect(try frame(marks: old).timestampMarks == mark, "\(old) in an older manifest")
            #expect(try frame(marks: new).timestampMarks == mark, "\(new) as manifests write it")
            #expect(mark.manifestName == new, "written as \(new)")
        }
        #expect(try frame(marks: "dequeue").timestampMarks == .dequeue)
        #expect(try frame(marks: "sometime").timestampMarks == nil, "a mark this version does not know")
    }
}
