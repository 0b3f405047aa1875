import CZlib
import CamRigDeviceModel
import CamRigImage
import Testing

@Suite("PNG encoding and frame image conversion", .timeLimit(.minutes(1)))
struct PNGEncoderTests {
    // MARK: PNG structure

    @Test("the file starts with the PNG signature, then an IHDR with size, 8-bit depth and colour type")
    func signatureAndHeader() throws {
        for (channels, colourType) in [(PNGEncoder.Channels.grey8, UInt8(0)), (.rgb8, 2)] {
            let bytes = try png(randomBytes(7 * 4 * channels.bytesPerPixel), width: 7, height: 4, channels: channels)
            #expect(Array(bytes.prefix(8)) == [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
            let image = try DecodedPNG(bytes)
            #expect(image.chunks.first?.type == "IHDR")
            #expect(image.chunks.first?.data.count == 13)
            #expect(image.width == 7)
            #expect(image.height == 4)
            #expect(image.bitDepth == 8)
            #expect(image.colourType == colourType)
            #expect(image.compressionMethod == 0 && image.filterMethod == 0 && image.interlaceMethod == 0)
            #expect(image.chunks.last?.type == "IEND")
            #expect(image.chunks.last?.data.isEmpty == true)
            #expect(image.chunks.dropFirst().dropLast().allSatisfy { $0.type == "IDAT" })
            #expect(image.chunks.count >= 3)
        }
    }

    @Test("every chunk's CRC-32 matches its type and data, also when the image spans several IDAT chunks")
    func chunkCRCs() throws {
        let small = try DecodedPNG(try png(randomBytes(9 * 5), width: 9, height: 5, channels: .grey8))
        let noise = randomBytes(700 * 500 * 3)
        let large = try DecodedPNG(try png(noise, width: 700, height: 500, channels: .rgb8))
        #expect(large.chunks.filter { $0.type == "IDAT" }.count > 1)
        #expect(firstDifference(large.pixels, noise) == nil)
        for chunk in small.chunks + large.chunks {
            #expect(chunk.storedCRC == chunk.computedCRC, "CRC of \(chunk.type)")
        }
    }

    // MARK: Pixels round-trip

    @Test("grey pixels decode to the input, tightly packed or with row padding", arguments: [0, 1, 3, 64])
    func greyRoundTrip(padding: Int) throws {
        let (width, height) = (13, 9)
        let (buffer, visible) = paddedImage(width: width, height: height, bytesPerPixel: 1, padding: padding)
        let bytes = try png(buffer, width: width, height: height, channels: .grey8, bytesPerRow: width + padding)
        let image = try DecodedPNG(bytes)
        #expect(image.colourType == 0)
        #expect(firstDifference(image.pixels, visible) == nil)
    }

    @Test("RGB pixels decode to the input, tightly packed or with row padding", arguments: [0, 2, 5, 96])
    func rgbRoundTrip(padding: Int) throws {
        let (width, height) = (11, 7)
        let (buffer, visible) = paddedImage(width: width, height: height, bytesPerPixel: 3, padding: padding)
        let bytes = try png(buffer, width: width, height: height, channels: .rgb8, bytesPerRow: width * 3 + padding)
        let image = try DecodedPNG(bytes)
        #expect(image.colourType == 2)
        #expect(firstDifference(image.pixels, visible) == nil)
    }

    @Test("every compression level gives back the same pixels", arguments: [Int32(-1), 0, 1, 6, 9])
    func compressionLevels(level: Int32) throws {
        let pixels = patternRGB(width: 64, height: 48)
        let bytes = try png(pixels, width: 64, height: 48, channels: .rgb8, compressionLevel: level)
        #expect(firstDifference(try DecodedPNG(bytes).pixels, pixels) == nil)
    }

    @Test("a patterned image compresses to well under its raw size at level 1")
    func compression() throws {
        let (width, height) = (640, 480)
        let pixels = patternRGB(width: width, height: height)
        let bytes = try png(pixels, width: width, height: height, channels: .rgb8)
        #expect(bytes.count < pixels.count / 10, "\(bytes.count) bytes for \(pixels.count) raw")
        #expect(firstDifference(try DecodedPNG(bytes).pixels, pixels) == nil)
    }

