import CamRigCoordinator
import CamRigDeviceModel
import CamRigDevices
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Draws for the simulated network, from the project's seeded generator so every run sees the same network.
extension SeededRandom {
    /// Uniform in [0, 1).
    fileprivate mutating func uniform() -> Double { nextDouble() }

    fileprivate mutating func uniform(_ range: ClosedRange<Int64>) -> Int64 {
        range.lowerBound + Int64(uniform() * Double(range.upperBound - range.lowerBound + 1))
    }

    fileprivate mutating func exponential(mean: Double) -> Double { -mean * log(1 - uniform()) }
}

/// Probes against a known truth: the agent clock reads `coordinator + offset + steps + drift × (t − start)`;
/// each leg takes a base delay plus exponential jitter, and sometimes an outlier delay of 1–20 ms;
/// a probe leaves every 50–100 ms.
private struct ProbeSimulator {
    /// Agent − coordinator at `start`, in nanoseconds.
    var offset: Int64
    var driftPPM: Double
    /// Base one-way delays; with the default jitter each leg takes 0.5 ms on average, 0.1 ms standard deviation.
    var forwardDelay: Int64 = 400_000
    var returnDelay: Int64 = 400_000
    /// Mean of the exponential jitter on each leg.
    var jitterMean: Double = 100_000
    /// Whether the return leg is free of jitter: all queueing on the way to the agent.
    var forwardJitterOnly = false
    /// Probability that one leg (either, at random) is delayed by 1–20 ms more.
    var outlierProbability: Double = 0
    /// Changes of the agent clock: from coordinator time `at` on, the agent reads `by` more.
    var steps: [(at: Int64, by: Int64)] = []
    /// Coordinator nanoseconds from one probe to the next.
    var probeSpacing: ClosedRange<Int64> = 50_000_000...100_000_000
    /// Probe number → error added to that probe's agent timestamps.
    var corruptedProbes: [Int: Int64] = [:]
    let start: Int64 = 1_000_000_000_000
    private(set) var now: Int64
    private(set) var probeCount = 0
    private var random: SeededRandom

    init(seed: UInt64, offset: Int64, driftPPM: Double) {
        self.offset = offset
        self.driftPPM = driftPPM
        self.now = start
        self.random = SeededRandom(seed: seed)
    }

    func trueOffset(atCoordinator t: Int64) -> Double {
        Double(offset + stepTotal(at: t)) + driftPPM * 1e-6 * Double(t - start)
    }

    func agentClock(atCoordinator t: Int64) -> Int64 {
        t + offset + stepTotal(at: t) + Int64((driftPPM * 1e-6 * Double(t - start)).rounded())
    }

    private func stepTotal(at t: Int64) -> Int64 {
        steps.reduce(0) { $0 + (t >= $1.at ? $1.by : 0) }
    }

    mutating func nextProbe() -> ClockSample {
        var forward = forwardDelay + Int64(random.exponential(mean: jitterMean))
        var back = returnDelay + (forwardJitterOnly ? 0 : Int64(random.exponential(mean: jitterMean)))
        if random.uniform() < outlierProbability {
            let delay = random.uniform(1_000_000...20_000_000)
            if random.uniform() < 0.5 { forward += delay } else { back += delay }
        }
        let processing = random.uniform(20_000...60_000)
        let corruption = corruptedProbes[probeCount] ?? 0
        let t1 = now
        let sample = ClockSample(
            coordinatorTransmit: t1,
            agentReceive: agentClock(atCoordinator: t1 + forward) + corruption,
            agentTransmit: agentClock(atCoordinator: t1 + forward + processing) + corruption,
            coordinatorReceive: t1 + forward + processing + back)
        now += random.uniform(probeSpacing)
        probeCount += 1
        return sample
    }

    /// Feeds `count` probes to `estimator`.
    mutating func feed(_ count: Int, to estimator: inout ClockEstimator) {
        for _ in 0..<count { estimator.add(nextProbe()) }
    }

    /// Feeds probes until coordinator time `start + seconds`.
    mutating func feed(untilSecond seconds: Double, to estimator: inout ClockEstimator) {
        while now < start + Int64(seconds * 1e9) { estimator.add(nextProbe()) }
    }

