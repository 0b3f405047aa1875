/// One NTP-style probe of an agent's clock: four timestamps in nanoseconds.
///
/// `coordinatorTransmit` (t1) and `coordinatorReceive` (t4) are read from the coordinator's clock,
/// `agentReceive` (t2) and `agentTransmit` (t3) from the agent's clock.
public struct ClockSample: Sendable, Hashable {
    /// t1: the coordinator sends the probe (coordinator clock).
    public var coordinatorTransmit: Int64
    /// t2: the agent receives the probe (agent clock).
    public var agentReceive: Int64
    /// t3: the agent sends its reply (agent clock).
    public var agentTransmit: Int64
    /// t4: the coordinator receives the reply (coordinator clock).
    public var coordinatorReceive: Int64

    public init(coordinatorTransmit: Int64, agentReceive: Int64, agentTransmit: Int64, coordinatorReceive: Int64) {
        self.coordinatorTransmit = coordinatorTransmit
        self.agentReceive = agentReceive
        self.agentTransmit = agentTransmit
        self.coordinatorReceive = coordinatorReceive
    }

    /// Time spent on the network: `(t4 − t1) − (t3 − t2)`.
    public var roundTrip: Int64 {
        (coordinatorReceive &- coordinatorTransmit) &- (agentTransmit &- agentReceive)
    }

    /// Twice the offset, `(t2 − t1) + (t3 − t4)`, exact in integers.
    var doubledOffset: Int64 {
        (agentReceive &- coordinatorTransmit) &+ (agentTransmit &- coordinatorReceive)
    }

    /// The agent's clock minus the coordinator's, `((t2 − t1) + (t3 − t4)) / 2`, in nanoseconds.
    ///
    /// Exact when the offset is within ±2⁵² ns (about 52 days); its error against the truth is
    /// half the difference between the forward and return delays, at most `roundTrip / 2`.
    public var offset: Double { Double(doubledOffset) / 2 }

    /// The coordinator time the offset applies to: `(t1 + t4) / 2`, rounded down.
    public var midpoint: Int64 {
        coordinatorTransmit &+ (coordinatorReceive &- coordinatorTransmit) / 2
    }

    /// Whether the timestamps can describe a real exchange: the reply arrives no earlier than the
    /// probe left, the agent replies no earlier than it received, the round trip is not negative,
    /// and no difference overflows.
    public var isPlausible: Bool {
        guard coordinatorReceive >= coordinatorTransmit, agentTransmit >= agentReceive else { return false }
        let (coordinatorSpan, o1) = coordinatorReceive.subtractingReportingOverflow(coordinatorTransmit)
        let (agentSpan, o2) = agentTransmit.subtractingReportingOverflow(agentReceive)
        let (forward, o3) = agentReceive.subtractingReportingOverflow(coordinatorTransmit)
        let (backward, o4) = agentTransmit.subtractingReportingOverflow(coordinatorReceive)
        let (_, o5) = forward.addingReportingOverflow(backward)
        guard !(o1 || o2 || o3 || o4 || o5) else { return false }
        return coordinatorSpan >= agentSpan
    }
}

