import CamRigCoordinator
import CamRigDeviceModel
import CamRigDevices
import Testing

/// Frames carry a unique serial number as their payload, so every frame can be told apart.
private typealias Frame = SyncFrame<Int>
private typealias Matcher = SyncSetMatcher<Int>

/// 30 fps.
private let period: Int64 = 33_333_333
/// Where simulated sessions start on the coordinator clock.
private let origin: Int64 = 1_000_000_000_000

/// Hands out frames with unique payloads.
private struct FrameMaker {
    private var nextSerial = 0

    mutating func callAsFunction(_ camera: Int, _ sequence: UInt64, at timestamp: Int64) -> Frame {
        defer { nextSerial += 1 }
        return Frame(camera: camera, sequence: sequence, timestamp: timestamp, uncertainty: 25_000, payload: nextSerial)
    }
}

/// Everything a matcher handed back, in order.
private struct Outcome {
    var sets: [SyncSet<Int>] = []
    var unmatched: [(frame: Frame, reason: String)] = []

    mutating func record(_ outputs: [SyncMatcherOutput<Int>]) {
        for output in outputs {
            switch output {
            case .set(let set): sets.append(set)
            case .unmatched(let frame, let reason): unmatched.append((frame, reason))
            }
        }
    }

    /// Payloads of every frame handed back, in a set or unmatched.
    var returnedSerials: [Int] { sets.flatMap { $0.presentFrames.map(\.payload) } + unmatched.map(\.frame.payload) }

    /// The set holding camera `camera`'s frame number `sequence`.
    func set(camera: Int, sequence: UInt64) -> SyncSet<Int>? {
        sets.first { $0.frames[camera]?.sequence == sequence }
    }
}

/// A simulated rig: each camera's frames in capture order.
private struct Rig {
    var cameras: [[Frame]]

    /// `frameCount` frames per camera, one `period` apart. Camera `c` starts `startPeriods[c]` periods late
    /// and sits `offsets[c]` off the common grid; each frame is jittered by up to ±`jitter`.
    /// Frames for which `isDropped(camera, sequence)` holds are never delivered.
    init(
        frameCount: Int,
        offsets: [Int64],
        jitter: Int64,
        startPeriods: [Int]? = nil,
        isDropped: (Int, UInt64) -> Bool = { _, _ in false },
        make: inout FrameMaker,
        random: inout SeededRandom
    ) {
        cameras = offsets.indices.map { camera in
            let start = Int64(startPeriods?[camera] ?? 0)
            return (0..<frameCount).compactMap { k in
                let sequence = UInt64(k)
                let timestamp =
                    origin + (Int64(k) + start) * period + offsets[camera]
                    + Int64.random(in: -jitter...jitter, using: &random)
                return isDropped(camera, sequence) ? nil : make(camera, sequence, at: timestamp)
            }
        }
    }

    var frameCount: Int { cameras.map(\.count).reduce(0, +) }

    /// All frames in arrival order: camera `c` delivers each frame `lags[c]` plus up to `networkJitter`
    /// after its timestamp, so cameras interleave while every camera's own frames stay in order.
    func arrivals(lags: [Int64], networkJitter: Int64, random: inout SeededRandom) -> [Frame] {
        var timed: [(arrival: Int64, order: Int, frame: Frame)] = []
        for (camera, frames) in cameras.enumerated() {
            var previous = Int64.min
            for frame in frames {
                let arrival = max(
                    previous + 1,
                    frame.timestamp + lags[camera] + Int64.random(in: 0...networkJitter, using: &random)
                )
                previous = arrival
                timed.append((arrival, timed.count, frame))
            }
        }
        return timed.sorted { ($0.arrival, $0.order) < ($1.arrival, $1.order) }.map(\.frame)
    }
}

/// Feeds `frames` in order, then finishes every stream.
private func run(
    _ frames: [Frame],
    through matcher: inout Matcher
) -> (outcome: Outcome, setsBeforeFlush: Int, mostPending: Int) {
    var outcome = Outcome()
    var mostPending = 0
    for frame in frames {
        outcome.record(matcher.add(frame))
        mostPending = max(mostPending, matcher.pendingFrameCount)
    }
    let setsBeforeFlush = outcome.sets.count
    outcome.record(matcher.finishAll())
    return (outcome, setsBeforeFlush, mostPending)
}