    /// Estimated minus true offset at the estimate's reference time, in nanoseconds.
    func offsetError(of estimate: ClockEstimate) -> Double {
        estimate.offsetNanoseconds - trueOffset(atCoordinator: estimate.reference)
    }
}

/// The seeds every statistical scenario runs with.
private let clockSeeds: [UInt64] = [1, 42, 98765]

/// Each scenario checks what a user of the estimate sees: the offset and drift against the simulated
/// truth, and that the error bound covers the true error.
@Suite("Clock offset and drift estimation from four-timestamp probes", .timeLimit(.minutes(1)))
struct ClockEstimatorTests {
    @Test(
        "exact symmetric delays without jitter give the offset to the nanosecond and zero drift",
        arguments: [3_700_000, -3_600_000_000_000, 3_600_000_000_000] as [Int64])
    func exactSymmetric(offset: Int64) throws {
        var simulator = ProbeSimulator(seed: 1, offset: offset, driftPPM: 0)
        simulator.jitterMean = 0
        var estimator = ClockEstimator()
        simulator.feed(100, to: &estimator)
        let estimate = try #require(estimator.estimate)
        #expect(simulator.offsetError(of: estimate).magnitude <= 1)
        #expect(estimate.driftPPM.magnitude < 1e-6)
        #expect(estimate.minimumRoundTrip == 800_000)
        #expect(estimate.errorBoundNanoseconds >= simulator.offsetError(of: estimate).magnitude)
    }

    @Test(
        "a short, very noisy window does not claim hundreds of ppm, and its offset stays within half a round trip",
        arguments: clockSeeds)
    func shortNoisyWindow(seed: UInt64) throws {
        var simulator = ProbeSimulator(seed: seed, offset: 250_000, driftPPM: 0)
        simulator.jitterMean = 400_000
        var estimator = ClockEstimator()
        simulator.feed(12, to: &estimator)
        let estimate = try #require(estimator.estimate)
        #expect(estimate.driftPPM.magnitude < 100)
        #expect(simulator.offsetError(of: estimate).magnitude < Double(estimate.minimumRoundTrip) / 2)
        #expect(estimate.errorBoundNanoseconds >= simulator.offsetError(of: estimate).magnitude)
    }

    @Test(
        "3.7 ms offset, +42 ppm, 0.5 ms ± 0.1 ms delays: offset within 20 µs, drift within 2 ppm, bound holds",
        arguments: clockSeeds)
    func typicalNetwork(seed: UInt64) throws {
        var simulator = ProbeSimulator(seed: seed, offset: 3_700_000, driftPPM: 42)
        var estimator = ClockEstimator()
        simulator.feed(200, to: &estimator)
        let estimate = try #require(estimator.estimate)
        let error = simulator.offsetError(of: estimate)
        #expect(error.magnitude < 20_000)
        #expect((estimate.driftPPM - 42).magnitude < 2)
        #expect(estimate.errorBoundNanoseconds >= error.magnitude)
        #expect(estimate.sampleCount == 200)
        #expect(estimate.usedSampleCount >= 50 && estimate.usedSampleCount <= 100)
        #expect(estimator.jumpCount == 0)
    }

    @Test(
        "a burst of probes 10 ms apart on a quiet path is honest but not settled; probes 50 ms apart settle it within 3 s, and the settled estimate holds a second ahead",
        arguments: clockSeeds)
    func settling(seed: UInt64) throws {
        var simulator = ProbeSimulator(seed: seed, offset: 3_700_000, driftPPM: 44)
        simulator.forwardDelay = 10_000
        simulator.returnDelay = 10_000
        simulator.jitterMean = 2_000
        simulator.probeSpacing = 10_000_000...10_000_000
        var estimator = ClockEstimator()
        simulator.feed(16, to: &estimator)
        let burst = try #require(estimator.estimate)
        #expect(!burst.isSettled())
        let burstAhead = burst.reference + 1_000_000_000
        let burstError = burst.offset(atCoordinator: burstAhead) - simulator.trueOffset(atCoordinator: burstAhead)
        #expect(burstError.magnitude <= burst.errorBound(atCoordinator: burstAhead))

        simulator.probeSpacing = 50_000_000...50_000_000
        var settledAfter: Int64?
        while simulator.now < simulator.start + 10_000_000_000 {
            estimator.add(simulator.nextProbe())
            if estimator.estimate?.isSettled() == true {
                settledAfter = simulator.now - simulator.start
                break
            }
        }
        let elapsed = try #require(settledAfter)
        #expect(elapsed < 3_000_000_000)
        let settled = try #require(estimator.estimate)
        #expect((settled.driftPPM - 44).magnitude <= settled.driftUncertaintyPPM)
        for secondsAhead in [0.0, 0.5, 1.0] {
            let t = settled.reference + Int64(secondsAhead * 1e9)
            let error = settled.offset(atCoordinator: t) - simulator.trueOffset(atCoordinator: t)
            #expect(error.magnitude <= settled.errorBound(atCoordinator: t), "\(secondsAhead) s ahead")
        }
    }

