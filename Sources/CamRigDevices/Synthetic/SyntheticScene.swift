import CImageKernels
import CamRigDeviceModel
import Foundation
import NIOCore

/// The one scene every synthetic camera looks at, moving in real time.
///
/// A tiled wall with a fine checker texture, and in front of it a spinning disc and a sliding square,
/// both moving with the true time of the frame's exposure; a time code of that instant burned in at
/// the top left. Each camera sees it from its own viewpoint (derived from its unique id): the near
/// objects shift more between viewpoints than the wall behind them. Frames of cameras exposed at the
/// same instant therefore show the objects at the same place in their motion and the same time code.
///
/// Scene coordinates are in image heights, origin at the image centre, y downwards, so the scene looks
/// the same at every resolution.
public struct SyntheticScene: Hashable, Sendable {
    /// Rows at the top of a raw frame that carry data about the frame, not the scene: the frame header in
    /// row 0 and the sequence bar code in rows 8–15, like a sensor's embedded data lines. Noise and photo
    /// processing leave them alone.
    public static let embeddedDataRows = 16

    /// Where the camera stands, from −1 (left) to 1 (right).
    public let viewpoint: Double

    /// The scene as the camera with `seed` sees it (cameras of a rig have different seeds).
    public init(seed: UInt64) {
        var random = SeededRandom(seed: seed ^ 0x5CE4_E5CE_4E5C_E4E5)
        viewpoint = Double(random.next() % 2001) / 1000 - 1
    }

    public init(viewpoint: Double) {
        self.viewpoint = viewpoint
    }

    /// A colour as luma and chroma (BT.601, 8-bit, full range).
    public struct Colour: Hashable, Sendable {
        public var y: Double
        public var u: Double
        public var v: Double
    }

    /// Where the moving objects are at one instant.
    struct Objects {
        var discX: Double
        var discY: Double
        var discRadius: Double
        var discAngle: Double
        var squareX: Double
        var squareY: Double
        var squareHalf: Double
    }

    /// The wall, seen from this viewpoint: tiles of different levels and tints with a checker texture.
    func wall(_ x: Double, _ y: Double) -> Colour {
        let wx = x + viewpoint * 0.05
        let tile = 0.125
        let hash = Self.mix(Int((wx / tile).rounded(.down)), Int((y / tile).rounded(.down)))
        let base = 50 + Double(hash % 150)
        let checker = (Int((wx * 48).rounded(.down)) + Int((y * 48).rounded(.down))) & 1 == 0 ? 14.0 : -14.0
        return Colour(y: base + checker, u: Double(108 + (hash >> 8) % 40), v: Double(108 + (hash >> 16) % 40))
    }

    /// The objects at `seconds` of true time: the disc swings left and right every 4 s and spins every
    /// 2 s; the square slides the other way every 3 s.
    func objects(at seconds: Double) -> Objects {
        let near = -viewpoint * 0.15
        return Objects(
            discX: 0.5 * sin(2 * .pi * seconds / 4) + near,
            discY: -0.1,
            discRadius: 0.11,
            discAngle: 2 * .pi * (seconds / 2).truncatingRemainder(dividingBy: 1),
            squareX: -0.45 * sin(2 * .pi * seconds / 3) + near,
            squareY: 0.24,
            squareHalf: 0.09
        )
    }

    /// The objects' colour at (x, y), `nil` where neither is.
    func object(_ x: Double, _ y: Double, _ objects: Objects) -> Colour? {
        let dx = x - objects.discX
        let dy = y - objects.discY
        if dx * dx + dy * dy <= objects.discRadius * objects.discRadius {
            // Eight sectors, alternately bright orange and a darker orange, turning.
            var angle = atan2(dy, dx) + objects.discAngle
            angle = angle.truncatingRemainder(dividingBy: 2 * .pi)
            if angle < 0 { angle += 2 * .pi }
            return Int(angle / (.pi / 4)) % 2 == 0 ? Colour(y: 225, u: 90, v: 170) : Colour(y: 150, u: 100, v: 160)
        }
        let sx = abs(x - objects.squareX)
        let sy = abs(y - objects.squareY)
        if sx <= objects.squareHalf && sy <= objects.squareHalf {
            let border = max(sx, sy) > objects.squareHalf * 0.75
            return border ? Colour(y: 200, u: 170, v: 110) : Colour(y: 40, u: 128, v: 128)
        }
        return nil
    }

    /// The scene's colour at (x, y) at `seconds`, without the time code.
    public func colour(x: Double, y: Double, seconds: Double) -> Colour {
        object(x, y, objects(at: seconds)) ?? wall(x, y)
    }