/// An agent's clock relative to the coordinator's: `agentTime ≈ coordinatorTime + offset(t)`, with
/// `offset(t) = offsetNanoseconds + driftPPM × 10⁻⁶ × (t − reference)`.
public struct ClockEstimate: Sendable, Hashable {
    /// Agent − coordinator at `reference`, in nanoseconds.
    public var offsetNanoseconds: Double
    /// Rate of the agent clock relative to the coordinator's, in parts per million: d offset / d t × 10⁶.
    /// Zero until enough samples are available to fit it.
    public var driftPPM: Double
    /// The coordinator time `offsetNanoseconds` refers to: the midpoint of the newest sample.
    public var reference: Int64
    /// The smallest round trip among the samples used.
    public var minimumRoundTrip: Int64
    /// A bound on |offset error| at `reference`, in nanoseconds. It is the sum of
    /// - the base-path asymmetry allowance: `pathAsymmetryAllowance × minimumRoundTrip / 2`, the error
    ///   if the fastest forward and return paths differ by that fraction of the round trip (a fraction
    ///   of 1 gives the classic worst case `minimumRoundTrip / 2`);
    /// - the queueing bias: the most the samples' queueing can move the fitted offset, if each sample's
    ///   offset is off by half its round-trip excess over the minimum (all queueing on one leg) in the
    ///   direction that hurts: each sample's share of the fitted offset, by magnitude, times that;
    /// - `coverageFactor` standard errors of the fitted offset at `reference` (random error).
    /// No measurement can tell a constant path asymmetry from an offset, so the first term is an
    /// assumption about the network, not an observation.
    public var errorBoundNanoseconds: Double
    /// The first term of `errorBoundNanoseconds`, the assumed base-path asymmetry: the part of the bound
    /// that more probes cannot shrink.
    public var asymmetryAllowanceNanoseconds: Double
    /// How fast the bound grows away from `reference`, in parts per million: `coverageFactor` standard
    /// errors of the fitted drift plus the most the samples' queueing can tilt it (as for the bound),
    /// at least the configured floor; or the configured allowance for an unknown drift while drift is
    /// not fitted.
    public var driftUncertaintyPPM: Double
    /// Samples in the window.
    public var sampleCount: Int
    /// Samples that went into the fit.
    public var usedSampleCount: Int

    public init(
        offsetNanoseconds: Double,
        driftPPM: Double,
        reference: Int64,
        minimumRoundTrip: Int64,
        errorBoundNanoseconds: Double,
        driftUncertaintyPPM: Double,
        sampleCount: Int,
        usedSampleCount: Int,
        asymmetryAllowanceNanoseconds: Double = 0
    ) {
        self.asymmetryAllowanceNanoseconds = asymmetryAllowanceNanoseconds
        self.offsetNanoseconds = offsetNanoseconds
        self.driftPPM = driftPPM
        self.reference = reference
        self.minimumRoundTrip = minimumRoundTrip
        self.errorBoundNanoseconds = errorBoundNanoseconds
        self.driftUncertaintyPPM = driftUncertaintyPPM
        self.sampleCount = sampleCount
        self.usedSampleCount = usedSampleCount
    }

    /// Agent − coordinator at coordinator time `t`, in nanoseconds.
    public func offset(atCoordinator t: Int64) -> Double {
        offsetNanoseconds + driftPPM * 1e-6 * Double(t &- reference)
    }

    /// The agent's clock reading at coordinator time `t`, rounded to the nanosecond.
    public func agentTime(atCoordinator t: Int64) -> Int64 {
        let whole = offsetNanoseconds.rounded()
        let fraction = offsetNanoseconds - whole
        let rest = fraction + driftPPM * 1e-6 * Double(t &- reference)
        return t &+ Int64(whole) &+ Int64(rest.rounded())
    }

    /// The coordinator time at which the agent's clock reads `t` (inverse of `agentTime(atCoordinator:)`),
    /// rounded to the nanosecond.
    public func coordinatorTime(atAgent t: Int64) -> Int64 {
        let whole = offsetNanoseconds.rounded()
        let fraction = offsetNanoseconds - whole
        let agentSinceReference = Double(t &- reference &- Int64(whole)) - fraction
        let coordinatorSinceReference = agentSinceReference / (1 + driftPPM * 1e-6)
        return reference &+ Int64(coordinatorSinceReference.rounded())
    }

    /// Whether more probes would not soon make this estimate much better: drift is fitted and, over
    /// `horizonNanoseconds` from `reference`, its uncertainty adds no more than the measured part of
    /// the bound (the bound less the assumed asymmetry, or a microsecond, whichever is more).
    ///
    /// A first estimate rests on a burst of probes a few milliseconds apart: its offset is as good as
    /// the network allows, but its drift is the prior's ±100 ppm (or a fit over a span too short to
    /// tell), so a second later it may be off by far more than a warm estimate. A settled estimate
    /// serves a trigger a second ahead, or a frame timestamp a second old, about as well as one that
    /// has been probing for minutes. The horizon defaults to one second, longer than a capture's lead.
    public func isSettled(horizonNanoseconds: Int64 = 1_000_000_000) -> Bool {
        let measured = max(1_000, errorBoundNanoseconds - asymmetryAllowanceNanoseconds)
        return usedSampleCount >= 3 && driftUncertaintyPPM * 1e-6 * Double(horizonNanoseconds) <= measured
    }