    @Test(
        "all queueing on one leg, and 11 µs more of it once probes thin out from every 10 ms to every 500 ms (a path that idles), tilts the fit; the bound still covers the error, now and half a second ahead",
        arguments: clockSeeds)
    func oneSidedQueueingThatChanges(seed: UInt64) throws {
        var simulator = ProbeSimulator(seed: seed, offset: 1_250_000, driftPPM: 35)
        simulator.forwardDelay = 1_000
        simulator.returnDelay = 1_000
        simulator.forwardJitterOnly = true
        simulator.jitterMean = 1_000
        simulator.probeSpacing = 10_000_000...10_000_000
        var estimator = ClockEstimator()
        simulator.feed(16, to: &estimator)
        simulator.jitterMean = 4_000
        simulator.forwardDelay = 12_000
        simulator.probeSpacing = 500_000_000...500_000_000
        var worst = 0.0
        for _ in 0..<60 {
            estimator.add(simulator.nextProbe())
            let estimate = try #require(estimator.estimate)
            for secondsAhead in [0.0, 0.5] {
                let t = estimate.reference + Int64(secondsAhead * 1e9)
                let error = (estimate.offset(atCoordinator: t) - simulator.trueOffset(atCoordinator: t)).magnitude
                #expect(error <= estimate.errorBound(atCoordinator: t), "after \(estimate.sampleCount) samples, \(secondsAhead) s ahead")
                worst = max(worst, error)
            }
        }
        // The queueing did move the estimate, by several times the fastest path's half round trip.
        #expect(worst > 5_000)
    }

    @Test("a 0.2 ms path asymmetry shifts the offset by half of it, and the bound covers that", arguments: clockSeeds)
    func asymmetricPath(seed: UInt64) throws {
        var simulator = ProbeSimulator(seed: seed, offset: 3_700_000, driftPPM: 42)
        simulator.forwardDelay = 500_000
        simulator.returnDelay = 300_000
        var estimator = ClockEstimator()
        simulator.feed(200, to: &estimator)
        let estimate = try #require(estimator.estimate)
        let error = simulator.offsetError(of: estimate)
        #expect((error - 100_000).magnitude < 20_000)
        #expect(estimate.errorBoundNanoseconds >= error.magnitude)
    }

    @Test("5 % of probes delayed 1–20 ms on one leg still give the offset within 30 µs", arguments: clockSeeds)
    func delayOutliers(seed: UInt64) throws {
        var simulator = ProbeSimulator(seed: seed, offset: 3_700_000, driftPPM: 42)
        simulator.outlierProbability = 0.05
        var estimator = ClockEstimator()
        simulator.feed(200, to: &estimator)
        let estimate = try #require(estimator.estimate)
        let error = simulator.offsetError(of: estimate)
        #expect(error.magnitude < 30_000)
        #expect((estimate.driftPPM - 42).magnitude < 2)
        #expect(estimate.errorBoundNanoseconds >= error.magnitude)
        #expect(estimator.jumpCount == 0)
    }

    @Test("a few probes with wild agent timestamps neither move the estimate nor count as a jump", arguments: clockSeeds)
    func wildOffsets(seed: UInt64) throws {
        var simulator = ProbeSimulator(seed: seed, offset: 3_700_000, driftPPM: 42)
        simulator.corruptedProbes = [60: 400_000, 110: -700_000, 150: 300_000, 190: 30_000_000]
        var estimator = ClockEstimator()
        simulator.feed(200, to: &estimator)
        let estimate = try #require(estimator.estimate)
        let error = simulator.offsetError(of: estimate)
        #expect(error.magnitude < 30_000)
        #expect(estimate.errorBoundNanoseconds >= error.magnitude)
        #expect(estimator.jumpCount == 0)
    }