    static func mix(_ i: Int, _ j: Int) -> Int {
        var h = UInt64(bitPattern: Int64(i)) &* 0x9E37_79B9_7F4A_7C15 ^ UInt64(bitPattern: Int64(j)) &* 0xC2B2_AE3D_27D4_EB4F
        h ^= h >> 29
        h = h &* 0xBF58_476D_1CE4_E5B9
        h ^= h >> 32
        return Int(h & 0x7FFF_FFFF)
    }
}

/// Draws a camera's frames of the scene: a cached rendering of the wall for the active format and
/// look, the objects and the time code drawn over it each frame, then seeded noise.
final class SyntheticSceneRenderer {
    let scene: SyntheticScene
    private var cacheKey: CacheKey?
    private var wall: [UInt8] = []
    private var wallBlocks: [UInt8] = []
    /// The noise table of the last standard deviation asked for (it changes only with the settings).
    private var noise: (sigma: Double, table: [Int16]) = (0, [])

    struct CacheKey: Hashable {
        var format: DeviceFormat
        var gain: Double
        var offset: Double
        var contrast: Double
        var tintU: UInt8
        var tintV: UInt8
    }

    init(scene: SyntheticScene) {
        self.scene = scene
    }

    /// One frame in `format` of the scene at `trueTime` (`CLOCK_MONOTONIC` nanoseconds, the instant its
    /// exposure started), lit as `look` says, with normal noise of `noiseSigma` levels (0: none) drawn
    /// from `noiseSeed`.
    func render(
        format: DeviceFormat, header: SyntheticFrameHeader, trueTime: Int64, look: SyntheticPattern.Look, noiseSigma: Double, noiseSeed: inout UInt64
    ) -> ByteBuffer {
        let key = CacheKey(format: format, gain: look.gain, offset: look.offset, contrast: look.contrast, tintU: look.chroma.0, tintV: look.chroma.1)
        if key != cacheKey {
            renderWall(key)
            cacheKey = key
        }
        let seconds = Double(trueTime) / 1e9
        let width = Int(format.dimensions.width)
        let height = Int(format.dimensions.height)
        var out = ByteBufferAllocator().buffer(capacity: Int(format.imageSize) + 1024)
        var comment = ByteBufferAllocator().buffer(capacity: SyntheticFrameHeader.size)
        header.write(into: &comment)

        if format.pixelFormat.isCompressed {
            let columns = width / 8
            let rows = height / 8
            var blocks = wallBlocks
            let objects = scene.objects(at: seconds)
            let raster = Raster(width: width, height: height)
            for row in 0..<rows {
                for column in 0..<columns {
                    if row == 1 {
                        blocks[row * columns + column] = SyntheticPattern.bandLevel(column: column, columns: columns, sequence: header.sequence)
                        continue
                    }
                    let (x, y) = raster.scene(x: Double(column * 8 + 4), y: Double(row * 8 + 4))
                    if let colour = scene.object(x, y, objects) {
                        blocks[row * columns + column] = Self.lit(colour, key).y
                    }
                }
            }
            drawTimeCode(seconds: seconds, width: columns, height: rows) { x, y, on in
                blocks[y * columns + x] = on ? 235 : 16
            }
            BaselineJPEG.encode(width: columns * 8, height: rows * 8, blocks: blocks, comment: comment, into: &out)
            return out
        }

        out.writeBytes(wall)
        let bytesPerLine = Int(format.bytesPerLine)
        out.withUnsafeMutableReadableBytes { raw in
            let pixels = raw.bindMemory(to: UInt8.self)
            let packer = Packer(format: format)
            // The objects, within their bounding boxes only.
            let objects = scene.objects(at: seconds)
            let raster = Raster(width: width, height: height)
            for (centreX, centreY, half) in [(objects.discX, objects.discY, objects.discRadius), (objects.squareX, objects.squareY, objects.squareHalf)] {
                guard let box = raster.pixels(around: centreX, centreY, half: half, top: SyntheticScene.embeddedDataRows) else { continue }
                for py in box.rows {
                    for px in box.columns {
                        let (x, y) = raster.scene(x: Double(px) + 0.5, y: Double(py) + 0.5)
                        if let colour = scene.object(x, y, objects) {
                            packer.put(Self.lit(colour, key), x: px, y: py, into: pixels)
                        }
                    }
                }
            }
            let white = Self.lit(SyntheticScene.Colour(y: 235, u: 128, v: 128), nil)
            let black = Self.lit(SyntheticScene.Colour(y: 16, u: 128, v: 128), nil)
            let cell = max(1, height / 240)
            drawTimeCode(seconds: seconds, width: width / cell, height: height / cell) { x, y, on in
                for dy in 0..<cell {
                    for dx in 0..<cell {
                        packer.put(on ? white : black, x: x * cell + dx, y: y * cell + dy, into: pixels)
                    }
                }
            }
            if noiseSigma > 0 {
                if noise.sigma != noiseSigma { noise = (noiseSigma, Self.noiseTable(sigma: noiseSigma)) }
                let start = SyntheticScene.embeddedDataRows * bytesPerLine
                guard start < pixels.count else { return }
                noise.table.withUnsafeBufferPointer { table in
                    camrig_add_noise(pixels.baseAddress! + start, pixels.count - start, table.baseAddress!, &noiseSeed)
                }
            }
        }
        // The frame's own rows: the sequence bar code in rows 8–15, the header at the start of row 0.
        var band = [UInt8](repeating: 0, count: bytesPerLine)
        Packer(format: format).bandRow(sequence: header.sequence, width: width, into: &band)
        for row in 8..<min(16, height) {
            out.setBytes(band, at: out.readerIndex + row * bytesPerLine)
        }
        out.setBuffer(comment, at: out.readerIndex)
        return out
    }

