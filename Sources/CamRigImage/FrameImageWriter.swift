import CamRigDeviceModel

/// Turns a captured camera frame into the file that goes on disk.
///
/// | Pixel format | File | Conversion |
/// |---|---|---|
/// | `YUYV` | `png`, RGB | BT.601 limited range to RGB, one U/V pair per two pixels |
/// | `GREY` | `png`, grey | none |
/// | `RGB3` | `png`, RGB | none |
/// | `RGGB` (8-bit Bayer) | `png`, RGB | bilinear demosaic |
/// | `MJPG`, `JPEG` | `jpg` | none: the bytes as captured |
/// | `DNG ` (an agent's RAW photo) | `dng` | none: the file as the agent made it |
/// | anything else | `raw` | none: the bytes as captured |
///
/// For the uncompressed formats, row `y` starts at byte `y × bytesPerLine` (which may include padding
/// after the pixels), and the buffer must hold at least `bytesPerLine × height` bytes.
public enum FrameImageWriter {
    /// File extension and bytes to write for a frame: PNG for raw formats, the bytes as they are for
    /// MJPEG/JPEG and for formats CamRig cannot convert.
    public static func encode(
        _ bytes: UnsafeRawBufferPointer,
        pixelFormat: PixelFormat,
        dimensions: Dimensions,
        bytesPerLine: Int
    ) throws -> (fileExtension: String, data: [UInt8]) {
        let bytesPerPixel: Int
        switch pixelFormat {
        case .mjpeg, .jpeg:
            return ("jpg", Array(bytes))
        case .dng:
            return ("dng", Array(bytes))
        case .yuyv:
            bytesPerPixel = 2
        case .rgb24:
            bytesPerPixel = 3
        case .grey, .bayerRGGB8:
            bytesPerPixel = 1
        case .nv12, .yuv420:
            return ("png", try encodePlanarYUV420(bytes, pixelFormat: pixelFormat, dimensions: dimensions, bytesPerLine: bytesPerLine))
        default:
            return ("raw", Array(bytes))
        }

        let width = Int(dimensions.width)
        let height = Int(dimensions.height)
        func unsupported(_ reason: String) -> FrameImageWriterError {
            .unsupportedDimensions(format: pixelFormat, dimensions: dimensions, reason: reason)
        }
        guard width > 0, height > 0 else { throw unsupported("width and height must be at least 1") }
        if pixelFormat == .yuyv && width % 2 != 0 {
            throw unsupported("YUYV needs an even width (each pair of pixels shares one U and one V sample)")
        }
        if pixelFormat == .bayerRGGB8 && (width < 2 || height < 2) {
            throw unsupported("Bayer demosaicing needs at least 2x2 pixels (one full RGGB cell)")
        }
        let minimumBytesPerLine = width * bytesPerPixel
        guard bytesPerLine >= minimumBytesPerLine else {
            throw FrameImageWriterError.bytesPerLineTooSmall(
                format: pixelFormat, dimensions: dimensions, bytesPerLine: bytesPerLine, minimum: minimumBytesPerLine)
        }
        let (required, overflow) = bytesPerLine.multipliedReportingOverflow(by: height)
        guard !overflow, bytes.count >= required, let base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self)
        else {
            throw FrameImageWriterError.bufferTooShort(
                format: pixelFormat, dimensions: dimensions, bytesPerLine: bytesPerLine,
                byteCount: bytes.count, required: overflow ? Int.max : required)
        }