    @Test(
        "negative offsets and drifts work, and offsets of ±1 hour lose no precision",
        arguments: zip([-3_700_000, -3_600_000_000_000, 3_600_000_000_000] as [Int64], [-42, -37.5, 63] as [Double]))
    func largeAndNegative(offset: Int64, driftPPM: Double) throws {
        var simulator = ProbeSimulator(seed: 7, offset: offset, driftPPM: driftPPM)
        var estimator = ClockEstimator()
        simulator.feed(200, to: &estimator)
        let estimate = try #require(estimator.estimate)
        let error = simulator.offsetError(of: estimate)
        #expect(error.magnitude < 20_000)
        #expect((estimate.driftPPM - driftPPM).magnitude < 2)
        #expect(estimate.errorBoundNanoseconds >= error.magnitude)

        var nearZero = ProbeSimulator(seed: 7, offset: 0, driftPPM: driftPPM)
        var nearZeroEstimator = ClockEstimator()
        nearZero.feed(200, to: &nearZeroEstimator)
        let nearZeroEstimate = try #require(nearZeroEstimator.estimate)
        #expect((error - nearZero.offsetError(of: nearZeroEstimate)).magnitude < 1)
        #expect((estimate.driftPPM - nearZeroEstimate.driftPPM).magnitude < 1e-6)
    }

    @Test("implausible samples are rejected and counted; reset forgets samples but keeps the counters")
    func implausibleSamples() throws {
        var estimator = ClockEstimator()
        let replyBeforeProbe = ClockSample(
            coordinatorTransmit: 1_000, agentReceive: 1_500, agentTransmit: 1_600, coordinatorReceive: 900)
        let agentRepliesBeforeReceiving = ClockSample(
            coordinatorTransmit: 1_000, agentReceive: 1_500, agentTransmit: 1_400, coordinatorReceive: 2_000)
        let negativeRoundTrip = ClockSample(
            coordinatorTransmit: 1_000, agentReceive: 1_500, agentTransmit: 2_600, coordinatorReceive: 2_000)
        for sample in [replyBeforeProbe, agentRepliesBeforeReceiving, negativeRoundTrip] {
            #expect(!sample.isPlausible)
            estimator.add(sample)
        }
        #expect(estimator.estimate == nil)
        #expect(estimator.rejectedSampleCount == 3)

        let good = ClockSample(coordinatorTransmit: 1_000, agentReceive: 1_600, agentTransmit: 1_700, coordinatorReceive: 1_300)
        #expect(good.isPlausible)
        #expect(good.roundTrip == 200)
        #expect(good.offset == 500)
        #expect(good.midpoint == 1_150)
        estimator.add(good)
        let estimate = try #require(estimator.estimate)
        #expect(estimate.offsetNanoseconds == 500)
        estimator.add(replyBeforeProbe)
        #expect(estimator.rejectedSampleCount == 4)
        #expect(estimator.estimate == estimate)

        estimator.reset()
        #expect(estimator.estimate == nil)
        #expect(estimator.sampleCount == 0)
        #expect(estimator.rejectedSampleCount == 4)
    }

    @Test("with too few samples for a fit, drift is zero and the offset is the lowest-round-trip sample's")
    func fewSamples() throws {
        var simulator = ProbeSimulator(seed: 42, offset: 3_700_000, driftPPM: 42)
        var estimator = ClockEstimator()
        var samples: [ClockSample] = []
        for _ in 0..<5 {
            let sample = simulator.nextProbe()
            samples.append(sample)
            estimator.add(sample)
        }
        let estimate = try #require(estimator.estimate)
        let best = try #require(samples.min { $0.roundTrip < $1.roundTrip })
        #expect(estimate.driftPPM == 0)
        #expect(estimate.offsetNanoseconds == best.offset)
        #expect(estimate.usedSampleCount == 1)
        #expect(estimate.reference == samples[4].midpoint)
        #expect(estimate.errorBoundNanoseconds >= simulator.offsetError(of: estimate).magnitude)
    }

