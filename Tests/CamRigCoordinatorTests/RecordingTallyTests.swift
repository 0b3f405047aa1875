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

    /// A recording of `frames` periods from T = 0.
    static func span(frames: Int) -> CapturePlan.Recording {
        let stopAt = Int64(frames) * period
        return CapturePlan.Recording(
            duration: .nanoseconds(stopAt), framePeriod: period, stopAt: stopAt, lastExposure: stopAt - period / 2,
            stopStreamsAt: stopAt + period, closeSetsAfter: 1_000_000_000)
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
        tally.finish(Self.span(frames: 4), onGrid: [true, true])

        #expect(tally.delivered == [4, 2])
        // The camera that ended early owes the two frames it never sent; its failure says why.
        #expect(tally.streams.map(\.missing) == [0, 2])
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
        tally.finish(Self.span(frames: 1), onGrid: [true, true])
        let (sets, unmatched) = tally.mapPayloads { $0.count }
        #expect(unmatched.isEmpty)
        #expect(sets.count == 1)
        #expect(sets[0].presentFrames.map(\.payload) == [3, 3])
        #expect(sets[0].presentFrames.map(\.timestamp) == [0, 500])
        #expect(sets[0].isComplete && sets[0].skew == 500)
    }

    @Test("a camera whose stream began late and ended early without a word falls short, and says by how much")
    func silentShortfall() {
        var tally = RecordingTally<String>(cameraCount: 2, framePeriod: Self.period, closeSetsAfter: 1_000_000_000)
        for sequence in 0..<10 {
            tally.record(Self.frame(0, UInt64(sequence), at: Int64(sequence) * Self.period + 1_000))
        }
        // Camera 1 exposed grid instants 3 to 7 only, numbering its frames from 0, and ended as if stopped.
        for instant in 3..<8 {
            tally.record(Self.frame(1, UInt64(instant - 3), at: Int64(instant) * Self.period - 1_000))
        }
        tally.record(.ended(camera: 0, failure: nil))
        tally.record(.ended(camera: 1, failure: nil))
        tally.finish(Self.span(frames: 10), onGrid: [true, true])

        #expect(tally.streams.map(\.missing) == [0, 5])
        #expect(tally.streams[0].failure == nil)
        #expect(
            tally.streams[1].failure
                == "5 of the recording's 10 frames neither delivered nor reported dropped: its first frame was exposed 100 ms after the recording's start, its last 67 ms before its last frame was due")
    }

    @Test("a free-running camera may owe one frame fewer; one on the grid owes every frame; dropped frames are owed no more")
    func owedFrames() {
        func missing(delivered: Int, dropped: Int = 0, onGrid: Bool) -> Int {
            var tally = RecordingTally<String>(cameraCount: 1, framePeriod: Self.period, closeSetsAfter: 1_000_000_000)
            for sequence in 0..<delivered {
                tally.record(Self.frame(0, UInt64(sequence), at: Int64(sequence) * Self.period + Self.period / 3))
            }
            if dropped > 0 { tally.record(.dropped(camera: 0, count: dropped)) }
            tally.record(.ended(camera: 0, failure: nil))
            tally.finish(Self.span(frames: 10), onGrid: [onGrid])
            return tally.streams[0].missing
        }
        #expect(missing(delivered: 9, onGrid: false) == 0)
        // A long free-running recording: its camera's clock may run a fifth of a percent slow.
        func missingOfLong(delivered: Int) -> Int {
            var tally = RecordingTally<String>(cameraCount: 1, framePeriod: Self.period, closeSetsAfter: 1_000_000_000)
            for sequence in 0..<delivered {
                tally.record(Self.frame(0, UInt64(sequence), at: Int64(sequence) * Self.period + Self.period / 3))
            }
            tally.record(.ended(camera: 0, failure: nil))
            tally.finish(Self.span(frames: 18_000), onGrid: [false])
            return tally.streams[0].missing
        }
        #expect(missingOfLong(delivered: 17_963) == 0)
        #expect(missingOfLong(delivered: 17_900) == 63)
        #expect(missing(delivered: 8, onGrid: false) == 1)
        #expect(missing(delivered: 9, onGrid: true) == 1)
        #expect(missing(delivered: 7, dropped: 3, onGrid: true) == 0)
    }

    @Test("a camera that delivered nothing and said nothing is named as having delivered none")
    func nothingDelivered() {
        var tally = RecordingTally<String>(cameraCount: 2, framePeriod: Self.period, closeSetsAfter: 1_000_000_000)
        tally.record(Self.frame(0, 0, at: 0))
        tally.record(.ended(camera: 0, failure: nil))
        tally.record(.ended(camera: 1, failure: nil))
        tally.finish(Self.span(frames: 1), onGrid: [true, true])
        #expect(tally.streams[1].missing == 1)
        #expect(tally.streams[1].failure == "delivered none of the recording's 1 frames and reported none dropped")
    }
}
