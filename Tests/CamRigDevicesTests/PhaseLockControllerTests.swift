import CamRigDeviceModel
import CamRigDevices
import Foundation
import Testing

/// A free-running sensor as the phase-lock controllers meet it: its own oscillator, a lines value that
/// latches when a frame starts, stamps with Gaussian jitter, frames seen some time after they start.
private struct SimulatedSensor {
    var lineDuration: Double  // on the host clock, rate error included
    var lines: Int64
    var start: Int64
    var sequence: UInt64 = 0
    var pendingLines: [(at: Int64, lines: Int64)] = []
    var random: SeededRandom
    var jitter: Double

    mutating func gaussian() -> Double {
        let u1 = max(Double.random(in: 0..<1, using: &random), 1e-12)
        let u2 = Double.random(in: 0..<1, using: &random)
        return (-2 * log(u1)).squareRoot() * cos(2 * .pi * u2)
    }

    /// Moves to the next frame; the lines set before it starts are the ones it runs with.
    mutating func advance() {
        let next = start + Int64((Double(lines) * lineDuration).rounded())
        while let first = pendingLines.first, first.at < next {
            lines = first.lines
            pendingLines.removeFirst()
        }
        start = next
        sequence += 1
    }

    mutating func stamp() -> Int64 { start + Int64((gaussian() * jitter).rounded()) }
}

@Suite("Phase-lock controllers", .timeLimit(.minutes(1)))
struct PhaseLockControllerTests {
    let period = 1e9 / 30

    @Test("the grid error of an instant is its distance to the nearest grid instant, wrapped to half a period")
    func gridError() {
        let grid = PhaseGrid(anchor: 1_000_000_000, period: period)
        #expect(abs(grid.error(of: 1_000_000_000 + 5 * Int64(period) + 40_000) - 40_000) < 10)
        #expect(abs(grid.error(of: 1_000_000_000 - 7 * Int64(period) - 40_000) + 40_000) < 10)
        #expect(abs(grid.error(of: 1_000_000_000 + Int64(period * 0.75))) <= period / 4 + 1)
        let next = grid.next(atOrAfter: 1_000_000_001)
        #expect(next > 1_000_000_001 && Double(next - 1_000_000_001) <= period)
    }

    /// Runs the frame-duration loop against a sensor with `ppm` rate error; returns the true phase
    /// errors of every frame and the frame at which the loop reported lock.
    /// `delayFrames`: frames between setting the lines and the first frame they can shape (libcamera's
    /// queued requests), told to the loop as its control's actuation delay; `lineDuration` its unit (1 µs for
    /// libcamera's FrameDurationLimits).
    private func runLoop(
        ppm: Double, jitter: Double, frames: Int, seed: UInt64, delayFrames: Int = 0, lineDuration: Double = 800.0 / 200e6 * 1e9
    ) -> (errors: [Double], lockedAt: Int?) {
        let nominalLine = lineDuration  // by default 640 px + 160 blanking at 200 MHz: 4 µs
        let nominalLines = Int64((period / nominalLine).rounded())
        let delay = Int64(Double(delayFrames) * period)
        let control = FrameDurationControl(
            lineDuration: nominalLine, lines: nominalLines, minimumLines: nominalLines / 2, maximumLines: nominalLines * 100, actuationDelay: delay)
        var random = SeededRandom(seed: seed)
        let firstStart = 5_000_000_000 + Int64.random(in: 0..<Int64(period), using: &random)
        var sensor = SimulatedSensor(lineDuration: nominalLine * (1 + ppm * 1e-6), lines: nominalLines, start: firstStart, random: random, jitter: jitter)
        let grid = PhaseGrid(anchor: 1_000_000_000, period: period)
        var loop = FrameDurationLoop(grid: grid, control: control)
        var tracker = PhaseErrorTracker(tolerance: 100_000)
        var errors: [Double] = []
        var lockedAt: Int?
        for index in 0..<frames {
            let stamp = sensor.stamp()
            // Seen after exposure and readout.
            let now = sensor.start + 18_000_000
            tracker.observe(grid.error(of: stamp))
            if tracker.isLocked, lockedAt == nil { lockedAt = index }
            if let lines = loop.observe(sequence: sensor.sequence, exposureStart: stamp, now: now, locked: tracker.isLocked) {
                loop.didSet(lines: lines, at: now)
                sensor.pendingLines.append((now + delay, lines))
            }
            errors.append(grid.error(of: sensor.start))
            sensor.advance()
        }
        return (errors, lockedAt)
    }

