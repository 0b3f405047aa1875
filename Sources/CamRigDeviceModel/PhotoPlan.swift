import Foundation

/// What a photo is delivered as.
public enum PhotoOutputType: Int, CaseIterable, Sendable, CustomStringConvertible {
    /// The frame in the camera's own pixel format (the coordinator makes PNG of raw formats).
    case frame = 0
    /// A JPEG made on the agent (libjpeg-turbo), from YUYV, RGB or grey frames; MJPEG frames already are one.
    case jpeg = 1
    /// Bayer RAW as a DNG file, from a camera streaming a Bayer format.
    case dng = 2

    public var description: String {
        switch self {
        case .frame: "frame"
        case .jpeg: "jpeg"
        case .dng: "dng"
        }
    }

    /// What a request for this output resolves to on frames of `format`, and why when it differs.
    public func resolved(for format: DeviceFormat) -> (PhotoOutputType, note: String?) {
        switch self {
        case .frame:
            return (.frame, nil)
        case .jpeg:
            if [.yuyv, .rgb24, .grey, .mjpeg, .jpeg, .nv12, .yuv420].contains(format.pixelFormat) { return (.jpeg, nil) }
            return (.frame, "JPEG is made from YUYV, NV12, YU12, RGB or grey frames; \(format.pixelFormat) frames were delivered as they are")
        case .dng:
            if format.pixelFormat == .bayerRGGB8 { return (.dng, nil) }
            return (.frame, "DNG needs a Bayer format; \(format.pixelFormat) frames were delivered as they are (configure the camera's RGGB format for RAW)")
        }
    }
}

/// How a photo trades speed against quality (AVFoundation's `photoQualityPrioritization`).
public enum PhotoQualityPrioritization: Int, Comparable, CaseIterable, Sendable, CustomStringConvertible {
    /// The frame exposed nearest the requested instant, from the frames the camera already streams
    /// (zero shutter lag): it may have started exposing just before that instant. No processing.
    case speed = 1
    /// The first frame exposed from the requested instant on, unprocessed.
    case balanced = 2
    /// `PhotoPlan.qualityFrames` frames exposed from the requested instant on, merged into one with
    /// less noise; where something moved between them, the first frame's pixels are kept.
    case quality = 3

    public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
    public var description: String {
        switch self {
        case .speed: "speed"
        case .balanced: "balanced"
        case .quality: "quality"
        }
    }
}

/// How a device makes photos, for every capture until changed (AVCapturePhotoOutput's configuration).
public struct PhotoOutputSettings: Hashable, Sendable {
    /// The largest photo a capture may ask for (0×0: no limit beyond the format's sizes).
    public var maxPhotoDimensions = Dimensions(width: 0, height: 0)
    /// The highest level a capture may ask for.
    public var maxQualityPrioritization = PhotoQualityPrioritization.quality
    /// A capture may begin once the previous capture stage ends, while that photo is still processed.
    public var responsiveCapture = false
    /// Quality photos are delivered at once as proxies and made in full later, under the same photo id.
    public var deferredDelivery = false

    public init(
        maxPhotoDimensions: Dimensions = Dimensions(width: 0, height: 0), maxQualityPrioritization: PhotoQualityPrioritization = .quality,
        responsiveCapture: Bool = false, deferredDelivery: Bool = false
    ) {
        self.maxPhotoDimensions = maxPhotoDimensions
        self.maxQualityPrioritization = maxQualityPrioritization
        self.responsiveCapture = responsiveCapture
        self.deferredDelivery = deferredDelivery
    }
}

/// How a photo is made on a device in a format: which frames it takes and what it does with them.
public struct PhotoPlan: Hashable, Sendable {
    /// How many frames a quality photo merges.
    public static let qualityFrames = 8

    /// The size a 2×2 binning of `format` at `dimensions` gives, when the format can be binned: YUYV
    /// (its half width even), RGB, grey, and RGGB (each colour binned with its own, so the size is a
    /// multiple of 4).
    public static func binnedDimensions(_ pixelFormat: PixelFormat, _ dimensions: Dimensions) -> Dimensions? {
        let half = Dimensions(width: dimensions.width / 2, height: dimensions.height / 2)
        guard half.width > 0, half.height > 0 else { return nil }
        switch pixelFormat {
        case .yuyv: return dimensions.width % 4 == 0 && dimensions.height % 2 == 0 ? half : nil
        case .rgb24, .grey: return dimensions.width % 2 == 0 && dimensions.height % 2 == 0 ? half : nil
        case .bayerRGGB8: return dimensions.width % 4 == 0 && dimensions.height % 4 == 0 ? half : nil
        default: return nil
        }
    }

