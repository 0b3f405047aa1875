import CamRigDeviceModel

/// One image of a sync set: every camera's photo as a thumbnail in a grid, each under a label (its
/// camera, and whatever the caller adds: its clock offset, the set's skew).
///
/// Thumbnails are made from the photos as delivered: YUYV, RGB, grey and RGGB frames (a Bayer cell
/// becomes one pixel) and JPEG files (decoded with libjpeg-turbo). A photo that cannot be shown (a DNG
/// file, a failed camera) gets a grey tile saying why.
public struct ContactSheet: Sendable {
    /// One camera's tile.
    public struct Tile: Sendable {
        public var label: String
        public var thumbnail: Thumbnail?
        /// Shown instead of a picture when there is none.
        public var placeholder: String

        public init(label: String, thumbnail: Thumbnail?, placeholder: String = "NO PICTURE") {
            self.label = label
            self.thumbnail = thumbnail
            self.placeholder = placeholder
        }
    }

    /// A small RGB picture.
    public struct Thumbnail: Sendable {
        public var width: Int
        public var height: Int
        /// RGB, 3 bytes a pixel, rows packed.
        public var rgb: [UInt8]

        public init(width: Int, height: Int, rgb: [UInt8]) {
            self.width = width
            self.height = height
            self.rgb = rgb
        }
    }

    static let labelHeight = 20
    static let margin = 8

    public var title: String
    public var tiles: [Tile]

    public init(title: String, tiles: [Tile]) {
        self.title = title
        self.tiles = tiles
    }

    /// The width of each camera's picture on a sheet of `count` cameras: 320 pixels up to 16 cameras,
    /// 160 up to 64, 80 beyond (a sheet of 1000 cameras stays about 3000 pixels wide).
    public static func tileWidth(cameras count: Int) -> Int { count <= 16 ? 320 : count <= 64 ? 160 : 80 }

    /// The sheet as RGB pixels, 3 bytes a pixel, rows packed.
    public func render() -> (width: Int, height: Int, rgb: [UInt8]) {
        let tileWidth = tiles.compactMap { $0.thumbnail?.width }.max() ?? Self.tileWidth(cameras: tiles.count)
        let columns = max(1, Int(Double(tiles.count).squareRoot().rounded(.up)))
        let rows = max(1, (tiles.count + columns - 1) / columns)
        let pictureHeight = tiles.compactMap { $0.thumbnail?.height }.max() ?? tileWidth * 3 / 4
        let cellWidth = tileWidth + Self.margin
        let cellHeight = pictureHeight + Self.labelHeight + Self.margin
        let width = max(columns * cellWidth + Self.margin, 6 * title.count + 2 * Self.margin)
        let height = Self.labelHeight + rows * cellHeight + Self.margin
        var canvas = Canvas(width: width, height: height, fill: 24)
        canvas.text(title, x: Self.margin, y: 6, colour: (230, 230, 230))
        for (index, tile) in tiles.enumerated() {
            let x = Self.margin + (index % columns) * cellWidth
            let y = Self.labelHeight + (index / columns) * cellHeight
            canvas.text(tile.label, x: x, y: y + 6, colour: (255, 255, 255), maxWidth: tileWidth)
            let top = y + Self.labelHeight
            if let thumbnail = tile.thumbnail {
                canvas.blit(thumbnail, x: x, y: top)
            } else {
                canvas.fill(x: x, y: top, width: tileWidth, height: pictureHeight, grey: 70)
                canvas.text(tile.placeholder, x: x + 4, y: top + pictureHeight / 2 - 4, colour: (220, 220, 220), maxWidth: tileWidth - 8)
            }
        }
        return (width, height, canvas.rgb)
    }

    /// An RGB picture decoded from a JPEG photo, or nil when it cannot be decoded.
    public typealias JPEGDecoder = (UnsafeRawBufferPointer) -> (width: Int, height: Int, rgb: [UInt8])?