    @Test("the last row needs no padding after it; one byte less is too short")
    func lastRowPadding() throws {
        let (width, height, bytesPerRow) = (5, 4, 8)
        let exact = (0..<(bytesPerRow * (height - 1) + width)).map { UInt8(truncatingIfNeeded: $0) }
        let image = try DecodedPNG(try png(exact, width: width, height: height, channels: .grey8, bytesPerRow: bytesPerRow))
        #expect(image.pixels == (0..<height).flatMap { exact[($0 * bytesPerRow)..<($0 * bytesPerRow + width)] })
        let error = #expect(throws: PNGEncoderError.self) {
            try png(Array(exact.dropLast()), width: width, height: height, channels: .grey8, bytesPerRow: bytesPerRow)
        }
        #expect(error == .bufferTooShort(byteCount: 28, required: 29, width: 5, height: 4, bytesPerRow: 8))
        #expect(error?.description.contains("28") == true)
        #expect(error?.description.contains("29") == true)
        #expect(error?.description.contains("5x4") == true)
    }

    @Test("bad dimensions, row strides and compression levels are refused with a reason")
    func invalidArguments() throws {
        let pixels = [UInt8](repeating: 0, count: 64)
        let zeroWidth = #expect(throws: PNGEncoderError.self) { try png(pixels, width: 0, height: 4, channels: .grey8) }
        #expect(zeroWidth == .invalidDimensions(width: 0, height: 4))
        let stride = #expect(throws: PNGEncoderError.self) {
            try png(pixels, width: 4, height: 2, channels: .rgb8, bytesPerRow: 10)
        }
        #expect(stride == .rowStrideTooSmall(bytesPerRow: 10, width: 4, bytesPerPixel: 3))
        #expect(stride?.description.contains("12 bytes") == true)
        let level = #expect(throws: PNGEncoderError.self) {
            try png(pixels, width: 4, height: 4, channels: .grey8, compressionLevel: 10)
        }
        #expect(level == .invalidCompressionLevel(10))
    }

    // MARK: Frames

    @Test("YUYV converts with BT.601 limited range: Y=235 is white, Y=16 black, (81, 90, 240) red")
    func yuyvColours() throws {
        // Three pixel pairs per row: white, black, red; two identical rows.
        let row: [UInt8] = [235, 128, 235, 128, 16, 128, 16, 128, 81, 90, 81, 240]
        let frame = try FrameImageWriter.encode(
            row + row, pixelFormat: .yuyv, dimensions: Dimensions(width: 6, height: 2), bytesPerLine: 12)
        #expect(frame.fileExtension == "png")
        let image = try DecodedPNG(frame.data)
        #expect(image.width == 6 && image.height == 2 && image.colourType == 2)
        for y in 0..<2 {
            for x in 0..<2 {
                #expect(image.rgb(x, y).isClose(to: (255, 255, 255), within: 1), "white at \(x),\(y)")
                #expect(image.rgb(x + 2, y).isClose(to: (0, 0, 0), within: 0), "black at \(x + 2),\(y)")
                #expect(image.rgb(x + 4, y).isClose(to: (255, 0, 0), within: 3), "red at \(x + 4),\(y)")
            }
        }
    }

    @Test("YUYV rows are read at bytesPerLine; each pair of pixels shares its U and V")
    func yuyvPadding() throws {
        // Pair 0: grey (Y 126, neutral chroma); pair 1: two different lumas under a blue-ish chroma.
        let line: [UInt8] = [126, 128, 126, 128, 60, 200, 180, 100] + [0xEE, 0xEE, 0xEE, 0xEE]
        let frame = try FrameImageWriter.encode(
            line + line + line, pixelFormat: .yuyv, dimensions: Dimensions(width: 4, height: 3), bytesPerLine: 12)
        let image = try DecodedPNG(frame.data)
        #expect(image.pixels.count == 4 * 3 * 3)
        for y in 0..<3 {
            #expect(image.rgb(0, y).isClose(to: (128, 128, 128), within: 1))
            #expect(image.rgb(1, y).isClose(to: (128, 128, 128), within: 1))
            // BT.601 in floating point: Y=60 U=200 V=100 → (6, 46, 196); Y=180 → (146, 186, 255 clamped).
            #expect(image.rgb(2, y).isClose(to: (6, 46, 196), within: 1))
            #expect(image.rgb(3, y).isClose(to: (146, 186, 255), within: 1))
        }
    }

    @Test("YUYV with an odd width is refused, saying why")
    func yuyvOddWidth() throws {
        let error = #expect(throws: FrameImageWriterError.self) {
            try FrameImageWriter.encode(
                [UInt8](repeating: 128, count: 40), pixelFormat: .yuyv, dimensions: Dimensions(width: 5, height: 2),
                bytesPerLine: 20)
        }
        #expect(error?.description.contains("YUYV") == true)
        #expect(error?.description.contains("5x2") == true)
        #expect(error?.description.contains("even width") == true)
    }

    @Test("GREY and RGB3 frames become PNGs of their visible pixels, honouring bytesPerLine")
    func greyAndRGBFrames() throws {
        let (width, height) = (9, 5)
        for (format, bytesPerPixel, colourType) in [(PixelFormat.grey, 1, UInt8(0)), (.rgb24, 3, 2)] {
            let (buffer, visible) = paddedImage(width: width, height: height, bytesPerPixel: bytesPerPixel, padding: 7)
            let frame = try FrameImageWriter.encode(
                buffer, pixelFormat: format, dimensions: Dimensions(width: 9, height: 5),
                bytesPerLine: width * bytesPerPixel + 7)
            #expect(frame.fileExtension == "png")
            let image = try DecodedPNG(frame.data)
            #expect(image.colourType == colourType, "\(format)")
            #expect(firstDifference(image.pixels, visible) == nil, "\(format)")
        }
    }

    @Test(
        "Bayer RGGB: a flat colour comes back exactly, at even and odd sizes, with row padding",
        arguments: [(2, 2), (5, 3), (8, 6), (7, 7)]
    )
    func bayerFlatColour(width: Int, height: Int) throws {
        let padding = 3
        let bytesPerLine = width + padding
        var mosaic = [UInt8](repeating: 0xEE, count: bytesPerLine * height)
        for y in 0..<height {
            for x in 0..<width {
                mosaic[y * bytesPerLine + x] =
                    switch (y % 2, x % 2) {
                    case (0, 0): 200
                    case (1, 1): 50
                    default: 100
                    }
            }
        }
        let frame = try FrameImageWriter.encode(
            mosaic, pixelFormat: .bayerRGGB8, dimensions: Dimensions(width: UInt32(width), height: UInt32(height)),
            bytesPerLine: bytesPerLine)
        #expect(frame.fileExtension == "png")
        let image = try DecodedPNG(frame.data)
        #expect(image.width == width && image.height == height && image.colourType == 2)
        #expect(image.pixels == Array([[UInt8]](repeating: [200, 100, 50], count: width * height).joined()))
    }

    @Test("Bayer RGGB interpolates bilinearly: means of the nearest samples of each missing colour")
    func bayerBilinear() throws {
        let (width, height) = (6, 6)
        let mosaic = (0..<(width * height)).map { UInt8(truncatingIfNeeded: ($0 * 37) % 251) }
        func m(_ x: Int, _ y: Int) -> Int { Int(mosaic[y * width + x]) }
        let frame = try FrameImageWriter.encode(
            mosaic, pixelFormat: .bayerRGGB8, dimensions: Dimensions(width: 6, height: 6), bytesPerLine: width)
        let image = try DecodedPNG(frame.data)
        // Red site (2, 2): G from the four neighbours, B from the four diagonals.
        #expect(image.rgb(2, 2).red == m(2, 2))
        #expect(image.rgb(2, 2).green == (m(1, 2) + m(3, 2) + m(2, 1) + m(2, 3) + 2) / 4)
        #expect(image.rgb(2, 2).blue == (m(1, 1) + m(3, 1) + m(1, 3) + m(3, 3) + 2) / 4)
        // Green site on a red row (3, 2): R left/right, B above/below.
        #expect(image.rgb(3, 2).red == (m(2, 2) + m(4, 2) + 1) / 2)
        #expect(image.rgb(3, 2).green == m(3, 2))
        #expect(image.rgb(3, 2).blue == (m(3, 1) + m(3, 3) + 1) / 2)
        // Blue site (3, 3): R from the diagonals.
        #expect(image.rgb(3, 3).red == (m(2, 2) + m(4, 2) + m(2, 4) + m(4, 4) + 2) / 4)
        #expect(image.rgb(3, 3).blue == m(3, 3))
        // Corner (0, 0): the mosaic is mirrored, so the missing neighbours are the ones at 1.
        #expect(image.rgb(0, 0).green == (2 * m(1, 0) + 2 * m(0, 1) + 2) / 4)
        #expect(image.rgb(0, 0).blue == m(1, 1))
    }

    @Test("Bayer frames smaller than one 2x2 cell are refused, saying why")
    func bayerTooSmall() throws {
        let error = #expect(throws: FrameImageWriterError.self) {
            try FrameImageWriter.encode(
                [UInt8](repeating: 0, count: 8), pixelFormat: .bayerRGGB8, dimensions: Dimensions(width: 1, height: 8),
                bytesPerLine: 1)
        }
        #expect(error?.description.contains("RGGB frame 1x8") == true)
        #expect(error?.description.contains("2x2") == true)
    }

    @Test("JPEG and MJPEG frames pass through byte for byte as jpg", arguments: [PixelFormat.jpeg, .mjpeg])
    func jpegPassThrough(format: PixelFormat) throws {
        let jpeg: [UInt8] = [0xFF, 0xD8, 0xFF, 0xE0] + randomBytes(997) + [0xFF, 0xD9]
        let frame = try FrameImageWriter.encode(
            jpeg, pixelFormat: format, dimensions: Dimensions(width: 640, height: 480), bytesPerLine: 0)
        #expect(frame.fileExtension == "jpg")
        #expect(frame.data == jpeg)
    }

    @Test("formats without a converter pass through byte for byte as raw")
    func unknownPassThrough() throws {
        let bytes = randomBytes(96)
        let frame = try FrameImageWriter.encode(
            bytes, pixelFormat: PixelFormat(fourCC: "NV16")!, dimensions: Dimensions(width: 8, height: 8),
            bytesPerLine: 8)
        #expect(frame.fileExtension == "raw")
        #expect(frame.data == bytes)
    }

    @Test("a frame buffer shorter than bytesPerLine × height is refused, naming the format and the sizes")
    func shortFrame() throws {
        let error = #expect(throws: FrameImageWriterError.self) {
            try FrameImageWriter.encode(
                [UInt8](repeating: 0, count: 1000), pixelFormat: .yuyv, dimensions: Dimensions(width: 640, height: 480),
                bytesPerLine: 1280)
        }
        let description = error?.description ?? ""
        for part in ["YUYV", "640x480", "1000", "614400", "1280"] {
            #expect(description.contains(part), "\(part) in: \(description)")
        }
    }

    @Test("bytesPerLine shorter than one row of pixels is refused")
    func shortLines() throws {
        let error = #expect(throws: FrameImageWriterError.self) {
            try FrameImageWriter.encode(
                [UInt8](repeating: 0, count: 4000), pixelFormat: .rgb24, dimensions: Dimensions(width: 100, height: 10),
                bytesPerLine: 200)
        }
        #expect(error == .bytesPerLineTooSmall(
            format: .rgb24, dimensions: Dimensions(width: 100, height: 10), bytesPerLine: 200, minimum: 300))
        #expect(error?.description.contains("RGB3") == true)
    }
}

