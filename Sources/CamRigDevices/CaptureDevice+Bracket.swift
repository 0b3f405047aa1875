import CamRigDeviceModel
import Foundation

/// Exposure brackets: images taken one after another, each at its own exposure, without changing the
/// device's settings.
extension CaptureDevice {
    /// How a bracket moves the exposure on this device now.
    public enum BracketMethod: String, Sendable {
        /// A custom or locked exposure: its duration times 2^bias (at most one second).
        case exposureDuration = "exposure duration"
        /// Automatic exposure with a settable target bias: the bias plus the bracket's.
        case targetBias = "target bias"
        /// Automatic exposure without a target bias: the camera cannot be bracketed.
        case none
    }

    public var bracketMethod: BracketMethod {
        let settings = self.settings
        if settings.exposureMode == .custom || settings.exposureMode == .locked, typedControlSupport.exposureModes.contains(.custom) { return .exposureDuration }
        return typedControlSupport.exposureTargetBias ? .targetBias : .none
    }

    /// Exposes the next frames with `bias` EV more (less, when negative) than the device's settings say,
    /// until `endExposureBracket`; returns how.
    @discardableResult
    public func applyExposureBracket(bias: Float) throws(DeviceError) -> BracketMethod {
        var settings = self.settings
        let method = bracketMethod
        switch method {
        case .exposureDuration:
            // In microseconds, as V4L2's absolute exposure counts (100 µs units) and the synthetic camera take it.
            let microseconds = min(1_000_000, max(1, (settings.exposureDuration.seconds * exp2(Double(bias)) * 1_000_000).rounded()))
            settings.exposureDuration = FrameDuration(numerator: UInt32(microseconds), denominator: 1_000_000) ?? settings.exposureDuration
        case .targetBias:
            settings.exposureTargetBias = max(-8, min(8, settings.exposureTargetBias + bias))
        case .none:
            return .none
        }
        try backend.apply(settings: settings)
        return method
    }

    /// Exposes as the device's settings say again.
    public func endExposureBracket() throws(DeviceError) {
        try backend.apply(settings: settings)
    }
}