    /// A colour as the look shows it.
    static func lit(_ colour: SyntheticScene.Colour, _ key: CacheKey?) -> (y: UInt8, u: UInt8, v: UInt8) {
        guard let key else { return (UInt8(clamping: Int(colour.y)), UInt8(clamping: Int(colour.u)), UInt8(clamping: Int(colour.v))) }
        let y = (128 + (colour.y - 128) * key.contrast) * key.gain + key.offset
        return (
            UInt8(clamping: Int(y.rounded())),
            UInt8(clamping: Int((colour.u + Double(key.tintU) - 128).rounded())),
            UInt8(clamping: Int((colour.v + Double(key.tintV) - 128).rounded()))
        )
    }

    /// Draws the wall for a format and look once; frames start as a copy of it.
    private func renderWall(_ key: CacheKey) {
        let format = key.format
        let width = Int(format.dimensions.width)
        let height = Int(format.dimensions.height)
        if format.pixelFormat.isCompressed {
            let columns = width / 8
            let rows = height / 8
            wallBlocks = [UInt8](repeating: 0, count: columns * rows)
            let raster = Raster(width: width, height: height)
            for row in 0..<rows {
                for column in 0..<columns {
                    let (x, y) = raster.scene(x: Double(column * 8 + 4), y: Double(row * 8 + 4))
                    wallBlocks[row * columns + column] = Self.lit(scene.wall(x, y), key).y
                }
            }
            return
        }
        wall = [UInt8](repeating: 0, count: Int(format.imageSize))
        let packer = Packer(format: format)
        let raster = Raster(width: width, height: height)
        wall.withUnsafeMutableBufferPointer { pixels in
            for py in 0..<height {
                for px in 0..<width {
                    let (x, y) = raster.scene(x: Double(px) + 0.5, y: Double(py) + 0.5)
                    packer.put(Self.lit(scene.wall(x, y), key), x: px, y: py, into: pixels)
                }
            }
        }
    }

    /// The time code "SSSS.mmm" (true seconds modulo 10 000) as seven-segment digits in a black box at
    /// the top left, on a grid of `width` × `height` cells; `plot` sets one cell on or off.
    func drawTimeCode(seconds: Double, width: Int, height: Int, plot: (Int, Int, Bool) -> Void) {
        let milliseconds = Int64((seconds * 1000).rounded(.down))
        let whole = (milliseconds / 1000) % 10_000
        let text = String(format: "%04lld.%03lld", whole, milliseconds % 1000)
        // Each digit is 7 × 11 cells plus a 2-cell gap; the box has a 2-cell margin.
        let digitWidth = 7
        let digitHeight = 11
        let originX = 4
        let originY = max(SyntheticScene.embeddedDataRows, height / 30) + 2
        let boxWidth = text.count * (digitWidth + 2) + 2
        guard originX + boxWidth + 2 < width, originY + digitHeight + 4 < height else { return }
        for y in (originY - 2)..<(originY + digitHeight + 2) {
            for x in (originX - 2)..<(originX + boxWidth) { plot(x, y, false) }
        }
        for (index, character) in text.enumerated() {
            let left = originX + index * (digitWidth + 2)
            if character == "." {
                plot(left + 3, originY + digitHeight - 1, true)
                continue
            }
            let segments = Self.segments[Int(character.asciiValue! - 48)]
            for y in 0..<digitHeight {
                for x in 0..<digitWidth where Self.segmentLit(segments, x: x, y: y, width: digitWidth, height: digitHeight) {
                    plot(left + x, originY + y, true)
                }
            }
        }
    }

    /// Segments a–g of each digit, as bits 0–6.
    static let segments: [UInt8] = [0x3F, 0x06, 0x5B, 0x4F, 0x66, 0x6D, 0x7D, 0x07, 0x7F, 0x6F]