// MARK: - Helpers

private func png(
    _ pixels: [UInt8], width: Int, height: Int, channels: PNGEncoder.Channels, bytesPerRow: Int? = nil,
    compressionLevel: Int32 = 1
) throws -> [UInt8] {
    try pixels.withUnsafeBytes {
        try PNGEncoder.encode(
            width: width, height: height, channels: channels, pixels: $0,
            bytesPerRow: bytesPerRow ?? width * channels.bytesPerPixel, compressionLevel: compressionLevel)
    }
}

extension FrameImageWriter {
    fileprivate static func encode(
        _ bytes: [UInt8], pixelFormat: PixelFormat, dimensions: Dimensions, bytesPerLine: Int
    ) throws -> (fileExtension: String, data: [UInt8]) {
        try bytes.withUnsafeBytes {
            try encode($0, pixelFormat: pixelFormat, dimensions: dimensions, bytesPerLine: bytesPerLine)
        }
    }
}

/// Where two byte arrays first differ, or `nil` when they are equal; keeps failures short for large images.
private func firstDifference(_ actual: [UInt8], _ expected: [UInt8]) -> String? {
    guard actual != expected else { return nil }
    guard actual.count == expected.count else { return "\(actual.count) bytes, expected \(expected.count)" }
    let index = actual.indices.first { actual[$0] != expected[$0] }!
    return "byte \(index) is \(actual[index]), expected \(expected[index])"
}