    private func percentile(_ values: [Double], _ p: Double) -> Double {
        let sorted = values.map(abs).sorted()
        return sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
    }

    @Test("the frame-duration loop pulls a 100 ppm sensor onto the grid within seconds and holds it there for minutes", arguments: [100.0, -100.0])
    func loopConverges(ppm: Double) {
        let run = runLoop(ppm: ppm, jitter: 20_000, frames: 30 * 180, seed: 7)
        #expect((run.lockedAt ?? .max) < 90, "locked within 3 s")
        let held = Array(run.errors.dropFirst(150))
        #expect(percentile(held, 0.99) < 60_000, "true phase error p99 \(percentile(held, 0.99)) ns over three minutes")
        // Even the last minute: the rate error is absorbed, not accumulated.
        #expect(percentile(Array(run.errors.suffix(1800)), 0.99) < 60_000)
    }

    @Test("through libcamera's FrameDurationLimits (1 µs units, taking effect four requests later) the loop locks the same sensor as well")
    func loopThroughQueuedRequests() {
        let run = runLoop(ppm: 100, jitter: 20_000, frames: 30 * 120, seed: 11, delayFrames: 4, lineDuration: 1000)
        #expect((run.lockedAt ?? .max) < 150, "locked within 5 s")
        let held = Array(run.errors.dropFirst(300))
        #expect(percentile(held, 0.99) < 60_000, "true phase error p99 \(percentile(held, 0.99)) ns over two minutes")
    }

    @Test("without the loop the same sensor drifts off the grid by its rate error")
    func withoutLoopItDrifts() {
        let nominalLine = 4_000.0
        let lines = Int64((period / nominalLine).rounded())
        var sensor = SimulatedSensor(lineDuration: nominalLine * (1 + 100e-6), lines: lines, start: 1_000_000_000, random: SeededRandom(seed: 1), jitter: 0)
        let grid = PhaseGrid(anchor: 1_000_000_000, period: period)
        for _ in 0..<(30 * 60) { sensor.advance() }
        // 100 ppm of a minute, less the line rounding: several milliseconds.
        #expect(abs(grid.error(of: sensor.start)) > 3_000_000)
    }

    @Test("restarts at computed instants put a camera with a steady start-up delay on the grid")
    func restartAligns() {
        let grid = PhaseGrid(anchor: 0, period: period)
        var aligner = RestartAligner(grid: grid, tolerance: 100_000)
        var random = SeededRandom(seed: 3)
        let baseDelay = 42_000_000.0
        var streamStart: Int64 = 1
        var start: Int64 = 10_000_000_000 + 12_345_678
        var now = start + 18_000_000
        var restarts = 0
        for _ in 0..<200 {
            if let action = aligner.observe(exposureStart: start, streamStart: streamStart, now: now, mayRestart: true) {
                guard case .restart(let at) = action else { break }
                restarts += 1
                streamStart = at
                start = at + Int64(baseDelay + Double.random(in: 0..<150_000, using: &random))
            } else {
                start += Int64(period)
            }
            now = start + 18_000_000
            if case .aligned = aligner.outcome { break }
        }
        guard case .aligned(let error) = aligner.outcome else {
            Issue.record("not aligned after \(restarts) restarts: \(aligner.outcome)")
            return
        }
        #expect(abs(error) <= 100_000)
        #expect(restarts <= 8)
    }