    /// The error bound at coordinator time `t`: `errorBoundNanoseconds` grown by
    /// `|t − reference| × driftUncertaintyPPM × 10⁻⁶`; never below `errorBoundNanoseconds`.
    public func errorBound(atCoordinator t: Int64) -> Double {
        errorBoundNanoseconds + Double(t &- reference).magnitude * driftUncertaintyPPM * 1e-6
    }
}

/// Estimates one agent's clock offset and drift from a sliding window of four-timestamp probes.
///
/// Samples outside the window are dropped as new ones arrive. An estimate keeps the lowest-round-trip
/// fraction of the window (probes delayed by queueing carry asymmetric delay), fits
/// `offset = a + b × (midpoint − reference)` by weighted least squares, with weights falling with each
/// sample's round-trip excess over the minimum, then drops samples whose residual is far outside the
/// median absolute deviation and refits. With fewer usable samples than `minimumSamplesForDrift`,
/// drift is 0 and the offset is that of the lowest-round-trip sample.
///
/// A clock jump is a sample whose whole uncertainty interval `offset ± roundTrip / 2` lies farther
/// from the prediction than `max(jumpThresholdNanoseconds, jumpBoundMultiplier × errorBound)`. After
/// `jumpConfirmationSamples` such samples in a row that agree with one another, the window restarts
/// from them and `jumpCount` increases; a lone disagreeing sample is discarded as a glitch.
public struct ClockEstimator: Sendable {
    /// Tuning of the window, the filter, the error bound and jump detection.
    public struct Configuration: Sendable, Hashable {
        /// Samples whose midpoint is older than the newest midpoint minus this (coordinator ns) are dropped.
        public var windowNanoseconds: Int64
        /// At most this many samples are kept; the oldest go first.
        public var maximumSamples: Int
        /// The fraction of the window's samples, lowest round trip first, that the fit considers.
        public var fitFraction: Double
        /// Drift is fitted once this many samples are usable (the fit considers at least this many when
        /// the window holds them); below it drift is 0.
        public var minimumSamplesForDrift: Int
        /// The smallest round-trip excess scale in the weights `1 / (1 + (excess / scale)²)`, where the
        /// scale is otherwise the median excess of the samples considered.
        public var jitterFloorNanoseconds: Double
        /// Residuals farther than this many robust standard deviations (1.4826 × MAD) from the median
        /// residual are dropped before the refit.
        public var outlierThreshold: Double
        /// Residuals within this many nanoseconds of the median residual are never dropped.
        public var outlierFloorNanoseconds: Double
        /// The assumed largest difference between the fastest forward and return paths, as a fraction
        /// of the minimum round trip (see `ClockEstimate.errorBoundNanoseconds`). The default, 1, assumes
        /// nothing: even with the kernel's stamps on all four times, a loopback probe was seen to spend
        /// its whole round trip on one leg (the receiving side's softirq deferred, 20–40 µs), so any
        /// smaller fraction would be a bound the network can break.
        public var pathAsymmetryAllowance: Double
        /// Standard errors included in the error bound.
        public var coverageFactor: Double
        /// The drift uncertainty assumed while drift is not fitted (two crystals of ±50 ppm). It is also
        /// the prior spread of drift: a fitted drift is shrunk toward zero (ridge regression) by how
        /// uncertain the fit is relative to this, so a short or noisy window cannot claim hundreds of ppm.
        public var unfittedDriftUncertaintyPPM: Double
        /// The smallest drift uncertainty claimed once drift is fitted.
        public var driftUncertaintyFloorPPM: Double
        /// A jump must exceed at least this many nanoseconds.
        public var jumpThresholdNanoseconds: Double
        /// A jump must exceed at least this multiple of the error bound.
        public var jumpBoundMultiplier: Double
        /// Consecutive agreeing jump samples needed before the window restarts.
        public var jumpConfirmationSamples: Int