/// Deterministic pseudo-random bytes.
private func randomBytes(_ count: Int, seed: UInt64 = 0x9E37_79B9_7F4A_7C15) -> [UInt8] {
    var random = SeededRandom(seed: seed)
    return (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) }
}

/// A random image with `padding` bytes of 0xEE after each row, and its rows without the padding.
private func paddedImage(width: Int, height: Int, bytesPerPixel: Int, padding: Int) -> (buffer: [UInt8], visible: [UInt8]) {
    let visible = randomBytes(width * height * bytesPerPixel)
    let rowBytes = width * bytesPerPixel
    let buffer = (0..<height).flatMap { visible[($0 * rowBytes)..<(($0 + 1) * rowBytes)] + Array(repeating: 0xEE, count: padding) }
    return (buffer, visible)
}

/// Gradients and a checkerboard, as RGB.
private func patternRGB(width: Int, height: Int) -> [UInt8] {
    var pixels: [UInt8] = []
    pixels.reserveCapacity(width * height * 3)
    for y in 0..<height {
        for x in 0..<width {
            let check: UInt8 = (x / 32 + y / 32) % 2 == 0 ? 0 : 64
            pixels += [UInt8(x * 255 / width), UInt8(y * 255 / height), check &+ UInt8((x + y) % 128)]
        }
    }
    return pixels
}

