import CImageKernels
import CamRigDeviceModel
import Foundation
import NIOCore

/// The processing stage of a photo.
public enum PhotoProcessing {
    /// `frame` binned 2×2: each output sample the mean of the four input samples of the same colour (for
    /// RGGB, the four of its colour in the 4×4 cell around it), so the picture keeps its field of view
    /// at half the size with half the noise. The first bytes of the embedded data rows (the synthetic
    /// camera's header) are kept as they were. `nil` when the format cannot be binned.
    public static func bin(_ frame: CapturedFrame) -> CapturedFrame? {
        let format = frame.format
        guard let half = PhotoPlan.binnedDimensions(format.pixelFormat, format.dimensions) else { return nil }
        let width = Int(half.width)
        let height = Int(half.height)
        let inPitch = Int(format.bytesPerLine)
        guard inPitch > 0, inPitch * Int(format.dimensions.height) <= frame.bytes.readableBytes,
            inPitch >= Int(format.dimensions.width) * (format.pixelFormat == .yuyv ? 2 : format.pixelFormat == .rgb24 ? 3 : 1)
        else { return nil }
        var binned = DeviceFormat(pixelFormat: format.pixelFormat, dimensions: half, frameRateRanges: format.frameRateRanges, supportedPhotoDimensions: [half])
        binned.maxZoomFactor = format.maxZoomFactor
        let outPitch = Int(binned.bytesPerLine)
        var out = ByteBufferAllocator().buffer(capacity: outPitch * height)
        out.writeWithUnsafeMutableBytes(minimumWritableBytes: outPitch * height) { target in
            frame.bytes.withUnsafeReadableBytes { source in
                func mean(_ a: Int, _ b: Int, _ c: Int, _ d: Int) -> UInt8 {
                    UInt8((Int(source[a]) + Int(source[b]) + Int(source[c]) + Int(source[d]) + 2) / 4)
                }
                for row in 0..<height {
                    let top = 2 * row * inPitch
                    let below = top + inPitch
                    let line = row * outPitch
                    switch format.pixelFormat {
                    case .yuyv:
                        // Output pair k (pixels 2k, 2k+1) from input pairs 2k and 2k+1 of two rows.
                        for pair in 0..<(width / 2) {
                            let a = 8 * pair
                            target[line + 4 * pair] = mean(top + a, top + a + 2, below + a, below + a + 2)
                            target[line + 4 * pair + 2] = mean(top + a + 4, top + a + 6, below + a + 4, below + a + 6)
                            target[line + 4 * pair + 1] = mean(top + a + 1, top + a + 5, below + a + 1, below + a + 5)
                            target[line + 4 * pair + 3] = mean(top + a + 3, top + a + 7, below + a + 3, below + a + 7)
                        }
                    case .rgb24:
                        for x in 0..<width {
                            for channel in 0..<3 {
                                let a = 6 * x + channel
                                target[line + 3 * x + channel] = mean(top + a, top + a + 3, below + a, below + a + 3)
                            }
                        }
                    case .bayerRGGB8:
                        // Output (x, y) has the colour of (x mod 2, y mod 2); its four input samples of that
                        // colour sit two apart in the 4×4 cell of output cell (x / 2, y / 2).
                        let cellTop = 4 * (row / 2) + row % 2
                        for x in 0..<width {
                            let column = 4 * (x / 2) + x % 2
                            let first = cellTop * inPitch + column
                            let second = (cellTop + 2) * inPitch + column
                            target[line + x] = mean(first, first + 2, second, second + 2)
                        }
                    default:
                        for x in 0..<width {
                            target[line + x] = mean(top + 2 * x, top + 2 * x + 1, below + 2 * x, below + 2 * x + 1)
                        }
                    }
                }
                // The frame's own first bytes (a header in its embedded data), unchanged.
                let kept = min(frame.embeddedDataRows / 2 * outPitch, outPitch * height, source.count)
                for index in 0..<kept { target[index] = source[index] }
            }
            return outPitch * height
        }
        var result = frame
        result.format = binned
        result.bytes = out
        result.embeddedDataRows = frame.embeddedDataRows / 2
        return result
    }

    /// Frames a quality photo merges. Eight frames take a quarter of a second at 30 fps and cut the noise

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