        public init(
            windowNanoseconds: Int64 = 60_000_000_000,
            maximumSamples: Int = 256,
            fitFraction: Double = 0.5,
            minimumSamplesForDrift: Int = 8,
            jitterFloorNanoseconds: Double = 1_000,
            outlierThreshold: Double = 5,
            outlierFloorNanoseconds: Double = 5_000,
            pathAsymmetryAllowance: Double = 1,
            coverageFactor: Double = 3,
            unfittedDriftUncertaintyPPM: Double = 100,
            driftUncertaintyFloorPPM: Double = 0.1,
            jumpThresholdNanoseconds: Double = 1_000_000,
            jumpBoundMultiplier: Double = 10,
            jumpConfirmationSamples: Int = 2
        ) {
            self.windowNanoseconds = windowNanoseconds
            self.maximumSamples = maximumSamples
            self.fitFraction = fitFraction
            self.minimumSamplesForDrift = minimumSamplesForDrift
            self.jitterFloorNanoseconds = jitterFloorNanoseconds
            self.outlierThreshold = outlierThreshold
            self.outlierFloorNanoseconds = outlierFloorNanoseconds
            self.pathAsymmetryAllowance = pathAsymmetryAllowance
            self.coverageFactor = coverageFactor
            self.unfittedDriftUncertaintyPPM = unfittedDriftUncertaintyPPM
            self.driftUncertaintyFloorPPM = driftUncertaintyFloorPPM
            self.jumpThresholdNanoseconds = jumpThresholdNanoseconds
            self.jumpBoundMultiplier = jumpBoundMultiplier
            self.jumpConfirmationSamples = jumpConfirmationSamples
        }
    }

    public let configuration: Configuration
    /// Implausible samples ignored since creation.
    public private(set) var rejectedSampleCount = 0
    /// Clock jumps detected since creation.
    public private(set) var jumpCount = 0
    /// The window, ordered by midpoint.
    private var samples: [ClockSample] = []
    /// Consecutive samples that disagree with the estimate like a jump, awaiting confirmation.
    private var jumpCandidates: [ClockSample] = []
    /// The estimate new samples are checked against for jumps, refitted every
    /// `max(1, sampleCount / predictionRefitDivisor)` samples; its bound grows with its age.
    private var prediction: ClockEstimate?
    private var samplesSincePrediction = 0
    private static let predictionRefitDivisor = 16

    public init(configuration: Configuration = .init()) {
        self.configuration = configuration
    }

    /// The estimate from the samples in the window; `nil` until the first plausible sample.
    /// Fitted once per change of the window, so reading it costs nothing: a trigger's fan-out reads every
    /// agent's estimate on its critical path. Samples held back as a possible jump are not part of it.
    public private(set) var estimate: ClockEstimate?

    /// Samples currently in the window.
    public var sampleCount: Int { samples.count }

    /// Adds a probe. Implausible samples are counted in `rejectedSampleCount` and otherwise ignored.
    public mutating func add(_ sample: ClockSample) {
        guard sample.isPlausible else {
            rejectedSampleCount += 1
            return
        }
        if let prediction, isJump(sample, from: prediction) {
            if let last = jumpCandidates.last, !agree(last, sample) {
                jumpCandidates.removeAll()
            }
            jumpCandidates.append(sample)
            guard jumpCandidates.count >= configuration.jumpConfirmationSamples else { return }
            samples = jumpCandidates.sorted { $0.midpoint < $1.midpoint }
            jumpCandidates.removeAll()
            jumpCount += 1
            prune()
            estimate = Self.fit(samples, configuration: configuration)
            refreshPrediction()
            return
        }
        jumpCandidates.removeAll()
        insert(sample)
        prune()
        estimate = Self.fit(samples, configuration: configuration)
        samplesSincePrediction += 1
        if prediction == nil || samplesSincePrediction >= samples.count / Self.predictionRefitDivisor {
            refreshPrediction()
        }
    }