private struct RGB {
    var red: Int
    var green: Int
    var blue: Int

    func isClose(to expected: (Int, Int, Int), within tolerance: Int) -> Bool {
        abs(red - expected.0) <= tolerance && abs(green - expected.1) <= tolerance && abs(blue - expected.2) <= tolerance
    }
}

/// A minimal PNG reader for 8-bit grey and RGB images: chunks with their CRCs, inflated and unfiltered pixels.
private struct DecodedPNG {
    struct Chunk {
        var type: String
        var data: [UInt8]
        var storedCRC: UInt32
        var computedCRC: UInt32
    }

    struct ReadError: Error, CustomStringConvertible {
        var description: String
    }

    var chunks: [Chunk] = []
    var width = 0
    var height = 0
    var bitDepth: UInt8 = 0
    var colourType: UInt8 = 0
    var compressionMethod: UInt8 = 0
    var filterMethod: UInt8 = 0
    var interlaceMethod: UInt8 = 0
    var pixels: [UInt8] = []

    var bytesPerPixel: Int { colourType == 2 ? 3 : 1 }

    func rgb(_ x: Int, _ y: Int) -> RGB {
        let at = (y * width + x) * 3
        return RGB(red: Int(pixels[at]), green: Int(pixels[at + 1]), blue: Int(pixels[at + 2]))
    }

