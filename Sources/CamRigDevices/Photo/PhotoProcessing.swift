import CImageKernels
import Foundation
import NIOCore

/// How a photo trades speed against quality (AVFoundation's `photoQualityPrioritization`).
public enum PhotoQualityPrioritization: Int, Comparable, CaseIterable, Sendable, CustomStringConvertible {
    /// The frame exposed nearest the requested instant, from the frames the camera already streams
    /// (zero shutter lag): it may have started exposing just before that instant. No processing.
    case speed = 1
    /// The first frame exposed from the requested instant on, unprocessed.
    case balanced = 2
    /// `PhotoProcessing.qualityFrames` frames exposed from the requested instant on, merged into one with
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

    public init?(name: String) {
        guard let level = Self.allCases.first(where: { $0.description == name }) else { return nil }
        self = level
    }
}

/// How a photo is made on a device in a format: which frames it takes and what it does with them.
public struct PhotoPlan: Hashable, Sendable {
    /// The level the photo is made at.
    public var level: PhotoQualityPrioritization
    /// How many frames it takes.
    public var frames: Int
    /// What the photo is delivered as.
    public var output: PhotoOutputType
    /// Why the level or the output differs from the one requested; empty when neither does.
    public var note: String

    /// The plan for a request of `requested` delivered as `output` on a camera streaming `format`.
    public init(requested: PhotoQualityPrioritization, output requestedOutput: PhotoOutputType = .frame, format: DeviceFormat?) {
        var notes: [String] = []
        level = requested
        if requested == .quality, let format, format.pixelFormat.isCompressed {
            level = .balanced
            notes.append("quality needs an uncompressed format to merge frames; \(format.pixelFormat) frames were taken as balanced")
        }
        output = requestedOutput
        if let format {
            let (resolved, why) = requestedOutput.resolved(for: format)
            output = resolved
            if let why { notes.append(why) }
        }
        frames = level == .quality ? PhotoProcessing.qualityFrames : 1
        note = notes.joined(separator: "; ")
    }
}

/// The processing stage of a photo.
public enum PhotoProcessing {
    /// Frames a quality photo merges. Eight frames take a quarter of a second at 30 fps and cut the noise
    /// of still parts of the picture by √8 (9 dB).
    public static let qualityFrames = 8

    /// The result of merging frames.
    public struct Merged: Sendable {
        public var frame: CapturedFrame
        /// How many frames went into it.
        public var frames: Int
        /// The noise estimated from the frames' differences, in levels (standard deviation of one frame).
        public var noiseSigma: Double
        /// The share of image bytes that took more than the reference frame's value.
        public var mergedShare: Double
    }

    /// Merges frames of one camera into the first: each image byte becomes the mean of the first frame's
    /// value and every other frame's value within three noise deviations of it, so still parts lose
    /// their noise and moving parts keep the first frame's picture instead of smearing. Embedded data rows
    /// are the first frame's. Frames whose format differs from the first are left out.
    public static func merge(_ frames: [CapturedFrame]) -> Merged {
        guard let reference = frames.first else { preconditionFailure("merge needs a frame") }
        let size = reference.bytes.readableBytes
        let usable = frames.filter { $0.format == reference.format && $0.bytes.readableBytes == size }
        let skip = min(size, reference.embeddedDataRows * Int(reference.format.bytesPerLine))
        guard usable.count > 1, !reference.format.pixelFormat.isCompressed, size > skip else {
            return Merged(frame: reference, frames: 1, noiseSigma: 0, mergedShare: 0)
        }
        let sigma = noise(reference.bytes, usable[1].bytes, from: skip)
        let threshold = max(3, Int((3 * sigma).rounded()))
        var out = ByteBufferAllocator().buffer(capacity: size)
        out.writeBytes(reference.bytes.readableBytesView.prefix(skip))
        var merged = 0
        let buffers = usable.map(\.bytes)
        out.writeWithUnsafeMutableBytes(minimumWritableBytes: size - skip) { target in
            withPointers(buffers) { pointers in
                let starts = pointers.map { $0 + skip }
                starts.withUnsafeBufferPointer { starts in
                    merged = camrig_merge_frames(
                        target.baseAddress!.assumingMemoryBound(to: UInt8.self),
                        UnsafePointer(OpaquePointer(starts.baseAddress!)), starts.count, size - skip, Int32(threshold))
                }
            }
            return size - skip
        }
        var frame = reference
        frame.bytes = out
        return Merged(frame: frame, frames: usable.count, noiseSigma: sigma, mergedShare: Double(merged) / Double(size - skip))
    }

    /// The noise of one frame estimated from two frames of a still scene: the median absolute difference
    /// of a sample of their bytes, scaled to the standard deviation of a normal distribution.
    public static func noise(_ a: ByteBuffer, _ b: ByteBuffer, from offset: Int) -> Double {
        let count = min(a.readableBytes, b.readableBytes)
        guard count > offset else { return 0 }
        var differences: [Int] = []
        differences.reserveCapacity((count - offset) / 61 + 1)
        a.withUnsafeReadableBytes { a in
            b.withUnsafeReadableBytes { b in
                for index in stride(from: offset, to: count, by: 61) {
                    differences.append(abs(Int(a[index]) - Int(b[index])))
                }
            }
        }
        differences.sort()
        // For two frames with independent normal noise of deviation σ, |a − b| has median 0.6745 × √2 σ.
        return Double(differences[differences.count / 2]) / (0.6745 * 2.0.squareRoot())
    }

    /// Peak signal-to-noise ratio in dB of `image` against `truth`, over every `stride`-th byte from
    /// `offset` (stride 2 from 0 is the luma of YUYV); infinite when they are equal.
    public static func psnr(_ image: ByteBuffer, against truth: ByteBuffer, from offset: Int = 0, stride: Int = 1) -> Double {
        let count = min(image.readableBytes, truth.readableBytes)
        guard count > offset else { return .nan }
        let squared = image.withUnsafeReadableBytes { a in
            truth.withUnsafeReadableBytes { b in
                camrig_squared_error(
                    a.baseAddress!.assumingMemoryBound(to: UInt8.self) + offset, b.baseAddress!.assumingMemoryBound(to: UInt8.self) + offset,
                    count - offset, stride)
            }
        }
        let samples = Double((count - offset + stride - 1) / stride)
        let meanSquared = squared / samples
        return meanSquared == 0 ? .infinity : 10 * log10(255 * 255 / meanSquared)
    }

    /// Calls `body` with the base address of each buffer's readable bytes.
    private static func withPointers<Result>(_ buffers: [ByteBuffer], _ body: ([UnsafePointer<UInt8>]) -> Result) -> Result {
        func nest(_ index: Int, _ collected: [UnsafePointer<UInt8>]) -> Result {
            guard index < buffers.count else { return body(collected) }
            return buffers[index].withUnsafeReadableBytes { raw in
                nest(index + 1, collected + [raw.baseAddress!.assumingMemoryBound(to: UInt8.self)])
            }
        }
        return nest(0, [])
    }
}