    /// Forgets all samples (for example after the agent's clock was stepped); the counters remain.
    public mutating func reset() {
        samples.removeAll()
        estimate = nil
        jumpCandidates.removeAll()
        prediction = nil
        samplesSincePrediction = 0
    }

    private mutating func refreshPrediction() {
        prediction = estimate
        samplesSincePrediction = 0
    }

    private mutating func insert(_ sample: ClockSample) {
        var index = samples.endIndex
        while index > samples.startIndex, samples[index - 1].midpoint > sample.midpoint {
            index -= 1
        }
        samples.insert(sample, at: index)
    }

    private mutating func prune() {
        guard let newest = samples.last?.midpoint else { return }
        let oldestKept = newest.subtractingReportingOverflow(configuration.windowNanoseconds)
        var drop = max(0, samples.count - max(configuration.maximumSamples, 1))
        if !oldestKept.overflow {
            while drop < samples.count, samples[drop].midpoint < oldestKept.partialValue { drop += 1 }
        }
        if drop > 0 { samples.removeFirst(drop) }
    }

    /// Whether even the most favourable reading of `sample` is too far from the prediction.
    private func isJump(_ sample: ClockSample, from estimate: ClockEstimate) -> Bool {
        let midpoint = sample.midpoint
        let deviation = (sample.offset - estimate.offset(atCoordinator: midpoint)).magnitude
        let excess = deviation - Double(sample.roundTrip) / 2
        let threshold = max(
            configuration.jumpThresholdNanoseconds,
            configuration.jumpBoundMultiplier * estimate.errorBound(atCoordinator: midpoint))
        return excess > threshold
    }

    /// Whether two jump samples could describe the same clock: they are no jump relative to each other.
    private func agree(_ a: ClockSample, _ b: ClockSample) -> Bool {
        let difference = Double(a.doubledOffset &- b.doubledOffset).magnitude / 2
        let tolerance = Double(a.roundTrip &+ b.roundTrip) / 2
        return difference - tolerance <= configuration.jumpThresholdNanoseconds
    }

    // MARK: Fitting

    private struct Point {
        /// Seconds from the reference (coordinator time).
        var x: Double
        /// Offset in nanoseconds relative to the base offset.
        var y: Double
        var weight: Double
        var sample: ClockSample
    }

    private struct Line {
        /// Offset at the reference, relative to the base offset (ns).
        var intercept: Double
        /// Nanoseconds per second.
        var slope: Double
        var interceptVariance: Double
        var slopeVariance: Double
        /// The fit's weighted mean of x and total weight, and the (shrunk) `sxx` of its normal equation:
        /// what each point's influence on the intercept and the slope follows from.
        var meanX: Double
        var totalWeight: Double
        var shrunkSxx: Double

        /// How much of point `point`'s error reaches the intercept (at x = 0) and the slope: the fit is
        /// linear in the y values, `intercept = Σ interceptShare × y`, `slope = Σ slopeShare × y`.
        func shares(of point: Point) -> (intercept: Double, slope: Double) {
            let slopeShare = point.weight * (point.x - meanX) / shrunkSxx
            return (point.weight / totalWeight - meanX * slopeShare, slopeShare)
        }
    }

