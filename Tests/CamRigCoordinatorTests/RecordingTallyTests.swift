import Testing

@testable import CamRigCoordinator

/// A recording's events turned into sync sets and per-camera counts.
@Suite("Recording tally", .timeLimit(.minutes(1)))
struct RecordingTallyTests {
    static let period: Int64 = 33_333_333

    static func frame(_ camera: Int, _ sequence: UInt64, at timestamp: Int64) -> RecordingEvent<String> {
        .frame(
            SyncFrame(
                camera: camera, sequence: sequence, timestamp: timestamp, uncertainty: 20_000,
                payload: "\(camera)/\(sequence)"))
    }

    @Test("frames become sets, drops and late frames are counted, and a camera that ends early leaves incomplete sets")
    func tally() throws {
        var tally = RecordingTally<String>(cameraCount: 2, framePeriod: Self.period, closeSetsAfter: 1_000_000_000)
        for sequence in 0..<4 {
            let time = Int64(sequence) * Self.period
            tally.record(Self.frame(0, UInt64(sequence), at: time + 1_000))
            if sequence < 2 { tally.record(Self.frame(1, UInt64(sequence), at: time - 2_000)) }
        }
        tally.record(.dropped(camera: 0, count: 2))
        tally.record(.afterEnd(camera: 0))
        tally.record(.ended(camera: 1, failure: "stream ended early (deviceLost)"))
        tally.record(.ended(camera: 0, failure: nil))
        tally.finish()

        #expect(tally.delivered == [4, 2])
        #expect(tally.streams[0].dropped == 2 && tally.streams[0].afterEnd == 1 && tally.streams[0].failure == nil)
        #expect(tally.streams[1].failure == "stream ended early (deviceLost)")
        #expect(tally.sets.count == 4)
        #expect(tally.sets.map(\.isComplete) == [true, true, false, false])
        #expect(tally.sets[2].missingCameras == [1])
        #expect(tally.unmatched.isEmpty)
        #expect(tally.sets[0].skew == 3_000)
        // Every delivered frame comes back exactly once.
        #expect(Set(tally.payloads) == ["0/0", "0/1", "0/2", "0/3", "1/0", "1/1"] && tally.payloads.count == 6)
    }

    @Test("mapping payloads keeps every set's frames, times and completeness")
    func mapPayloads() {
        var tally = RecordingTally<String>(cameraCount: 2, framePeriod: Self.period, closeSetsAfter: 1_000_000_000)
        tally.record(Self.frame(0, 0, at: 0))
        tally.record(Self.frame(1, 0, at: 500))
        tally.record(.ended(camera: 0, failure: nil))
        tally.record(.ended(camera: 1, failure: nil))
        tally.finish()
        let (sets, unmatched) = tally.mapPayloads { $0.count }
        #expect(unmatched.isEmpty)
        #expect(sets.count == 1)
        #expect(sets[0].presentFrames.map(\.payload) == [3, 3])
        #expect(sets[0].presentFrames.map(\.timestamp) == [0, 500])
        #expect(sets[0].isComplete && sets[0].skew == 500)
    }
}