    static func segmentLit(_ segments: UInt8, x: Int, y: Int, width: Int, height: Int) -> Bool {
        let middle = height / 2
        let top = y == 0
        let centre = y == middle
        let bottom = y == height - 1
        let left = x == 0
        let right = x == width - 1
        let upper = y > 0 && y < middle
        let lower = y > middle && y < height - 1
        func on(_ bit: Int) -> Bool { segments & (1 << bit) != 0 }
        return (top && on(0)) || (right && upper && on(1)) || (right && lower && on(2)) || (bottom && on(3))
            || (left && lower && on(4)) || (left && upper && on(5)) || (centre && on(6))
    }

    /// Quantiles of a normal distribution of standard deviation `sigma`, rounded: a random byte picks one.
    static func noiseTable(sigma: Double) -> [Int16] {
        (0..<256).map { index in
            let p = (Double(index) + 0.5) / 256
            // Inverse of the normal distribution function by bisection on erf.
            var low = -6.0
            var high = 6.0
            for _ in 0..<40 {
                let middle = (low + high) / 2
                if 0.5 * (1 + erf(middle / 2.0.squareRoot())) < p { low = middle } else { high = middle }
            }
            return Int16(clamping: Int(((low + high) / 2 * sigma).rounded()))
        }
    }
}

/// Between an image's pixel positions and scene coordinates (image heights from the image's centre).
struct Raster {
    let width: Int
    let height: Int

    /// The scene coordinates of a point given in pixels (a pixel's centre is at +0.5).
    func scene(x: Double, y: Double) -> (Double, Double) {
        ((x - Double(width) / 2) / Double(height), (y - Double(height) / 2) / Double(height))
    }

    /// The pixel columns and rows covering a square of half-size `half` around a scene point, clipped
    /// to the image and below its first `top` rows; `nil` when nothing of it is in the image.
    func pixels(around x: Double, _ y: Double, half: Double, top: Int) -> (columns: ClosedRange<Int>, rows: ClosedRange<Int>)? {
        let scale = Double(height)
        let left = max(0, Int(((x - half) * scale + Double(width) / 2).rounded(.down)))
        let right = min(width - 1, Int(((x + half) * scale + Double(width) / 2).rounded(.up)))
        let upper = max(top, Int(((y - half) * scale + Double(height) / 2).rounded(.down)))
        let lower = min(height - 1, Int(((y + half) * scale + Double(height) / 2).rounded(.up)))
        guard left <= right, upper <= lower else { return nil }
        return (left...right, upper...lower)
    }
}

/// Writes pixels in a raw format's layout.
struct Packer {
    let pixelFormat: PixelFormat
    let bytesPerLine: Int

    init(format: DeviceFormat) {
        pixelFormat = format.pixelFormat
        bytesPerLine = Int(format.bytesPerLine)
    }

    func put(_ colour: (y: UInt8, u: UInt8, v: UInt8), x: Int, y: Int, into pixels: UnsafeMutableBufferPointer<UInt8>) {
        let line = y * bytesPerLine
        switch pixelFormat {
        case .yuyv:
            pixels[line + 2 * x] = colour.y
            pixels[line + 2 * x + 1] = x & 1 == 0 ? colour.u : colour.v
        case .rgb24:
            let (r, g, b) = Self.rgb(colour)
            pixels[line + 3 * x] = r
            pixels[line + 3 * x + 1] = g
            pixels[line + 3 * x + 2] = b
        case .bayerRGGB8:
            let (r, g, b) = Self.rgb(colour)
            pixels[line + x] = y & 1 == 0 ? (x & 1 == 0 ? r : g) : (x & 1 == 0 ? g : b)
        default:
            pixels[line + x] = colour.y
        }
    }

    /// BT.601 full-range YUV to RGB.
    static func rgb(_ colour: (y: UInt8, u: UInt8, v: UInt8)) -> (UInt8, UInt8, UInt8) {
        let y = Double(colour.y)
        let u = Double(colour.u) - 128
        let v = Double(colour.v) - 128
        return (
            UInt8(clamping: Int((y + 1.402 * v).rounded())),
            UInt8(clamping: Int((y - 0.344 * u - 0.714 * v).rounded())),
            UInt8(clamping: Int((y + 1.772 * u).rounded()))
        )
    }

    /// One row of the sequence bar code: 64 blocks, black or white.
    func bandRow(sequence: UInt64, width: Int, into row: inout [UInt8]) {
        row.withUnsafeMutableBufferPointer { pixels in
            for x in 0..<width {
                let level = SyntheticPattern.bandLevel(column: x * 64 / width, columns: 64, sequence: sequence)
                put((level, 128, 128), x: x, y: 0, into: pixels)
            }
        }
    }
}