    /// A thumbnail `width` pixels wide of a photo as delivered, or why it cannot be shown. JPEG photos
    /// need `decodeJPEG` (image codecs belong to the sink: `CaptureSink.thumbnail`).
    public static func thumbnail(
        of bytes: UnsafeRawBufferPointer, layout: FrameLayout, width outWidth: Int, decodeJPEG: JPEGDecoder
    ) -> Result<Thumbnail, ThumbnailRefusal> {
        let (pixelFormat, dimensions, bytesPerLine) = (layout.pixelFormat, layout.dimensions, layout.bytesPerLine)
        let width = Int(dimensions.width)
        let height = Int(dimensions.height)
        guard let base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return .failure(.init("EMPTY")) }
        // A function giving the RGB of source pixel (x, y) in a picture of sourceWidth × sourceHeight.
        let sourceWidth: Int
        let sourceHeight: Int
        let pixel: (Int, Int) -> (UInt8, UInt8, UInt8)
        var decoded: [UInt8] = []
        switch pixelFormat {
        case .yuyv where width >= 2 && bytesPerLine >= width * 2 && bytesPerLine * height <= bytes.count:
            (sourceWidth, sourceHeight) = (width, height)
            pixel = { x, y in
                let pair = base + y * bytesPerLine + (x / 2) * 4
                return yuvToRGB(y: Int(pair[x % 2 == 0 ? 0 : 2]), u: Int(pair[1]), v: Int(pair[3]))
            }
        case .nv12, .yuv420:
            // The luma plane, then the chroma: interleaved U, V (NV12) or a U plane and a V plane (YU12).
            let chromaLine = pixelFormat == .nv12 ? bytesPerLine : bytesPerLine / 2
            let chromaRows = (height + 1) / 2
            guard width >= 2, bytesPerLine >= width, bytesPerLine * height + chromaLine * chromaRows * (pixelFormat == .nv12 ? 1 : 2) <= bytes.count
            else { return .failure(.init("\(pixelFormat) FRAME TOO SHORT")) }
            (sourceWidth, sourceHeight) = (width, height)
            let chroma = base + bytesPerLine * height
            let vPlane = chroma + chromaLine * chromaRows
            let interleaved = pixelFormat == .nv12
            pixel = { x, y in
                let luma = Int(base[y * bytesPerLine + x])
                let row = (y / 2) * chromaLine
                if interleaved {
                    return yuvToRGB(y: luma, u: Int(chroma[row + (x / 2) * 2]), v: Int(chroma[row + (x / 2) * 2 + 1]))
                }
                return yuvToRGB(y: luma, u: Int(chroma[row + x / 2]), v: Int(vPlane[row + x / 2]))
            }
        case .rgb24 where bytesPerLine >= width * 3 && bytesPerLine * height <= bytes.count:
            (sourceWidth, sourceHeight) = (width, height)
            pixel = { x, y in
                let p = base + y * bytesPerLine + x * 3
                return (p[0], p[1], p[2])
            }
        case .grey where bytesPerLine >= width && bytesPerLine * height <= bytes.count:
            (sourceWidth, sourceHeight) = (width, height)
            pixel = { x, y in
                let value = base[y * bytesPerLine + x]
                return (value, value, value)
            }
        case .bayerRGGB8 where width >= 2 && height >= 2 && bytesPerLine >= width && bytesPerLine * height <= bytes.count:
            (sourceWidth, sourceHeight) = (width / 2, height / 2)
            pixel = { x, y in
                let top = base + 2 * y * bytesPerLine + 2 * x
                let below = top + bytesPerLine
                return (top[0], UInt8((Int(top[1]) + Int(below[0])) / 2), below[1])
            }
        case .mjpeg, .jpeg:
            guard let picture = decodeJPEG(bytes) else { return .failure(.init("JPEG NOT DECODABLE")) }
            decoded = picture.rgb
            (sourceWidth, sourceHeight) = (picture.width, picture.height)
            pixel = { _, _ in (0, 0, 0) }
        case .dng:
            return .failure(.init("RAW (DNG)"))
        default:
            return .failure(.init("\(pixelFormat) NOT SHOWN"))
        }
        guard sourceWidth > 0, sourceHeight > 0 else { return .failure(.init("EMPTY")) }
        let outHeight = max(1, sourceHeight * outWidth / sourceWidth)
        var rgb = [UInt8](repeating: 0, count: outWidth * outHeight * 3)
        for y in 0..<outHeight {
            let sy = min(sourceHeight - 1, y * sourceHeight / outHeight)
            for x in 0..<outWidth {
                let sx = min(sourceWidth - 1, x * sourceWidth / outWidth)
                let (r, g, b): (UInt8, UInt8, UInt8)
                if decoded.isEmpty {
                    (r, g, b) = pixel(sx, sy)
                } else {
                    let at = (sy * sourceWidth + sx) * 3
                    (r, g, b) = (decoded[at], decoded[at + 1], decoded[at + 2])
                }
                let at = (y * outWidth + x) * 3
                rgb[at] = r
                rgb[at + 1] = g
                rgb[at + 2] = b
            }
        }
        return .success(Thumbnail(width: outWidth, height: outHeight, rgb: rgb))
    }

    /// Why a photo has no thumbnail, as its tile says it.
    public struct ThumbnailRefusal: Error, Sendable {
        public var reason: String
        public init(_ reason: String) { self.reason = reason }
    }

    static func yuvToRGB(y: Int, u: Int, v: Int) -> (UInt8, UInt8, UInt8) {
        let c = y - 16
        let d = u - 128
        let e = v - 128
        func clamp(_ value: Int) -> UInt8 { UInt8(max(0, min(255, value))) }
        return (clamp((298 * c + 409 * e + 128) >> 8), clamp((298 * c - 100 * d - 208 * e + 128) >> 8), clamp((298 * c + 516 * d + 128) >> 8))
    }
}