/// Checks every set must pass whatever the input: consistent fields, one camera per slot, time order,
/// frames within `tolerance` of each other.
private func expectWellFormed(
    _ sets: [SyncSet<Int>],
    cameraCount: Int,
    tolerance: Int64,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    #expect(
        sets.map(\.index) == Array(sets.indices),
        "sets are numbered in emission order",
        sourceLocation: sourceLocation
    )
    var previousEarliest = Int64.min
    for set in sets {
        let present = set.presentFrames
        let timestamps = present.map(\.timestamp)
        guard let earliest = timestamps.min(), let latest = timestamps.max() else {
            Issue.record("set \(set.index) has no frames", sourceLocation: sourceLocation)
            continue
        }
        #expect(set.frames.count == cameraCount, sourceLocation: sourceLocation)
        #expect(
            set.frames.enumerated().allSatisfy { slot, frame in frame.map { $0.camera == slot } ?? true },
            "every frame sits in its own camera's slot",
            sourceLocation: sourceLocation
        )
        let empty = set.frames.indices.filter { set.frames[$0] == nil }
        #expect(set.missingCameras == empty, sourceLocation: sourceLocation)
        #expect(set.isComplete == set.missingCameras.isEmpty, sourceLocation: sourceLocation)
        #expect(set.skew == latest - earliest, sourceLocation: sourceLocation)
        #expect(set.skew <= tolerance, "set \(set.index) spans \(set.skew) ns", sourceLocation: sourceLocation)
        #expect((earliest...latest).contains(set.referenceTime), sourceLocation: sourceLocation)
        #expect(earliest > previousEarliest, "set \(set.index) is out of time order", sourceLocation: sourceLocation)
        previousEarliest = earliest
    }
}

@Suite("Sync set matcher", .timeLimit(.minutes(1)))
struct SyncSetMatcherTests {
    @Test("defaults: a frame may join a set up to half a period after it starts; sets give up after two periods")
    func defaults() {
        let configuration = Matcher.Configuration(cameraCount: 3, framePeriod: period)
        #expect(configuration.tolerance == period / 2)
        #expect(configuration.closeAfter == 2 * period)
    }

