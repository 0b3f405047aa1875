import NIOConcurrencyHelpers

extension CaptureDevice {
    /// Whether a zoom ramp is under way.
    public var isRampingZoom: Bool { zoomRamp.withLockedValue { $0 != nil } }

    /// Moves the zoom factor geometrically towards `target` at `rate` doublings per second, about 30 steps
    /// a second, through the backend (`rampToVideoZoomFactor(_:withRate:)`).
    func startZoomRamp(to target: Double, rate: Double) {
        let task = Task { [weak self] in
            let step = 1.0 / 30
            while !Task.isCancelled, let self {
                try? await Task.sleep(for: .milliseconds(33))
                guard !Task.isCancelled else { return }
                var settings = self.settings
                let factor = pow2(rate * step)
                let next = target > settings.zoomFactor ? min(settings.zoomFactor * factor, target) : max(settings.zoomFactor / factor, target)
                settings.zoomFactor = next
                do {
                    try self.backend.apply(settings: settings)
                } catch {
                    break
                }
                self.state.withLockedValue { $0.settings.zoomFactor = next }
                if next == target { break }
            }
            self?.zoomRamp.withLockedValue { $0 = nil }
        }
        zoomRamp.withLockedValue { $0 = task }
    }

    func cancelZoomRamp() {
        zoomRamp.withLockedValue { task in
            task?.cancel()
            task = nil
        }
    }
}

/// 2^x for the zoom ramp.
private func pow2(_ x: Double) -> Double {
    var result = 1.0
    var remaining = x
    while remaining >= 1 { result *= 2; remaining -= 1 }
    while remaining <= -1 { result /= 2; remaining += 1 }
    // exp(f ln 2) by its series; |f ln 2| < 0.7 converges fast.
    let y = remaining * 0.693_147_180_559_945
    var term = 1.0
    var sum = 1.0
    for n in 1...12 {
        term *= y / Double(n)
        sum += term
    }
    return result * sum
}
