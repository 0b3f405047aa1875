import CamRigDeviceModel
import NIOCore

/// Draws synthetic frames. Every raw frame starts with its `SyntheticFrameHeader`; rows 8–15 show the
/// sequence number as 64 black or white blocks (visible in any viewer); the rest is the selected test
/// pattern, lit by the exposure, tinted by the white balance, scaled by the zoom, softened when out of
/// focus, and with row noise.
enum SyntheticPattern {
    static func render(
        format: DeviceFormat,
        header: SyntheticFrameHeader,
        settings: CameraSettings,
        pattern: Int64,
        brightness: Int64,
        noise: UInt8,
        random: inout SeededRandom
    ) -> ByteBuffer {
        let width = Int(format.dimensions.width)
        let height = Int(format.dimensions.height)
        let look = Look(settings: settings, brightness: brightness, sequence: header.sequence, pattern: pattern)
        var out = ByteBufferAllocator().buffer(capacity: Int(format.imageSize) + 1024)

        if format.pixelFormat.isCompressed {
            var comment = ByteBufferAllocator().buffer(capacity: SyntheticFrameHeader.size)
            header.write(into: &comment)
            let columns = width / 8
            let rows = height / 8
            var blocks = [UInt8](repeating: 0, count: columns * rows)
            for row in 0..<rows {
                for column in 0..<columns {
                    blocks[row * columns + column] =
                        row == 1 ? bandLevel(column: column, columns: columns, sequence: header.sequence)
                        : look.luma(x: column * 8 + 4, width: width)
                }
            }
            BaselineJPEG.encode(width: columns * 8, height: rows * 8, blocks: blocks, comment: comment, into: &out)
            return out
        }

        let bytesPerLine = Int(format.bytesPerLine)
        var line = [UInt8](repeating: 0, count: bytesPerLine)
        var band = [UInt8](repeating: 0, count: bytesPerLine)
        let (u, v) = look.chroma
        for x in 0..<width {
            let level = look.luma(x: x, width: width)
            let bandValue = bandLevel(column: x * 64 / width, columns: 64, sequence: header.sequence)
            switch format.pixelFormat {
            case .yuyv:
                line[2 * x] = level
                band[2 * x] = bandValue
                line[2 * x + 1] = x % 2 == 0 ? u : v
                band[2 * x + 1] = 128
            case .rgb24:
                line[3 * x] = level
                line[3 * x + 1] = level
                line[3 * x + 2] = level
                band[3 * x] = bandValue
                band[3 * x + 1] = bandValue
                band[3 * x + 2] = bandValue
            default:  // one byte per pixel: GREY, Bayer
                line[x] = level
                band[x] = bandValue
            }
        }
        // Row noise: each row shifts by a seeded amount (visible as grain). The few shifted rows are made
        // once per frame, so a row costs one copy.
        let variants = (-Int(noise)...Int(noise)).map { shift in shift == 0 ? line : line.map { UInt8(clamping: Int($0) + shift) } }
        for row in 0..<height {
            if (8..<16).contains(row) {
                out.writeBytes(band)
            } else if noise > 0 {
                out.writeBytes(variants[Int(random.next() % UInt64(variants.count))])
            } else {
                out.writeBytes(line)
            }
        }
        // The header replaces the first bytes of row 0.
        var head = ByteBufferAllocator().buffer(capacity: SyntheticFrameHeader.size)
        header.write(into: &head)
        out.setBuffer(head, at: out.readerIndex)
        return out
    }

    static func bandLevel(column: Int, columns: Int, sequence: UInt64) -> UInt8 {
        let bit = column * 64 / max(columns, 1)
        return (sequence >> UInt64(63 - min(bit, 63))) & 1 == 1 ? 235 : 16
    }

    /// How the settings make the picture look.
    struct Look {
        let gain: Double
        let offset: Double
        let period: Double
        let phase: Double
        let contrast: Double
        let pattern: Int64
        let chroma: (UInt8, UInt8)

        init(settings: CameraSettings, brightness: Int64, sequence: UInt64, pattern: Int64) {
            // Exposure: manual exposure time × ISO against 1/60 s at ISO 100; automatic modes meter to
            // mid-grey. The target bias and the torch apply to both.
            var exposure = 1.0
            if settings.exposureMode == .custom || settings.exposureMode == .locked {
                exposure = settings.exposureDuration.seconds * 60 * Double(settings.iso) / 100
            }
            exposure *= Double(pow2(settings.exposureTargetBias))
            if settings.torchMode == .on { exposure *= 1 + Double(settings.torchLevel) }
            gain = min(exposure, 8)
            offset = Double(brightness - 128) / 2
            period = 256 * settings.zoomFactor
            phase = Double(sequence % 256) * 4
            // Out of focus (locked away from the subject at 0.5): contrast falls off.
            contrast = settings.focusMode == .locked ? max(0.2, 1 - 2 * Double(abs(settings.lensPosition - 0.5))) : 1
            self.pattern = pattern
            // Cooler than 5000 K shifts towards blue (U up), warmer towards red (V up).
            var tint = (Double(settings.whiteBalanceTemperature) - 5000) / 40
            var blue = 0.0
            if settings.whiteBalanceMode == .locked {
                tint += Double(settings.whiteBalanceRedGain - 1) * 64
                blue = Double(settings.whiteBalanceBlueGain - 1) * 64
            }
            chroma = (UInt8(clamping: Int(128 - tint + blue)), UInt8(clamping: Int(128 + tint)))
        }

        func luma(x: Int, width: Int) -> UInt8 {
            let base: Double
            switch pattern {
            case 1: base = Double([235, 210, 170, 145, 106, 81, 41, 16][min(7, x * 8 / max(width, 1))])
            case 2: base = 128
            default: base = (Double(x) * 256 / period + phase).truncatingRemainder(dividingBy: 256)
            }
            let value = (128 + (base - 128) * contrast) * gain + offset
            return UInt8(clamping: Int(value.rounded()))
        }
    }
}

private func pow2(_ exponent: Float) -> Float {
    var result: Float = 1
    var remaining = exponent
    while remaining >= 1 { result *= 2; remaining -= 1 }
    while remaining <= -1 { result /= 2; remaining += 1 }
    // Fractional part by a short series (2^f ≈ 1 + f·ln2 + (f·ln2)²/2).
    let f = remaining * 0.693_147
    return result * (1 + f + f * f / 2)
}