    @Test("a camera whose start-up delay varies by milliseconds is reported with what remains, after a bounded number of restarts")
    func restartGivesUp() {
        let grid = PhaseGrid(anchor: 0, period: period)
        var aligner = RestartAligner(grid: grid, tolerance: 10_000, maximumAttempts: 4)
        var random = SeededRandom(seed: 5)
        var streamStart: Int64 = 1
        var start: Int64 = 10_000_000_000 + 7_000_000
        var restarts = 0
        for _ in 0..<300 {
            if case .restart(let at)? = aligner.observe(exposureStart: start, streamStart: streamStart, now: start + 18_000_000, mayRestart: true) {
                restarts += 1
                streamStart = at
                start = at + 30_000_000 + Int64.random(in: 0..<20_000_000, using: &random)
            } else {
                start += Int64(period)
            }
        }
        #expect(restarts == 4)
        guard case .gaveUp(let remaining) = aligner.outcome else {
            Issue.record("expected the aligner to give up, got \(aligner.outcome)")
            return
        }
        #expect(abs(remaining) > 10_000)
    }

    @Test("a restart is not made while someone else watches the camera")
    func noRestartWhileWatched() {
        var aligner = RestartAligner(grid: PhaseGrid(anchor: 0, period: period), tolerance: 100_000)
        let action = aligner.observe(exposureStart: 10_000_000_000 + 9_000_000, streamStart: 1, now: 10_020_000_000, mayRestart: false)
        #expect(action == nil)
        #expect(aligner.attempts == 0)
    }

    @Test("a camera that cannot be restarted is not left waiting for a restart that never came: it gives up")
    func failedRestartsGiveUp() {
        var aligner = RestartAligner(grid: PhaseGrid(anchor: 0, period: period), tolerance: 100_000, maximumAttempts: 3)
        var start: Int64 = 10_000_000_000 + 9_000_000
        var asked = 0
        for _ in 0..<50 {
            if case .restart? = aligner.observe(exposureStart: start, streamStart: 1, now: start + 18_000_000, mayRestart: true) {
                asked += 1
                aligner.restartFailed()
            }
            start += Int64(period)
        }
        #expect(asked == 3)
        guard case .gaveUp(let remaining) = aligner.outcome else {
            Issue.record("expected the aligner to give up, got \(aligner.outcome)")
            return
        }
        #expect(abs(remaining) > 100_000)
    }

    @Test("an aligned webcam is not restarted for one jittery frame, but is once it has drifted off the grid")
    func realignsOnlyOnDrift() {
        let grid = PhaseGrid(anchor: 0, period: period)
        var aligner = RestartAligner(grid: grid, tolerance: 100_000)
        var start = grid.instant(300) + 20_000
        #expect(aligner.observe(exposureStart: start, streamStart: 1, now: start + 18_000_000, mayRestart: true) == nil)
        guard case .aligned(let error) = aligner.outcome, abs(error - 20_000) < 1 else {
            Issue.record("expected aligned, got \(aligner.outcome)")
            return
        }
        // One frame stamped 150 µs late (jitter), then back on the grid.
        for offset in [150_000, 20_000, 25_000] as [Int64] {
            start = grid.instant(grid.index(nearest: start) + 1) + offset
            #expect(aligner.observe(exposureStart: start, streamStart: 1, now: start + 18_000_000, mayRestart: true) == nil)
        }
        #expect(aligner.attempts == 0)
        // Drifting 30 µs a frame: restarted once it has stayed beyond the tolerance for a while.
        var restartedAfter: Int?
        for frame in 1...30 {
            start = grid.instant(grid.index(nearest: start) + 1) + 25_000 + Int64(frame) * 30_000
            if aligner.observe(exposureStart: start, streamStart: 1, now: start + 18_000_000, mayRestart: true) != nil {
                restartedAfter = frame
                break
            }
        }
        #expect(restartedAfter != nil, "never restarted")
        #expect((restartedAfter ?? 0) >= 10, "restarted after \(restartedAfter ?? 0) frames")
    }
}