/// An RGB canvas with just enough drawing for a contact sheet.
struct Canvas {
    let width: Int
    let height: Int
    var rgb: [UInt8]

    init(width: Int, height: Int, fill: UInt8) {
        self.width = width
        self.height = height
        rgb = [UInt8](repeating: fill, count: width * height * 3)
    }

    mutating func set(_ x: Int, _ y: Int, _ colour: (UInt8, UInt8, UInt8)) {
        guard x >= 0, y >= 0, x < width, y < height else { return }
        let at = (y * width + x) * 3
        rgb[at] = colour.0
        rgb[at + 1] = colour.1
        rgb[at + 2] = colour.2
    }

    mutating func fill(x: Int, y: Int, width: Int, height: Int, grey: UInt8) {
        for row in y..<(y + height) { for column in x..<(x + width) { set(column, row, (grey, grey, grey)) } }
    }

    mutating func blit(_ thumbnail: ContactSheet.Thumbnail, x: Int, y: Int) {
        for row in 0..<thumbnail.height {
            for column in 0..<thumbnail.width {
                let at = (row * thumbnail.width + column) * 3
                set(x + column, y + row, (thumbnail.rgb[at], thumbnail.rgb[at + 1], thumbnail.rgb[at + 2]))
            }
        }
    }

    /// Draws `text` in capitals with the 5 × 7 font (6 pixels a character), cut at `maxWidth`.
    mutating func text(_ text: String, x: Int, y: Int, colour: (UInt8, UInt8, UInt8), maxWidth: Int = .max) {
        var left = x
        let limit = maxWidth > Int.max - x ? Int.max : x + maxWidth
        for character in text.uppercased() {
            guard left + 5 <= limit else { break }
            let rows = Font5x7.glyph(character)
            for (row, bits) in rows.enumerated() {
                for column in 0..<5 where bits & (0x10 >> column) != 0 { set(left + column, y + row, colour) }
            }
            left += 6
        }
    }
}

/// A 5 × 7 pixel font: digits, capitals and the punctuation of camera names and figures. Each glyph is
/// seven rows, the top first, of five bits each (the leftmost pixel the highest bit).
enum Font5x7 {
    static func glyph(_ character: Character) -> [UInt8] {
        glyphs[character] ?? glyphs["?"]!
    }

    static let glyphs: [Character: [UInt8]] = [
        " ": [0, 0, 0, 0, 0, 0, 0],
        "0": [0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E], "1": [0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E],
        "2": [0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F], "3": [0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E],
        "4": [0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02], "5": [0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E],
        "6": [0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E], "7": [0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08],
        "8": [0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E], "9": [0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C],
        "A": [0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11], "B": [0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E],
        "C": [0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E], "D": [0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C],
        "E": [0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F], "F": [0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10],
        "G": [0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F], "H": [0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11],
        "I": [0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E], "J": [0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C],
        "K": [0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11], "L": [0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F],
        "M": [0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11], "N": [0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11],
        "O": [0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E], "P": [0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10],
        "Q": [0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D], "R": [0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11],
        "S": [0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E], "T": [0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04],
        "U": [0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E], "V": [0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04],
        "W": [0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A], "X": [0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11],
        "Y": [0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04], "Z": [0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F],
        "/": [0x01, 0x01, 0x02, 0x04, 0x08, 0x10, 0x10], "-": [0, 0, 0, 0x1F, 0, 0, 0],
        "_": [0, 0, 0, 0, 0, 0, 0x1F], ".": [0, 0, 0, 0, 0, 0x0C, 0x0C],
        ":": [0, 0x0C, 0x0C, 0, 0x0C, 0x0C, 0], "+": [0, 0x04, 0x04, 0x1F, 0x04, 0x04, 0],
        "(": [0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02], ")": [0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08],
        ",": [0, 0, 0, 0, 0x0C, 0x04, 0x08], "=": [0, 0, 0x1F, 0, 0x1F, 0, 0],
        "±": [0x04, 0x04, 0x1F, 0x04, 0x04, 0, 0x1F], "Μ": [0, 0x11, 0x11, 0x11, 0x13, 0x1D, 0x10],
        "µ": [0, 0x11, 0x11, 0x11, 0x13, 0x1D, 0x10], "?": [0x0E, 0x11, 0x01, 0x02, 0x04, 0, 0x04],
    ]
}