    private static func fit(_ window: [ClockSample], configuration: Configuration) -> ClockEstimate? {
        guard let newest = window.last else { return nil }
        let reference = newest.midpoint
        let minimumForDrift = max(configuration.minimumSamplesForDrift, 3)
        let quantileCount = Int((configuration.fitFraction * Double(window.count)).rounded(.up))
        let consideredCount = min(window.count, max(quantileCount, minimumForDrift, 1))
        let considered = lowestRoundTrips(consideredCount, of: window)
        var best = considered[0]
        for sample in considered where sample.roundTrip < best.roundTrip { best = sample }

        func unfitted(from best: ClockSample) -> ClockEstimate {
            let age = Double(reference &- best.midpoint).magnitude
            return ClockEstimate(
                offsetNanoseconds: best.offset,
                driftPPM: 0,
                reference: reference,
                minimumRoundTrip: best.roundTrip,
                errorBoundNanoseconds: configuration.pathAsymmetryAllowance * Double(best.roundTrip) / 2
                    + age * configuration.unfittedDriftUncertaintyPPM * 1e-6,
                driftUncertaintyPPM: configuration.unfittedDriftUncertaintyPPM,
                sampleCount: window.count,
                usedSampleCount: 1,
                asymmetryAllowanceNanoseconds: configuration.pathAsymmetryAllowance * Double(best.roundTrip) / 2)
        }
        guard considered.count >= minimumForDrift else { return unfitted(from: best) }

        var excesses: [Double] = []
        excesses.reserveCapacity(considered.count)
        for sample in considered { excesses.append(Double(sample.roundTrip &- best.roundTrip)) }
        let scale = max(configuration.jitterFloorNanoseconds, select(considered.count / 2, in: &excesses))
        let baseDoubledOffset = best.doubledOffset
        var points: [Point] = []
        points.reserveCapacity(considered.count)
        for sample in considered {
            let excess = Double(sample.roundTrip &- best.roundTrip) / scale
            points.append(
                Point(
                    x: Double(sample.midpoint &- reference) * 1e-9,
                    y: Double(sample.doubledOffset &- baseDoubledOffset) / 2,
                    weight: 1 / (1 + excess * excess),
                    sample: sample))
        }

        guard var line = weightedLine(points, driftPriorPPM: configuration.unfittedDriftUncertaintyPPM) else { return unfitted(from: best) }
        for _ in 0..<2 {
            var residuals: [Double] = []
            residuals.reserveCapacity(points.count)
            for point in points { residuals.append(point.y - line.intercept - line.slope * point.x) }
            var scratch = residuals
            let center = median(&scratch)
            for index in scratch.indices { scratch[index] = (residuals[index] - center).magnitude }
            let spread = 1.4826 * median(&scratch)
            let limit = max(configuration.outlierFloorNanoseconds, configuration.outlierThreshold * spread)
            var kept: [Point] = []
            kept.reserveCapacity(points.count)
            for index in points.indices where (residuals[index] - center).magnitude <= limit {
                kept.append(points[index])
            }
            if kept.count == points.count { break }
            points = kept
            guard points.count >= minimumForDrift, let refitted = weightedLine(points, driftPriorPPM: configuration.unfittedDriftUncertaintyPPM) else {
                var survivor = points.first?.sample ?? best
                for point in points where point.sample.roundTrip < survivor.roundTrip { survivor = point.sample }
                return unfitted(from: survivor)
            }
            line = refitted
        }

        var minimumRoundTrip = points[0].sample.roundTrip
        for point in points { minimumRoundTrip = min(minimumRoundTrip, point.sample.roundTrip) }
        // Queueing: a sample's offset may be off by up to half its round-trip excess over the minimum,
        // all of it on one leg, and on a real path (or loopback, where the kernel defers one side's
        // work when the host is idle) it often is, the same way for many samples. The fit is linear in
        // the samples, so the worst case is each sample's share of the intercept (or the slope), taken
        // with its sign against us: extrapolating to the newest sample, older samples' shares are
        // negative, and samples that queue more in one part of the window than in another tilt the
        // slope, which a plain weighted mean of the excess would not cover.
        var queueingBias = 0.0, queueingSlope = 0.0
        for point in points {
            let shares = line.shares(of: point)
            let halfExcess = Double(point.sample.roundTrip &- minimumRoundTrip) / 2
            queueingBias += shares.intercept.magnitude * halfExcess
            queueingSlope += shares.slope.magnitude * halfExcess
        }
        let allowance = configuration.pathAsymmetryAllowance * Double(minimumRoundTrip) / 2
        let bound = allowance
            + queueingBias
            + configuration.coverageFactor * line.interceptVariance.squareRoot()
        let driftUncertainty = max(
            configuration.driftUncertaintyFloorPPM,
            (configuration.coverageFactor * line.slopeVariance.squareRoot() + queueingSlope) / 1_000)
        return ClockEstimate(
            offsetNanoseconds: Double(baseDoubledOffset) / 2 + line.intercept,
            driftPPM: line.slope / 1_000,
            reference: reference,
            minimumRoundTrip: minimumRoundTrip,
            errorBoundNanoseconds: bound,
            driftUncertaintyPPM: driftUncertainty,
            sampleCount: window.count,
            usedSampleCount: points.count,
            asymmetryAllowanceNanoseconds: allowance)
    }