        let channels: PNGEncoder.Channels = pixelFormat == .grey ? .grey8 : .rgb8
        try PNGEncoder.validate(width: width, height: height, channels: channels, compressionLevel: 1)
        let data: [UInt8]
        switch pixelFormat {
        case .yuyv:
            data = try PNGEncoder.encode(width: width, height: height, channels: .rgb8, compressionLevel: 1) { y, rgb in
                convertYUYVRow(base + y * bytesPerLine, pixelPairs: width / 2, into: rgb)
                return UnsafePointer(rgb)
            }
        case .bayerRGGB8:
            data = try demosaicRGGB(base, width: width, height: height, bytesPerLine: bytesPerLine)
        default:
            data = try PNGEncoder.encode(
                width: width, height: height, channels: channels, compressionLevel: 1
            ) { y, _ in
                base + y * bytesPerLine
            }
        }
        return ("png", data)
    }

    /// A PNG of a 4:2:0 planar frame (NV12 or YU12): each row made into YUYV (chroma shared by two rows),
    /// then converted as YUYV is.
    static func encodePlanarYUV420(
        _ bytes: UnsafeRawBufferPointer, pixelFormat: PixelFormat, dimensions: Dimensions, bytesPerLine: Int
    ) throws -> [UInt8] {
        let width = Int(dimensions.width)
        let height = Int(dimensions.height)
        guard width >= 2, height >= 1, width % 2 == 0 else {
            throw FrameImageWriterError.unsupportedDimensions(
                format: pixelFormat, dimensions: dimensions, reason: "4:2:0 frames need an even width of at least 2")
        }
        guard bytesPerLine >= width else {
            throw FrameImageWriterError.bytesPerLineTooSmall(format: pixelFormat, dimensions: dimensions, bytesPerLine: bytesPerLine, minimum: width)
        }
        let chromaLine = pixelFormat == .nv12 ? bytesPerLine : bytesPerLine / 2
        let chromaRows = (height + 1) / 2
        let required = bytesPerLine * height + chromaLine * chromaRows * (pixelFormat == .nv12 ? 1 : 2)
        guard bytes.count >= required, let base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else {
            throw FrameImageWriterError.bufferTooShort(
                format: pixelFormat, dimensions: dimensions, bytesPerLine: bytesPerLine, byteCount: bytes.count, required: required)
        }
        let chroma = base + bytesPerLine * height
        let vPlane = chroma + chromaLine * chromaRows
        var yuyv = [UInt8](repeating: 0, count: width * 2)
        try PNGEncoder.validate(width: width, height: height, channels: .rgb8, compressionLevel: 1)
        return try yuyv.withUnsafeMutableBufferPointer { row in
            try PNGEncoder.encode(width: width, height: height, channels: .rgb8, compressionLevel: 1) { y, rgb in
                let luma = base + y * bytesPerLine
                let chromaRow = (y / 2) * chromaLine
                for pair in 0..<(width / 2) {
                    row[4 * pair] = luma[2 * pair]
                    row[4 * pair + 2] = luma[2 * pair + 1]
                    if pixelFormat == .nv12 {
                        row[4 * pair + 1] = chroma[chromaRow + 2 * pair]
                        row[4 * pair + 3] = chroma[chromaRow + 2 * pair + 1]
                    } else {
                        row[4 * pair + 1] = chroma[chromaRow + pair]
                        row[4 * pair + 3] = vPlane[chromaRow + pair]
                    }
                }
                convertYUYVRow(UnsafePointer(row.baseAddress!), pixelPairs: width / 2, into: rgb)
                return UnsafePointer(rgb)
            }
        }
    }

    /// YUYV (Y0 U Y1 V) to RGB8 with the BT.601 limited-range matrix, in 8.8 fixed point:
    ///
    ///     C = Y - 16,  D = U - 128,  E = V - 128
    ///     R = (298 C           + 409 E + 128) >> 8     (1.164 C           + 1.596 E)
    ///     G = (298 C - 100 D   - 208 E + 128) >> 8     (1.164 C - 0.391 D - 0.813 E)
    ///     B = (298 C + 516 D           + 128) >> 8     (1.164 C + 2.018 D)
    ///
    /// each clamped to 0...255. Y = 16 gives black, Y = 235 white.
    static func convertYUYVRow(_ source: UnsafePointer<UInt8>, pixelPairs: Int, into rgb: UnsafeMutablePointer<UInt8>) {
        for pair in 0..<pixelPairs {
            let yuyv = source + 4 * pair
            let out = rgb + 6 * pair
            let luma0 = 298 &* (Int32(yuyv[0]) &- 16) &+ 128
            let luma1 = 298 &* (Int32(yuyv[2]) &- 16) &+ 128
            let d = Int32(yuyv[1]) &- 128
            let e = Int32(yuyv[3]) &- 128
            let red = 409 &* e
            let green = -100 &* d &- 208 &* e
            let blue = 516 &* d
            out[0] = UInt8(clamping: (luma0 &+ red) >> 8)
            out[1] = UInt8(clamping: (luma0 &+ green) >> 8)
            out[2] = UInt8(clamping: (luma0 &+ blue) >> 8)
            out[3] = UInt8(clamping: (luma1 &+ red) >> 8)
            out[4] = UInt8(clamping: (luma1 &+ green) >> 8)
            out[5] = UInt8(clamping: (luma1 &+ blue) >> 8)
        }
    }

    /// Bilinear demosaic of an RGGB mosaic (R at even row and column, B at odd row and column, G elsewhere).
    ///
    /// Each missing colour is the rounded mean of its nearest samples of that colour: the two horizontal
    /// or two vertical neighbours for R/B at a green site, the four diagonal neighbours for R at a blue
    /// site and B at a red site, the four direct neighbours for G. Past the image edge the mosaic is
    /// mirrored about the edge pixel (column -1 reads column 1), which keeps the colour pattern intact, so
    /// odd widths and heights need no special case. Needs at least 2x2 pixels.
    static func demosaicRGGB(_ base: UnsafePointer<UInt8>, width: Int, height: Int, bytesPerLine: Int) throws -> [UInt8] {
        func mirrored(_ i: Int, count: Int) -> Int { i < 0 ? -i : (i >= count ? 2 * (count - 1) - i : i) }

        return try PNGEncoder.encode(width: width, height: height, channels: .rgb8, compressionLevel: 1) { y, rgb in
            let north = base + mirrored(y - 1, count: height) * bytesPerLine
            let centre = base + y * bytesPerLine
            let south = base + mirrored(y + 1, count: height) * bytesPerLine
            let redRow = y & 1 == 0
            for x in 0..<width {
                let left = x == 0 ? 1 : x - 1
                let right = x == width - 1 ? width - 2 : x + 1
                let cross = UInt8((UInt16(north[x]) + UInt16(south[x]) + UInt16(centre[left]) + UInt16(centre[right]) + 2) >> 2)
                let diagonal = UInt8(
                    (UInt16(north[left]) + UInt16(north[right]) + UInt16(south[left]) + UInt16(south[right]) + 2) >> 2)
                let horizontal = UInt8((UInt16(centre[left]) + UInt16(centre[right]) + 1) >> 1)
                let vertical = UInt8((UInt16(north[x]) + UInt16(south[x]) + 1) >> 1)
                let pixel: (red: UInt8, green: UInt8, blue: UInt8) =
                    switch (redRow, x & 1 == 0) {
                    case (true, true): (centre[x], cross, diagonal)
                    case (true, false): (horizontal, centre[x], vertical)
                    case (false, true): (vertical, centre[x], horizontal)
                    case (false, false): (diagonal, cross, centre[x])
                    }
                rgb[3 * x] = pixel.red
                rgb[3 * x + 1] = pixel.green
                rgb[3 * x + 2] = pixel.blue
            }
            return UnsafePointer(rgb)
        }
    }
}

