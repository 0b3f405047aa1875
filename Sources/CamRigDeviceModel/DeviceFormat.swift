/// One way a device can deliver images: a pixel format at one size, with the frame rates it allows
/// there (AVFoundation's `AVCaptureDevice.Format`).
public struct DeviceFormat: Hashable, Sendable, Identifiable, CustomStringConvertible {
    /// Stable within the device, e.g. `YUYV-1920x1080`.
    public var id: String { "\(pixelFormat.fourCC)-\(dimensions)" }
    public var pixelFormat: PixelFormat
    public var dimensions: Dimensions
    public var frameRateRanges: [FrameRateRange]
    /// Sizes a photo may be captured at in this format: the format's own size, and for uncompressed
    /// formats half of it each way, binned 2×2 on the agent (fewer pixels, less noise).
    public var supportedPhotoDimensions: [Dimensions]
    public var maxZoomFactor: Double
    /// Bytes per image line of uncompressed formats (0 for compressed ones).
    public var bytesPerLine: UInt32
    /// Bytes of one image (for compressed formats: the largest one).
    public var imageSize: UInt32

    public init(
        pixelFormat: PixelFormat,
        dimensions: Dimensions,
        frameRateRanges: [FrameRateRange],
        supportedPhotoDimensions: [Dimensions]? = nil,
        maxZoomFactor: Double = 1,
        bytesPerLine: UInt32? = nil,
        imageSize: UInt32? = nil
    ) {
        self.pixelFormat = pixelFormat
        self.dimensions = dimensions
        self.frameRateRanges = frameRateRanges
        self.supportedPhotoDimensions = supportedPhotoDimensions ?? [dimensions] + (PhotoPlan.binnedDimensions(pixelFormat, dimensions).map { [$0] } ?? [])
        self.maxZoomFactor = maxZoomFactor
        let bits = pixelFormat.bitsPerPixel
        if pixelFormat.isPlanarYUV420 {
            // The luma plane's line; the chroma planes add half as many bytes again.
            let line = bytesPerLine ?? dimensions.width
            self.bytesPerLine = line
            self.imageSize = imageSize ?? line * dimensions.height * 3 / 2
            return
        }
        let line = bytesPerLine ?? bits.map { UInt32(Int(dimensions.width) * $0 / 8) } ?? 0
        self.bytesPerLine = line
        self.imageSize = imageSize ?? (line > 0 ? line * dimensions.height : UInt32(dimensions.pixelCount))
    }

    /// Whether some range of the format allows `duration`.
    public func supports(_ duration: FrameDuration) -> Bool {
        frameRateRanges.contains { $0.contains(duration) }
    }

    /// The range with the highest maximum frame rate.
    public var fastestRange: FrameRateRange? {
        frameRateRanges.min { $0.minFrameDuration < $1.minFrameDuration }
    }

    /// The default frame duration: 1/30 s when allowed, else the fastest the format offers.
    public var defaultFrameDuration: FrameDuration? {
        let thirty = FrameDuration(framesPerSecond: 30)!
        return supports(thirty) ? thirty : fastestRange?.minFrameDuration
    }

    public var description: String {
        "\(pixelFormat.fourCC) \(dimensions) [\(frameRateRanges.map(\.description).joined(separator: ", "))]"
    }
}