    /// The level the photo is made at.
    public var level: PhotoQualityPrioritization
    /// How many frames it takes.
    public var frames: Int
    /// The photo's size: the format's own, or binned to half of it.
    public var dimensions: Dimensions
    /// What the photo is delivered as.
    public var output: PhotoOutputType
    /// Why the level or the output differs from the one requested; empty when neither does.
    public var note: String

    /// The plan for a request of `requested` delivered as `output` on a camera streaming `format`.
    /// `maxDimensions` is a request, not a guarantee (0×0: the format's size): the photo is made at the
    /// largest supported size within it, or, when none fits, at the smallest, and the note says so.
    public init(
        requested: PhotoQualityPrioritization, output requestedOutput: PhotoOutputType = .frame, maxDimensions: Dimensions = Dimensions(width: 0, height: 0),
        format: DeviceFormat?, output settings: PhotoOutputSettings = PhotoOutputSettings()
    ) {
        var notes: [String] = []
        var maxDimensions = maxDimensions
        let limit = settings.maxPhotoDimensions
        if limit.width > 0 || limit.height > 0 {
            let width = maxDimensions.width == 0 ? limit.width : (limit.width == 0 ? maxDimensions.width : min(maxDimensions.width, limit.width))
            let height = maxDimensions.height == 0 ? limit.height : (limit.height == 0 ? maxDimensions.height : min(maxDimensions.height, limit.height))
            maxDimensions = Dimensions(width: width, height: height)
        }
        dimensions = format?.dimensions ?? maxDimensions
        if let format, maxDimensions.width > 0 || maxDimensions.height > 0 {
            func fits(_ size: Dimensions) -> Bool {
                (maxDimensions.width == 0 || size.width <= maxDimensions.width) && (maxDimensions.height == 0 || size.height <= maxDimensions.height)
            }
            let sizes = format.supportedPhotoDimensions.sorted { $0.pixelCount < $1.pixelCount }
            if let largest = sizes.last(where: fits) {
                dimensions = largest
            } else if let smallest = sizes.first {
                dimensions = smallest
                let list = sizes.map(\.description).joined(separator: ", ")
                notes.append("no photo size of \(format.id) fits within \(maxDimensions); made at the smallest it supports, \(smallest) (supported: \(list))")
            }
        }
        level = requested
        if requested > settings.maxQualityPrioritization {
            level = settings.maxQualityPrioritization
            notes.append("the photo output allows at most \(settings.maxQualityPrioritization); made as \(level)")
        }
        if level == .quality, let format, format.pixelFormat.isCompressed {
            level = .balanced
            notes.append("quality needs an uncompressed format to merge frames; \(format.pixelFormat) frames were taken as balanced")
        }
        output = requestedOutput
        if let format {
            let (resolved, why) = requestedOutput.resolved(for: format)
            output = resolved
            if let why { notes.append(why) }
        }
        frames = level == .quality ? PhotoPlan.qualityFrames : 1
        note = notes.joined(separator: "; ")
    }
}

extension PhotoPlan {
    /// Fast capture prioritization: a quality photo requested `nanoseconds` after the previous one, within
    /// a quality capture stage, is made as balanced.
    public mutating func stepDown(since nanoseconds: Int64) {
        guard level == .quality else { return }
        level = .balanced
        frames = 1
        let why = String(format: "fast capture prioritization: requested %.0f ms after the previous photo, within a quality capture stage; made as balanced", Double(nanoseconds) / 1e6)
        note = note.isEmpty ? why : note + "; " + why
    }
}

extension PhotoPlan {
    /// An exposure bracket of `count` images: each a single frame, so quality is made as balanced.
    public mutating func bracket(count: Int) {
        guard level == .quality else { return }
        level = .balanced
        frames = 1
        let why = "an exposure bracket takes one frame per bias; made as balanced"
        note = note.isEmpty ? why : note + "; " + why
    }
}