    @Test("three cameras at 30 fps with offsets, jitter and lag: one complete, tight set per frame, in time order")
    func threeCamerasInterleaved() {
        var random = SeededRandom(seed: 30)
        var make = FrameMaker()
        let offsets = (0..<3).map { _ in Int64.random(in: -200_000...200_000, using: &random) }
        let rig = Rig(frameCount: 300, offsets: offsets, jitter: 50_000, make: &make, random: &random)
        let lags = (0..<3).map { _ in Int64.random(in: 0...period, using: &random) }
        let arrivals = rig.arrivals(lags: lags, networkJitter: 3_000_000, random: &random)

        var matcher = Matcher(configuration: .init(cameraCount: 3, framePeriod: period))
        let (outcome, setsBeforeFlush, mostPending) = run(arrivals, through: &matcher)

        #expect(outcome.unmatched.isEmpty)
        #expect(outcome.sets.count == 300)
        #expect(outcome.sets.allSatisfy { $0.isComplete })
        #expect(outcome.sets.allSatisfy { $0.skew <= 500_000 })
        #expect(
            outcome.sets.allSatisfy { set in set.presentFrames.allSatisfy { $0.sequence == set.frames[0]?.sequence } },
            "each set holds the frames captured together"
        )
        #expect(zip(outcome.sets, outcome.sets.dropFirst()).allSatisfy { $0.referenceTime < $1.referenceTime })
        let returned = outcome.returnedSerials
        #expect(returned.count == 900 && Set(returned).count == 900)
        expectWellFormed(outcome.sets, cameraCount: 3, tolerance: period / 2)
        #expect(setsBeforeFlush >= 298, "sets close while frames arrive, not at the end")
        #expect(mostPending <= 12, "only a few frames per camera wait for the slowest camera")
    }

    @Test("a dropped frame on camera 1 gives one incomplete set naming camera 1; its neighbours stay complete")
    func droppedFrame() {
        var random = SeededRandom(seed: 1)
        var make = FrameMaker()
        let rig = Rig(
            frameCount: 20,
            offsets: [0, 150_000, -120_000],
            jitter: 30_000,
            isDropped: { camera, sequence in camera == 1 && sequence == 10 },
            make: &make,
            random: &random
        )
        let arrivals = rig.arrivals(lags: [0, period / 2, period / 3], networkJitter: 2_000_000, random: &random)
        var matcher = Matcher(configuration: .init(cameraCount: 3, framePeriod: period))
        var outcome = Outcome()
        var newest = Int64.min
        var newestWhenGapClosed: Int64?
        for frame in arrivals {
            outcome.record(matcher.add(frame))
            newest = max(newest, frame.timestamp)
            if newestWhenGapClosed == nil && outcome.set(camera: 0, sequence: 10) != nil {
                newestWhenGapClosed = newest
            }
        }
        outcome.record(matcher.finishAll())

        #expect(outcome.sets.count == 20)
        #expect(
            (newestWhenGapClosed ?? .max) < origin + 11 * period + period / 2,
            "camera 1's next frame closes the gap; it does not wait for closeAfter"
        )
        let gap = outcome.set(camera: 0, sequence: 10)
        #expect(gap?.isComplete == false)
        #expect(gap?.missingCameras == [1])
        #expect(gap?.frames[1] == nil)
        #expect(gap?.frames[2]?.sequence == 10)
        #expect(outcome.set(camera: 0, sequence: 9)?.isComplete == true)
        #expect(outcome.set(camera: 0, sequence: 11)?.isComplete == true)
        #expect(outcome.sets.filter { !$0.isComplete }.count == 1)
        #expect(outcome.unmatched.isEmpty)
        #expect(outcome.returnedSerials.count == rig.frameCount)
        #expect(rig.frameCount == 59)
        expectWellFormed(outcome.sets, cameraCount: 3, tolerance: period / 2)
    }

    @Test("a camera that finishes early: later sets name it as missing and close as soon as the others arrive")
    func cameraFinishesEarly() {
        var make = FrameMaker()
        var matcher = Matcher(configuration: .init(cameraCount: 3, framePeriod: period))
        var outcome = Outcome()
        for k in 0..<30 {
            let base = origin + Int64(k) * period
            outcome.record(matcher.add(make(0, UInt64(k), at: base)))
            outcome.record(matcher.add(make(1, UInt64(k), at: base + 100_000)))
            if k < 10 {
                outcome.record(matcher.add(make(2, UInt64(k), at: base - 80_000)))
            }
            if k == 9 {
                outcome.record(matcher.finish(camera: 2))
            }
            #expect(outcome.sets.count == k + 1, "set \(k) is out as soon as its last live camera delivered")
            #expect(matcher.pendingFrameCount == 0)
        }
        #expect(outcome.sets.count == 30)
        #expect(outcome.sets.prefix(10).allSatisfy { $0.isComplete })
        #expect(outcome.sets.dropFirst(10).allSatisfy { $0.missingCameras == [2] })
        #expect(outcome.unmatched.isEmpty)
        expectWellFormed(outcome.sets, cameraCount: 3, tolerance: period / 2)
    }

    @Test("a camera that goes silent without finishing: sets close closeAfter past their time and name it")
    func cameraGoesSilent() {
        var make = FrameMaker()
        var matcher = Matcher(configuration: .init(cameraCount: 3, framePeriod: period))
        var outcome = Outcome()
        var added = 0
        for k in 0..<30 {
            let base = origin + Int64(k) * period
            outcome.record(matcher.add(make(0, UInt64(k), at: base)))
            outcome.record(matcher.add(make(1, UInt64(k), at: base + 100_000)))
            added += 2
            if k < 10 {
                outcome.record(matcher.add(make(2, UInt64(k), at: base - 80_000)))
                added += 1
            }
            #expect(outcome.sets.count >= k - 1, "no set waits more than closeAfter for the silent camera")
            #expect(matcher.pendingFrameCount <= 4)
        }
        let resumedTooLate = make(2, 10, at: origin + 10 * period)
        outcome.record(matcher.add(resumedTooLate))
        added += 1
        outcome.record(matcher.finishAll())

        #expect(outcome.sets.count == 30)
        #expect(outcome.sets.prefix(10).allSatisfy { $0.isComplete })
        #expect(outcome.sets.dropFirst(10).allSatisfy { $0.missingCameras == [2] })
        #expect(outcome.unmatched.map(\.frame.payload) == [resumedTooLate.payload])
        #expect(outcome.unmatched.first?.reason.contains("closed") == true)
        #expect(outcome.returnedSerials.count == added)
        expectWellFormed(outcome.sets, cameraCount: 3, tolerance: period / 2)
    }

    @Test("cameras started one period apart: the first set lacks the late camera, the rest are complete")
    func staggeredStart() {
        var random = SeededRandom(seed: 7)
        var make = FrameMaker()
        let rig = Rig(
            frameCount: 20,
            offsets: [0, 180_000, -150_000],
            jitter: 50_000,
            startPeriods: [0, 0, 1],
            make: &make,
            random: &random
        )
        let arrivals = rig.arrivals(lags: [period / 4, 0, period / 2], networkJitter: 2_000_000, random: &random)
        let tolerance = period / 2
        var matcher = Matcher(configuration: .init(cameraCount: 3, framePeriod: period, tolerance: tolerance))
        let outcome = run(arrivals, through: &matcher).outcome

        #expect(outcome.sets.count == 21)
        #expect(outcome.sets.first?.missingCameras == [2])
        #expect(outcome.sets.dropFirst().dropLast().allSatisfy { $0.isComplete })
        #expect(outcome.sets.last?.missingCameras == [0, 1], "camera 2's last frame has no partners")
        #expect(outcome.sets.allSatisfy { $0.skew <= tolerance })
        #expect(outcome.unmatched.isEmpty)
        #expect(outcome.returnedSerials.count == rig.frameCount)
        expectWellFormed(outcome.sets, cameraCount: 3, tolerance: tolerance)
    }

    @Test("a second frame from one camera after its set closed comes back unmatched with a reason")
    func duplicateAfterSetClosed() {
        var make = FrameMaker()
        var frames: [Frame] = []
        var sequence: UInt64 = 0
        for k in 0..<10 {
            let base = origin + Int64(k) * period
            frames.append(make(0, sequence, at: base))
            frames.append(make(1, UInt64(k), at: base + 100_000))
            frames.append(make(2, UInt64(k), at: base + 200_000))
            sequence += 1
            if k == 5 {
                frames.append(make(0, sequence, at: base + 1_000_000))
                sequence += 1
            }
        }
        var matcher = Matcher(configuration: .init(cameraCount: 3, framePeriod: period))
        let outcome = run(frames, through: &matcher).outcome

        #expect(outcome.sets.count == 10)
        #expect(outcome.sets.allSatisfy { $0.isComplete })
        #expect(outcome.sets[5].frames[0]?.timestamp == origin + 5 * period)
        #expect(outcome.unmatched.count == 1)
        #expect(outcome.unmatched.first?.frame.timestamp == origin + 5 * period + 1_000_000)
        #expect(outcome.unmatched.first?.reason.contains("second frame from camera 0") == true)
        #expect(outcome.returnedSerials.count == frames.count)
        expectWellFormed(outcome.sets, cameraCount: 3, tolerance: period / 2)
    }

    @Test("two frames from one camera pending in one window: the set keeps the one that makes it tightest")
    func duplicateWhilePending() {
        var make = FrameMaker()
        var frames: [Frame] = []
        for k in 0..<10 {
            let base = origin + Int64(k) * period
            if k == 5 {
                frames.append(make(0, 5, at: base))
                frames.append(make(0, 6, at: base + 1_000_000))
                frames.append(make(1, 5, at: base + 1_100_000))
                frames.append(make(2, 5, at: base + 1_200_000))
            } else {
                frames.append(make(0, k < 5 ? UInt64(k) : UInt64(k) + 1, at: base))
                frames.append(make(1, UInt64(k), at: base + 100_000))
                frames.append(make(2, UInt64(k), at: base + 200_000))
            }
        }
        var matcher = Matcher(configuration: .init(cameraCount: 3, framePeriod: period))
        let outcome = run(frames, through: &matcher).outcome

        #expect(outcome.sets.count == 10)
        #expect(outcome.sets.allSatisfy { $0.isComplete })
        #expect(outcome.sets[5].frames[0]?.sequence == 6)
        #expect(outcome.sets[5].skew == 200_000)
        #expect(outcome.unmatched.map(\.frame.sequence) == [5])
        #expect(outcome.unmatched.first?.frame.camera == 0)
        #expect(outcome.unmatched.first?.reason.contains("camera 0") == true)
        #expect(outcome.returnedSerials.count == frames.count)
    }

    @Test("a timestamp going backwards or a repeated sequence number comes back unmatched, and matching carries on")
    func backwardsTimestamp() {
        var make = FrameMaker()
        var matcher = Matcher(configuration: .init(cameraCount: 2, framePeriod: period))
        let frames = [
            make(0, 0, at: origin),
            make(1, 0, at: origin + 100_000),
            make(0, 1, at: origin + period),
            make(0, 2, at: origin + period - 5_000_000),
            make(0, 1, at: origin + 2 * period),
            make(1, 1, at: origin + period + 100_000),
            make(0, 3, at: origin + 2 * period),
            make(1, 2, at: origin + 2 * period + 100_000),
        ]
        let outcome = run(frames, through: &matcher).outcome

        #expect(outcome.sets.count == 3)
        #expect(outcome.sets.allSatisfy { $0.isComplete })
        #expect(outcome.sets[1].frames[0]?.sequence == 1)
        #expect(outcome.unmatched.map(\.frame.payload) == [frames[3].payload, frames[4].payload])
        #expect(outcome.unmatched.allSatisfy { $0.reason.contains("camera 0") })
        #expect(outcome.unmatched.first?.reason.contains("not after") == true)
        #expect(outcome.unmatched.last?.reason.contains("sequence") == true)
        #expect(outcome.returnedSerials.count == frames.count)
        #expect(Set(outcome.returnedSerials).count == frames.count)
    }

    @Test("finishAll flushes every pending frame in time order and leaves nothing pending")
    func finishAllFlushes() {
        var make = FrameMaker()
        var matcher = Matcher(configuration: .init(cameraCount: 3, framePeriod: period, closeAfter: 100 * period))
        var outcome = Outcome()
        outcome.record(matcher.add(make(2, 0, at: origin - 50_000)))
        for k in 0..<4 {
            let base = origin + Int64(k) * period
            outcome.record(matcher.add(make(0, UInt64(k), at: base)))
            outcome.record(matcher.add(make(1, UInt64(k), at: base + 70_000)))
        }
        #expect(outcome.sets.count == 1)
        #expect(matcher.pendingFrameCount == 6)

        outcome.record(matcher.finishAll())
        #expect(matcher.pendingFrameCount == 0)
        #expect(outcome.sets.count == 4)
        #expect(outcome.sets.dropFirst().allSatisfy { $0.missingCameras == [2] })
        #expect(outcome.returnedSerials.count == 9)
        expectWellFormed(outcome.sets, cameraCount: 3, tolerance: period / 2)

        let afterEnd = make(0, 4, at: origin + 4 * period)
        #expect(matcher.add(afterEnd).count == 1, "a frame after the end comes back unmatched")
        #expect(matcher.pendingFrameCount == 0)
    }

    @Test("advancing the clock closes a set even when every camera has gone quiet")
    func clockDeadline() {
        var make = FrameMaker()
        var matcher = Matcher(configuration: .init(cameraCount: 2, framePeriod: period))
        var outcome = Outcome()
        outcome.record(matcher.add(make(0, 0, at: origin)))
        outcome.record(matcher.advance(to: origin + 2 * period))
        #expect(outcome.sets.isEmpty, "still inside closeAfter")
        outcome.record(matcher.advance(to: origin + 2 * period + 1))
        #expect(outcome.sets.map(\.missingCameras) == [[1]])
        #expect(matcher.pendingFrameCount == 0)
    }

    /// What happens, in arrival order, in a randomised session.
    private enum Event {
        case frame(Frame)
        case finish(camera: Int)
        case advance(to: Int64)
    }

    @Test(
        "random rigs with drops, duplicates, reversals, lag and early ends: every frame comes back exactly once",
        arguments: 1...16 as ClosedRange<UInt64>
    )
    func accountsForEveryFrame(seed: UInt64) {
        var random = SeededRandom(seed: seed)
        var make = FrameMaker()
        let cameraCount = Int.random(in: 1...6, using: &random)
        let framePeriod = ([33_333_333, 16_666_667, 10_000_000] as [Int64]).randomElement(using: &random)!
        let tolerance = Int64.random(in: framePeriod / 8...framePeriod / 2, using: &random)
        let closeAfter = Int64.random(in: framePeriod...3 * framePeriod, using: &random)

        var timed: [(at: Int64, order: Int, event: Event)] = []
        var added: [Int] = []
        for camera in 0..<cameraCount {
            let offset = Int64.random(in: -framePeriod / 8...framePeriod / 8, using: &random)
            let start = Int64.random(in: 0...2, using: &random)
            let lag = Int64.random(in: 0...2 * framePeriod, using: &random)
            let frameCount = Int.random(in: 40...160, using: &random)
            var sequence: UInt64 = 0
            var arrival = Int64.min
            func deliver(_ frame: Frame) {
                let delay = lag + Int64.random(in: 0...framePeriod / 2, using: &random)
                arrival = max(arrival + 1, frame.timestamp + delay)
                timed.append((arrival, timed.count, .frame(frame)))
                added.append(frame.payload)
            }
            for k in 0..<Int64(frameCount) {
                sequence += 1
                let timestamp =
                    origin + (k + start) * framePeriod + offset
                    + Int64.random(in: -framePeriod / 10...framePeriod / 10, using: &random)
                let roll = Double.random(in: 0..<1, using: &random)
                if roll < 0.05 { continue }
                deliver(make(camera, sequence, at: timestamp))
                if roll < 0.08 {
                    sequence += 1
                    let extra = Int64.random(in: 1_000...framePeriod / 3, using: &random)
                    deliver(make(camera, sequence, at: timestamp + extra))
                } else if roll < 0.10 {
                    if roll < 0.09 { sequence += 1 }
                    let backwards = Int64.random(in: 1...framePeriod, using: &random)
                    deliver(make(camera, sequence, at: timestamp - backwards))
                }
            }
            if Bool.random(using: &random) {
                timed.append((arrival + 1, timed.count, .finish(camera: camera)))
            }
        }
        for _ in 0..<3 {
            let stray = make(Bool.random(using: &random) ? cameraCount : -1, 0, at: origin)
            let at = Int64.random(in: origin...origin + 100 * framePeriod, using: &random)
            timed.append((at, timed.count, .frame(stray)))
            added.append(stray.payload)
        }
        for _ in 0..<20 {
            let now = Int64.random(in: origin...origin + 200 * framePeriod, using: &random)
            timed.append((now, timed.count, .advance(to: now)))
        }

        var matcher = Matcher(
            configuration: .init(
                cameraCount: cameraCount,
                framePeriod: framePeriod,
                tolerance: tolerance,
                closeAfter: closeAfter
            )
        )
        var outcome = Outcome()
        for (_, _, event) in timed.sorted(by: { ($0.at, $0.order) < ($1.at, $1.order) }) {
            switch event {
            case .frame(let frame): outcome.record(matcher.add(frame))
            case .finish(let camera): outcome.record(matcher.finish(camera: camera))
            case .advance(let now): outcome.record(matcher.advance(to: now))
            }
        }
        outcome.record(matcher.finishAll())

        let returned = outcome.returnedSerials
        #expect(returned.count == added.count)
        #expect(Set(returned) == Set(added), "no frame lost, none invented")
        #expect(Set(returned).count == returned.count, "no frame comes back twice")
        #expect(outcome.unmatched.allSatisfy { !$0.reason.isEmpty })
        #expect(outcome.sets.allSatisfy { $0.skew <= 2 * tolerance })
        #expect(matcher.pendingFrameCount == 0)
        expectWellFormed(outcome.sets, cameraCount: cameraCount, tolerance: tolerance)
    }

    @Test("eight cameras by 3000 frames: every frame ends up in a complete set")
    func large() {
        var random = SeededRandom(seed: 8)
        var make = FrameMaker()
        let offsets = (0..<8).map { _ in Int64.random(in: -200_000...200_000, using: &random) }
        let rig = Rig(frameCount: 3000, offsets: offsets, jitter: 50_000, make: &make, random: &random)
        let lags = (0..<8).map { _ in Int64.random(in: 0...period, using: &random) }
        let arrivals = rig.arrivals(lags: lags, networkJitter: 3_000_000, random: &random)

        var matcher = Matcher(configuration: .init(cameraCount: 8, framePeriod: period))
        let (outcome, _, mostPending) = run(arrivals, through: &matcher)

        #expect(outcome.sets.count == 3000)
        #expect(outcome.sets.allSatisfy { $0.isComplete })
        #expect(outcome.unmatched.isEmpty)
        #expect(outcome.returnedSerials.count == 24_000)
        #expect(Set(outcome.returnedSerials).count == 24_000)
        #expect(mostPending <= 32)
        #expect(matcher.pendingFrameCount == 0)
    }

    @Test("with the rig's frame grid, frames are matched by the grid instant nearest them and each set names it")
    func matchesByGridIndex() {
        let grid = PhaseGrid(anchor: origin, period: Double(period))
        var matcher = Matcher(configuration: .init(cameraCount: 2, framePeriod: period, grid: grid))
        var make = FrameMaker()
        var outcome = Outcome()
        // Camera 0 sits 15 ms early on every grid instant, camera 1 15 ms late: 30 ms apart, yet each pair
        // belongs to one grid instant. Matching from the earliest frame (no grid) pairs them the other way.
        for k in 0..<10 {
            let instant = grid.instant(Int64(k))
            outcome.record(matcher.add(make(0, UInt64(k), at: instant - 15_000_000)))
            outcome.record(matcher.add(make(1, UInt64(k), at: instant + 15_000_000)))
        }
        outcome.record(matcher.finishAll())
        #expect(outcome.unmatched.isEmpty, "\(outcome.unmatched.map(\.reason))")
        #expect(outcome.sets.count == 10)
        for (k, set) in outcome.sets.enumerated() {
            #expect(set.gridIndex == Int64(k))
            #expect(set.isComplete)
            #expect(set.frames[0]?.sequence == UInt64(k) && set.frames[1]?.sequence == UInt64(k))
            #expect(set.skew == 30_000_000)
        }

        var unlocked = Matcher(configuration: .init(cameraCount: 2, framePeriod: period))
        var plain = Outcome()
        for k in 0..<10 {
            let instant = grid.instant(Int64(k))
            plain.record(unlocked.add(make(0, UInt64(k), at: instant - 15_000_000)))
            plain.record(unlocked.add(make(1, UInt64(k), at: instant + 15_000_000)))
        }
        plain.record(unlocked.finishAll())
        #expect(plain.sets.allSatisfy { $0.gridIndex == nil })
        #expect(plain.set(camera: 1, sequence: 0)?.frames[0]?.sequence == 1, "without a grid the nearest frames pair up")
    }

    @Test("with the grid, a camera's missing frame leaves its grid instant's set incomplete, not shifted")
    func gridGapStaysInPlace() {
        let grid = PhaseGrid(anchor: origin, period: Double(period))
        var matcher = Matcher(configuration: .init(cameraCount: 2, framePeriod: period, grid: grid))
        var make = FrameMaker()
        var outcome = Outcome()
        for k in 0..<6 {
            let instant = grid.instant(Int64(k))
            outcome.record(matcher.add(make(0, UInt64(k), at: instant + 20_000)))
            if k != 3 { outcome.record(matcher.add(make(1, UInt64(k), at: instant - 30_000))) }
        }
        outcome.record(matcher.finishAll())
        #expect(outcome.sets.map(\.gridIndex) == [0, 1, 2, 3, 4, 5])
        #expect(outcome.sets.map(\.isComplete) == [true, true, true, false, true, true])
        #expect(outcome.sets[3].missingCameras == [1])
    }
}