    @Test("samples older than the window stop influencing the estimate, which then follows a small step")
    func window() throws {
        let configuration = ClockEstimator.Configuration(windowNanoseconds: 10_000_000_000)
        var simulator = ProbeSimulator(seed: 1234, offset: 3_700_000, driftPPM: 42)
        simulator.steps = [(at: simulator.start + 20_000_000_000, by: 300_000)]
        var estimator = ClockEstimator(configuration: configuration)
        simulator.feed(untilSecond: 20, to: &estimator)
        let beforeStep = try #require(estimator.estimate)
        #expect(simulator.offsetError(of: beforeStep).magnitude < 20_000)

        var afterStep: [ClockSample] = []
        while simulator.now < simulator.start + 31_000_000_000 {
            let sample = simulator.nextProbe()
            afterStep.append(sample)
            estimator.add(sample)
        }
        let estimate = try #require(estimator.estimate)
        #expect(simulator.offsetError(of: estimate).magnitude < 20_000)
        #expect(estimator.jumpCount == 0)

        var windowOnly = ClockEstimator(configuration: configuration)
        for sample in afterStep where sample.midpoint >= estimate.reference - configuration.windowNanoseconds {
            windowOnly.add(sample)
        }
        #expect(windowOnly.estimate == estimate)
    }

    @Test("no more than the configured maximum of samples is kept")
    func sampleLimit() throws {
        var simulator = ProbeSimulator(seed: 98765, offset: 3_700_000, driftPPM: 42)
        var estimator = ClockEstimator(configuration: .init(maximumSamples: 100))
        simulator.feed(150, to: &estimator)
        let estimate = try #require(estimator.estimate)
        #expect(estimator.sampleCount == 100)
        #expect(estimate.sampleCount == 100)
        #expect(simulator.offsetError(of: estimate).magnitude < 20_000)
    }

    @Test("a +50 ms clock jump is detected once and the estimate follows within a few samples", arguments: clockSeeds)
    func clockJump(seed: UInt64) throws {
        var simulator = ProbeSimulator(seed: seed, offset: 3_700_000, driftPPM: 42)
        simulator.steps = [(at: simulator.start + 10_000_000_000, by: 50_000_000)]
        var estimator = ClockEstimator()
        simulator.feed(untilSecond: 10, to: &estimator)
        #expect(estimator.jumpCount == 0)

        simulator.feed(3, to: &estimator)
        #expect(estimator.jumpCount == 1)
        let soon = try #require(estimator.estimate)
        let soonError = simulator.offsetError(of: soon)
        #expect(soonError.magnitude < 150_000)
        #expect(soon.errorBoundNanoseconds >= soonError.magnitude)

        simulator.feed(40, to: &estimator)
        let settled = try #require(estimator.estimate)
        let settledError = simulator.offsetError(of: settled)
        #expect(settledError.magnitude < 30_000)
        #expect(settled.errorBoundNanoseconds >= settledError.magnitude)
        #expect(estimator.jumpCount == 1)
    }

    @Test("agentTime and coordinatorTime are inverses within 1 ns at drifts of ±100 ppm", arguments: [-100, 100] as [Double])
    func timeConversions(driftPPM: Double) {
        let estimate = ClockEstimate(
            offsetNanoseconds: -3_600_000_123_456.75,
            driftPPM: driftPPM,
            reference: 5_000_000_000_000,
            minimumRoundTrip: 800_000,
            errorBoundNanoseconds: 200_000,
            driftUncertaintyPPM: 0.5,
            sampleCount: 100,
            usedSampleCount: 50)
        var random = SeededRandom(seed: 3)
        for _ in 0..<1_000 {
            let coordinator = estimate.reference + random.uniform(-3_600_000_000_000...3_600_000_000_000)
            let agent = estimate.agentTime(atCoordinator: coordinator)
            #expect((Double(agent - coordinator) - estimate.offset(atCoordinator: coordinator)).magnitude <= 0.5 + 1e-3)
            #expect((estimate.coordinatorTime(atAgent: agent) - coordinator).magnitude <= 1)
            #expect((estimate.agentTime(atCoordinator: estimate.coordinatorTime(atAgent: coordinator)) - coordinator).magnitude <= 1)
        }
        #expect(estimate.errorBound(atCoordinator: estimate.reference) == 200_000)
        #expect(estimate.errorBound(atCoordinator: estimate.reference - 10_000_000_000) == 205_000)
    }
}