    init(_ bytes: [UInt8]) throws {
        guard bytes.starts(with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) else {
            throw ReadError(description: "no PNG signature")
        }
        func bigEndian(_ at: Int) -> UInt32 {
            bytes[at..<(at + 4)].reduce(0) { $0 << 8 | UInt32($1) }
        }
        var position = 8
        while position < bytes.count {
            guard position + 12 <= bytes.count else { throw ReadError(description: "truncated chunk header") }
            let length = Int(bigEndian(position))
            guard position + 12 + length <= bytes.count else { throw ReadError(description: "truncated chunk") }
            let typeAndData = Array(bytes[(position + 4)..<(position + 8 + length)])
            let crc = typeAndData.withUnsafeBufferPointer { crc32(0, $0.baseAddress, UInt32($0.count)) }
            chunks.append(
                Chunk(
                    type: String(decoding: typeAndData.prefix(4), as: UTF8.self), data: Array(typeAndData.dropFirst(4)),
                    storedCRC: bigEndian(position + 8 + length), computedCRC: UInt32(crc)))
            position += 12 + length
        }
        guard let header = chunks.first, header.type == "IHDR", header.data.count == 13 else {
            throw ReadError(description: "IHDR is not the first chunk")
        }
        let h = header.data
        width = Int(h[0..<4].reduce(0) { $0 << 8 | UInt32($1) })
        height = Int(h[4..<8].reduce(0) { $0 << 8 | UInt32($1) })
        (bitDepth, colourType, compressionMethod, filterMethod, interlaceMethod) = (h[8], h[9], h[10], h[11], h[12])
        guard bitDepth == 8, colourType == 0 || colourType == 2 else {
            throw ReadError(description: "unsupported bit depth \(bitDepth) or colour type \(colourType)")
        }
        let rowBytes = width * bytesPerPixel
        let filtered = try Self.inflate(chunks.filter { $0.type == "IDAT" }.flatMap(\.data), expected: height * (rowBytes + 1))
        pixels = try Self.unfilter(filtered, rowBytes: rowBytes, height: height, bytesPerPixel: bytesPerPixel)
    }

    /// The whole zlib stream inflated; must produce exactly `expected` bytes and end cleanly.
    static func inflate(_ compressed: [UInt8], expected: Int) throws -> [UInt8] {
        let stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
        stream.initialize(to: z_stream())
        defer { stream.deallocate() }
        guard inflateInit_(stream, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size)) == Z_OK else {
            throw ReadError(description: "inflateInit failed")
        }
        defer { inflateEnd(stream) }
        var input = compressed
        var output = [UInt8](repeating: 0, count: expected + 1)
        let result = input.withUnsafeMutableBufferPointer { input in
            output.withUnsafeMutableBufferPointer { output in
                stream.pointee.next_in = input.baseAddress
                stream.pointee.avail_in = UInt32(input.count)
                stream.pointee.next_out = output.baseAddress
                stream.pointee.avail_out = UInt32(output.count)
                return CZlib.inflate(stream, Z_FINISH)
            }
        }
        guard result == Z_STREAM_END else {
            let message = stream.pointee.msg.map { String(cString: $0) } ?? "no message"
            throw ReadError(description: "inflate returned \(result): \(message)")
        }
        guard Int(stream.pointee.total_out) == expected, stream.pointee.avail_in == 0 else {
            throw ReadError(description: "inflated \(stream.pointee.total_out) bytes, expected \(expected)")
        }
        return Array(output.prefix(expected))
    }

    /// Undoes the five PNG filter types.
    static func unfilter(_ filtered: [UInt8], rowBytes: Int, height: Int, bytesPerPixel: Int) throws -> [UInt8] {
        var pixels = [UInt8](repeating: 0, count: rowBytes * height)
        for y in 0..<height {
            let filter = filtered[y * (rowBytes + 1)]
            for i in 0..<rowBytes {
                let raw = filtered[y * (rowBytes + 1) + 1 + i]
                let left = i >= bytesPerPixel ? Int(pixels[y * rowBytes + i - bytesPerPixel]) : 0
                let up = y > 0 ? Int(pixels[(y - 1) * rowBytes + i]) : 0
                let upLeft = y > 0 && i >= bytesPerPixel ? Int(pixels[(y - 1) * rowBytes + i - bytesPerPixel]) : 0
                let predictor: Int
                switch filter {
                case 0: predictor = 0
                case 1: predictor = left
                case 2: predictor = up
                case 3: predictor = (left + up) / 2
                case 4:
                    let estimate = left + up - upLeft
                    let (a, b, c) = (abs(estimate - left), abs(estimate - up), abs(estimate - upLeft))
                    predictor = a <= b && a <= c ? left : (b <= c ? up : upLeft)
                default: throw ReadError(description: "unknown filter type \(filter) on row \(y)")
                }
                pixels[y * rowBytes + i] = raw &+ UInt8(truncatingIfNeeded: predictor)
            }
        }
        return pixels
    }
}

