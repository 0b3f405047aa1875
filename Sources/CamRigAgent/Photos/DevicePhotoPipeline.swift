import CamRigDeviceModel
import CamRigDevices
import NIOConcurrencyHelpers

/// One device's photos in flight (AVCapturePhotoOutput's capture and processing stages).
///
/// One capture stage runs at a time: a capture begins when the previous one's capture stage has ended
/// (responsive capture), or, without responsive capture, once the previous photo is processed too.
/// Captures wait their turn in the order they asked. The pipeline also keeps how long processing took
/// at each level lately, for the estimate a capture announces before it begins.
final class DevicePhotoPipeline: Sendable {
    private struct Waiter {
        let responsive: Bool
        let continuation: CheckedContinuation<Void, Never>
    }

    private struct State {
        var capturing = false
        var processing = 0
        var waiters: [Waiter] = []
        /// The exposure start of the latest photo's reference frame: the next photo's is later.
        var lastReference: Int64 = .min
        /// Whether captures of the device may overlap processing (its photo output's, as the latest capture said).
        var responsive = false
        /// The readiness last reported.
        var reported = Readiness.ready
        /// Recent processing durations per level, newest last.
        var history: [PhotoQualityPrioritization: [Int64]] = [:]

        /// Adds a processing duration to the level's history, keeping the latest `historyLength`.
        mutating func remember(_ duration: Int64, level: PhotoQualityPrioritization) {
            history[level, default: []].append(duration)
            if history[level]!.count > DevicePhotoPipeline.historyLength { history[level]!.removeFirst() }
        }

        func ready(responsive: Bool) -> Bool { !capturing && (responsive || processing == 0) }

        var readiness: Readiness {
            if capturing || !waiters.isEmpty { return .waitingForCapture }
            return responsive || processing == 0 ? .ready : .waitingForProcessing
        }

        /// The readiness, when it changed since last reported.
        mutating func changedReadiness() -> Readiness? {
            let now = readiness
            guard now != reported else { return nil }
            reported = now
            return now
        }

        /// Lets the first waiter in, when it may begin; it takes the capture stage.
        mutating func admit() -> CheckedContinuation<Void, Never>? {
            guard let first = waiters.first, ready(responsive: first.responsive) else { return nil }
            waiters.removeFirst()
            capturing = true
            return first.continuation
        }
    }

    private let state = NIOLockedValueBox(State())
    /// Told the device's readiness whenever it changes (AVCapturePhotoOutput's `captureReadiness`).
    private let onReadiness: @Sendable (Readiness) -> Void

    /// Whether a capture could begin now.
    enum Readiness: Sendable, Equatable {
        case ready
        case waitingForCapture
        case waitingForProcessing
    }

    init(onReadiness: @escaping @Sendable (Readiness) -> Void = { _ in }) {
        self.onReadiness = onReadiness
    }
    /// Processing durations kept per level for the estimate.
    static let historyLength = 16

    /// The device's readiness now.
    var readiness: Readiness { state.withLockedValue { $0.readiness } }

    /// Whether a capture could begin now (AVCapturePhotoOutput's `captureReadiness`).
    func isReady(responsive: Bool) -> Bool {
        state.withLockedValue { $0.waiters.isEmpty && $0.ready(responsive: responsive) }
    }

    /// Waits until this capture may begin, then holds the capture stage until `endCapture`.
    func beginCapture(responsive: Bool) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let (admitted, changed) = state.withLockedValue { state -> (CheckedContinuation<Void, Never>?, Readiness?) in
                state.responsive = responsive
                state.waiters.append(Waiter(responsive: responsive, continuation: continuation))
                return (state.admit(), state.changedReadiness())
            }
            if let changed { onReadiness(changed) }
            admitted?.resume()
        }
    }

    /// Ends the capture stage; `processing` when a processing stage follows now (not deferred, not failed).
    func endCapture(processing: Bool) {
        let (admitted, changed) = state.withLockedValue { state -> (CheckedContinuation<Void, Never>?, Readiness?) in
            state.capturing = false
            if processing { state.processing += 1 }
            return (state.admit(), state.changedReadiness())
        }
        if let changed { onReadiness(changed) }
        admitted?.resume()
    }

    /// Ends a processing stage; `duration` (when it completed) joins the level's history.
    func endProcessing(level: PhotoQualityPrioritization, duration: Int64?) {
        let (admitted, changed) = state.withLockedValue { state -> (CheckedContinuation<Void, Never>?, Readiness?) in
            state.processing = max(0, state.processing - 1)
            if let duration { state.remember(duration, level: level) }
            return (state.admit(), state.changedReadiness())
        }
        if let changed { onReadiness(changed) }
        admitted?.resume()
    }

    /// Records a processing duration made outside the pipeline (a deferred photo's final).
    func record(level: PhotoQualityPrioritization, duration: Int64) {
        state.withLockedValue { $0.remember(duration, level: level) }
    }

    /// The processing time to expect at `level`: the smallest and largest of the recent ones (0, 0 when none).
    func estimate(level: PhotoQualityPrioritization) -> (min: Int64, max: Int64) {
        state.withLockedValue { state in
            guard let history = state.history[level], let low = history.min(), let high = history.max() else { return (0, 0) }
            return (low, high)
        }
    }

    /// The exposure start of the device's latest photo's reference frame (`Int64.min` before the first):
    /// a photo is never of the same moment as the one before it.
    var lastReference: Int64 {
        get { state.withLockedValue { $0.lastReference } }
    }

    func setLastReference(_ exposureStart: Int64) {
        state.withLockedValue { $0.lastReference = max($0.lastReference, exposureStart) }
    }

    /// How many captures wait for their turn.
    var waitingCount: Int { state.withLockedValue { $0.waiters.count } }

    /// Whether nothing is captured or processed now.
    var isIdle: Bool { state.withLockedValue { !$0.capturing && $0.processing == 0 && $0.waiters.isEmpty } }
}
