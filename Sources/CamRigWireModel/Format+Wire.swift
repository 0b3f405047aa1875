import CamRigDeviceModel
import CamRigWire

// The device model's value types in wire messages and back, shared by agents and coordinators.

extension WireRational {
    public init(_ duration: FrameDuration) {
        self.init()
        numerator = duration.numerator
        denominator = duration.denominator
    }

    /// `nil` when the denominator or numerator is 0.
    public var duration: FrameDuration? { FrameDuration(numerator: numerator, denominator: denominator) }
}

extension WireDimensions {
    public init(_ dimensions: Dimensions) {
        self.init()
        width = dimensions.width
        height = dimensions.height
    }

    public var dimensions: Dimensions { Dimensions(width: width, height: height) }
}

extension WireFrameRateRange {
    public init(_ range: FrameRateRange) {
        self.init()
        minFrameDuration = WireRational(range.minFrameDuration)
        maxFrameDuration = WireRational(range.maxFrameDuration)
        switch range.kind {
        case .discrete: kind = .discrete
        case .continuous: kind = .continuous
        case .stepwise(let step):
            kind = .stepwise
            self.step = WireRational(step)
        }
    }

    /// The range in the device model; `nil` when a duration is invalid or the kind unknown.
    public var range: FrameRateRange? {
        guard let min = minFrameDuration.duration, let max = maxFrameDuration.duration else { return nil }
        switch kind {
        case .discrete: return min == max ? FrameRateRange(discrete: min) : nil
        case .continuous: return FrameRateRange(min: min, max: max, kind: .continuous)
        case .stepwise:
            guard let step = step.duration else { return nil }
            return FrameRateRange(min: min, max: max, kind: .stepwise(step: step))
        default: return nil
        }
    }
}

extension WireFormat {
    public init(_ format: DeviceFormat) {
        self.init()
        id = format.id
        pixelFormat = format.pixelFormat.rawValue
        fourcc = format.pixelFormat.fourCC
        dimensions = WireDimensions(format.dimensions)
        frameRateRanges = format.frameRateRanges.map(WireFrameRateRange.init)
        supportedPhotoDimensions = format.supportedPhotoDimensions.map(WireDimensions.init)
        maxZoomFactor = format.maxZoomFactor
        compressed = format.pixelFormat.isCompressed
    }

    /// The pixel format, size and frame-rate ranges this format offers (ranges that do not parse are left out).
    public var pixelFormatValue: PixelFormat { PixelFormat(rawValue: pixelFormat) }
    public var rateRanges: [FrameRateRange] { frameRateRanges.compactMap(\.range) }
}