// MARK: 4:2:0 frames (libcamera's NV12 and YUV420)

extension PNGEncoderTests {
    /// A 4×4 picture as YUYV, NV12 and YU12: each 2×2 block one chroma sample, lumas all different.
    static let lumas: [[UInt8]] = [[20, 60, 100, 140], [30, 70, 110, 150], [180, 200, 220, 235], [16, 50, 90, 130]]
    static let chroma: [[(u: UInt8, v: UInt8)]] = [[(90, 240), (200, 100)], [(128, 128), (60, 180)]]

    static var yuyv: [UInt8] {
        var bytes: [UInt8] = []
        for y in 0..<4 {
            for pair in 0..<2 {
                let sample = chroma[y / 2][pair]
                bytes += [lumas[y][2 * pair], sample.u, lumas[y][2 * pair + 1], sample.v]
            }
        }
        return bytes
    }

    /// Luma rows `pitch` apart (padding 0xEE), then the chroma rows.
    static func planar(nv12: Bool, pitch: Int) -> [UInt8] {
        let padding = [UInt8](repeating: 0xEE, count: pitch - 4)
        var bytes = lumas.flatMap { $0 + padding }
        if nv12 {
            for row in chroma { bytes += row.flatMap { [$0.u, $0.v] } + padding }
        } else {
            let half = [UInt8](repeating: 0xEE, count: pitch / 2 - 2)
            for row in chroma { bytes += row.map(\.u) + half }
            for row in chroma { bytes += row.map(\.v) + half }
        }
        return bytes
    }

    @Test("NV12 and YU12 frames, padded or not, make the same picture as the YUYV frame with the same samples")
    func planarYUV420() throws {
        let reference = try DecodedPNG(
            FrameImageWriter.encode(Self.yuyv, pixelFormat: .yuyv, dimensions: Dimensions(width: 4, height: 4), bytesPerLine: 8).data)
        for (format, nv12) in [(PixelFormat.nv12, true), (.yuv420, false)] {
            for pitch in [4, 8] {
                let frame = try FrameImageWriter.encode(
                    Self.planar(nv12: nv12, pitch: pitch), pixelFormat: format, dimensions: Dimensions(width: 4, height: 4), bytesPerLine: pitch)
                #expect(frame.fileExtension == "png")
                let image = try DecodedPNG(frame.data)
                #expect(image.pixels == reference.pixels, "\(format) with lines of \(pitch) bytes")
            }
        }
    }

    @Test("a 4:2:0 frame without all its chroma is refused, saying how many bytes it needs")
    func planarTooShort() throws {
        let short = Array(Self.planar(nv12: true, pitch: 4).dropLast(2))
        let error = #expect(throws: FrameImageWriterError.self) {
            try FrameImageWriter.encode(short, pixelFormat: .nv12, dimensions: Dimensions(width: 4, height: 4), bytesPerLine: 4)
        }
        #expect("\(error.map { "\($0)" } ?? "")".contains("24"), "names the 24 bytes needed: \(String(describing: error))")
    }
}