    /// Merges frames of one camera into the first: each tile of the picture is first aligned (the motion
    /// of its content from the first frame to each other frame is found by block matching, coarse to
    /// fine), then each image byte becomes the mean of the first frame's value and every other frame's
    /// value, taken where the tile moved to, within three noise deviations of it, so still and moving
    /// parts lose their noise, and what alignment cannot follow (a turning disc) keeps the first
    /// frame's picture instead of smearing. Embedded data rows
    /// are the first frame's. Frames whose format differs from the first are left out.
    public static func merge(_ frames: [CapturedFrame]) -> Merged {
        guard let reference = frames.first else { preconditionFailure("merge needs a frame") }
        let size = reference.bytes.readableBytes
        let usable = frames.filter { $0.format == reference.format && $0.bytes.readableBytes == size }
        let skip = min(size, reference.embeddedDataRows * Int(reference.format.bytesPerLine))
        guard usable.count > 1, !reference.format.pixelFormat.isCompressed, size > skip else {
            return Merged(frame: reference, frames: 1, noiseSigma: 0, mergedShare: 0)
        }
        var sigma = 0.0
        let format = reference.format
        let pitch = Int(format.bytesPerLine)
        let cell = alignmentCell(format.pixelFormat)
        let rowBytes = min(pitch, Int(format.dimensions.width) * cell.bytes / cell.pixels)
        // A layout the bytes cannot hold (no row length known, or rows beyond the buffer) is not merged.
        guard pitch > 0, rowBytes > 0, pitch * Int(format.dimensions.height) <= size else {
            return Merged(frame: reference, frames: 1, noiseSigma: 0, mergedShare: 0)
        }
        let rows = (size - skip) / pitch / cell.rows * cell.rows
        var out = ByteBufferAllocator().buffer(capacity: size)
        out.writeBytes(reference.bytes.readableBytesView.prefix(skip))
        var merged = 0
        let buffers = usable.map(\.bytes)
        out.writeWithUnsafeMutableBytes(minimumWritableBytes: size - skip) { target in
            // Bytes past the aligned rows (a partial cell row, row padding) stay the reference's.
            reference.bytes.withUnsafeReadableBytes { source in
                target.baseAddress!.copyMemory(from: source.baseAddress! + skip, byteCount: size - skip)
            }
            withPointers(buffers) { pointers in
                let starts = pointers.map { $0 + skip }
                starts.withUnsafeBufferPointer { starts in
                    merged = camrig_align_merge(
                        target.baseAddress!.assumingMemoryBound(to: UInt8.self),
                        UnsafePointer(OpaquePointer(starts.baseAddress!)), starts.count, pitch, rowBytes, rows,
                        cell.bytes, cell.rows, alignmentTile, Int32(alignmentSearch), 3, &sigma)
                }
            }
            return size - skip
        }
        var frame = reference
        frame.bytes = out
        return Merged(frame: frame, frames: usable.count, noiseSigma: sigma, mergedShare: Double(merged) / Double(size - skip))
    }

    /// A 4:2:0 planar frame (NV12, YU12) packed as YUYV, which binning, merging and JPEG encoding take (each
    /// chroma sample shared by two rows, nothing lost); other frames as they are, and `nil` for a planar
    /// frame too short for its format.
    public static func packed(_ frame: CapturedFrame) -> CapturedFrame? {
        let format = frame.format
        guard format.pixelFormat.isPlanarYUV420 else { return frame }
        let width = Int(format.dimensions.width)
        let height = Int(format.dimensions.height)
        let lumaPitch = Int(format.bytesPerLine)
        let chromaPitch = format.pixelFormat == .nv12 ? lumaPitch : lumaPitch / 2
        let chromaRows = (height + 1) / 2
        let needed = lumaPitch * height + chromaPitch * chromaRows * (format.pixelFormat == .nv12 ? 1 : 2)
        guard width >= 2, width % 2 == 0, lumaPitch >= width, frame.bytes.readableBytes >= needed else { return nil }
        var packedFormat = DeviceFormat(
            pixelFormat: .yuyv, dimensions: format.dimensions, frameRateRanges: format.frameRateRanges,
            supportedPhotoDimensions: format.supportedPhotoDimensions)
        packedFormat.maxZoomFactor = format.maxZoomFactor
        let outPitch = Int(packedFormat.bytesPerLine)
        var out = ByteBufferAllocator().buffer(capacity: outPitch * height)
        out.writeWithUnsafeMutableBytes(minimumWritableBytes: outPitch * height) { target in
            frame.bytes.withUnsafeReadableBytes { source in
                let base = source.baseAddress!.assumingMemoryBound(to: UInt8.self)
                let chroma = base + lumaPitch * height
                let nv12 = format.pixelFormat == .nv12
                camrig_yuv420_to_yuyv(
                    base, lumaPitch, chroma, nv12 ? chroma + 1 : chroma + chromaPitch * chromaRows, chromaPitch, nv12 ? 2 : 1,
                    width, height, target.baseAddress!.assumingMemoryBound(to: UInt8.self), outPitch)
            }
            return outPitch * height
        }
        var packedFrame = frame
        packedFrame.format = packedFormat
        packedFrame.bytes = out
        return packedFrame
    }

    /// The tile (in cells) a quality merge aligns as one, and how far (in cells) it looks for its motion.
    static let alignmentTile = 16
    static let alignmentSearch = 32

    /// The cell that repeats across an image of `pixelFormat`: its bytes across, the pixels they hold,
    /// and its rows. Motion is found and applied in whole cells, so colours and chroma stay in place.
    static func alignmentCell(_ pixelFormat: PixelFormat) -> (bytes: Int, pixels: Int, rows: Int) {
        switch pixelFormat {
        case .yuyv: (4, 2, 1)
        case .rgb24: (3, 1, 1)
        case .bayerRGGB8: (2, 2, 2)
        default: (1, 1, 1)
        }
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