/// Why a frame could not be turned into an image file.
public enum FrameImageWriterError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The frame buffer is shorter than `bytesPerLine × height`.
    case bufferTooShort(format: PixelFormat, dimensions: Dimensions, bytesPerLine: Int, byteCount: Int, required: Int)
    /// `bytesPerLine` cannot hold one row of pixels.
    case bytesPerLineTooSmall(format: PixelFormat, dimensions: Dimensions, bytesPerLine: Int, minimum: Int)
    /// The dimensions do not suit the format (zero, too large, odd YUYV width, Bayer smaller than 2x2).
    case unsupportedDimensions(format: PixelFormat, dimensions: Dimensions, reason: String)

    public var description: String {
        switch self {
        case .bufferTooShort(let format, let dimensions, let bytesPerLine, let byteCount, let required):
            "\(format) frame \(dimensions) holds \(byteCount) bytes but needs \(required) (\(bytesPerLine) bytes per line × \(dimensions.height) lines)"
        case .bytesPerLineTooSmall(let format, let dimensions, let bytesPerLine, let minimum):
            "\(format) frame \(dimensions): \(bytesPerLine) bytes per line is less than one line of pixels (\(minimum) bytes)"
        case .unsupportedDimensions(let format, let dimensions, let reason):
            "\(format) frame \(dimensions) cannot be converted: \(reason)"
        }
    }
}