    /// The `count` samples with the lowest round trips, in window order (ties go to the older sample).
    private static func lowestRoundTrips(_ count: Int, of window: [ClockSample]) -> [ClockSample] {
        guard count < window.count else { return window }
        var roundTrips: [Double] = []
        roundTrips.reserveCapacity(window.count)
        for sample in window { roundTrips.append(Double(sample.roundTrip)) }
        let cutoff = select(count - 1, in: &roundTrips)
        var below = 0
        for sample in window where Double(sample.roundTrip) < cutoff { below += 1 }
        var tiesAllowed = count - below
        var result: [ClockSample] = []
        result.reserveCapacity(count)
        for sample in window {
            let roundTrip = Double(sample.roundTrip)
            if roundTrip < cutoff {
                result.append(sample)
            } else if roundTrip == cutoff, tiesAllowed > 0 {
                result.append(sample)
                tiesAllowed -= 1
            }
        }
        return result
    }

    /// Weighted least squares `y = intercept + slope × x`, with variances from the weighted residuals;
    /// `nil` when the points do not span any time.
    ///
    /// The slope is the posterior mean under a zero-mean prior of spread `driftPriorPPM`: with residual
    /// variance s², the normal equation's `sxx` becomes `sxx + s² / prior²`.
    private static func weightedLine(_ points: [Point], driftPriorPPM: Double) -> Line? {
        guard points.count >= 3 else { return nil }
        var totalWeight = 0.0, meanX = 0.0, meanY = 0.0
        for point in points {
            totalWeight += point.weight
            meanX += point.weight * point.x
            meanY += point.weight * point.y
        }
        meanX /= totalWeight
        meanY /= totalWeight
        var sxx = 0.0, sxy = 0.0
        for point in points {
            let dx = point.x - meanX
            sxx += point.weight * dx * dx
            sxy += point.weight * dx * (point.y - meanY)
        }
        guard sxx > 0 else { return nil }
        let leastSquaresSlope = sxy / sxx
        var squaredResiduals = 0.0
        for point in points {
            let residual = point.y - (meanY - leastSquaresSlope * meanX) - leastSquaresSlope * point.x
            squaredResiduals += point.weight * residual * residual
        }
        let residualVariance = squaredResiduals / Double(points.count - 2)
        // Slope in ns per s: 1 ppm is 1000.
        let prior = driftPriorPPM * 1_000
        let shrunkSxx = prior > 0 ? sxx + residualVariance / (prior * prior) : sxx
        let slope = sxy / shrunkSxx
        let intercept = meanY - slope * meanX
        return Line(
            intercept: intercept,
            slope: slope,
            interceptVariance: residualVariance * (1 / totalWeight + meanX * meanX / shrunkSxx),
            slopeVariance: residualVariance / shrunkSxx,
            meanX: meanX, totalWeight: totalWeight, shrunkSxx: shrunkSxx)
    }

    /// The median of `values`, which are reordered.
    private static func median(_ values: inout [Double]) -> Double {
        let middle = values.count / 2
        let upper = select(middle, in: &values)
        guard values.count % 2 == 0 else { return upper }
        var lower = values[0]
        for index in 1..<middle { lower = max(lower, values[index]) }
        return (lower + upper) / 2
    }

    /// The `k`-th smallest of `values` (from 0), found by Hoare's selection: afterwards `values[k]` holds
    /// it, with no larger value before it and no smaller one after it.
    private static func select(_ k: Int, in values: inout [Double]) -> Double {
        var low = 0, high = values.count - 1
        while low < high {
            let pivot = values[k]
            var i = low, j = high
            repeat {
                while values[i] < pivot { i += 1 }
                while pivot < values[j] { j -= 1 }
                if i <= j {
                    values.swapAt(i, j)
                    i += 1
                    j -= 1
                }
            } while i <= j
            if j < k { low = i }
            if k < i { high = j }
        }
        return values[k]
    }
}
