import NIOCore

/// A minimal baseline JPEG writer for the synthetic camera's MJPEG formats: one grey component, each
/// 8×8 block flat (DC coefficient only), standard DC Huffman table and a one-symbol AC table (end of
/// block). Real decoders read it; the image is a blocky rendering of the test pattern.
enum BaselineJPEG {
    /// Standard luminance DC table (ITU T.81 Annex K.3): code lengths and (category) values.
    static let dcLengths: [UInt8] = [0, 1, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0]
    static let dcCodes: [(code: UInt32, length: Int)] = {
        var codes: [(UInt32, Int)] = []
        var code: UInt32 = 0
        for (index, count) in dcLengths.enumerated() {
            for _ in 0..<count {
                codes.append((code, index + 1))
                code += 1
            }
            code <<= 1
        }
        return codes
    }()

    /// Encodes `blocks` (one level 0…255 per 8×8 block, row-major) of an image `width`×`height` (multiples
    /// of 8), after a COM segment holding `comment`.
    static func encode(width: Int, height: Int, blocks: [UInt8], comment: ByteBuffer, into out: inout ByteBuffer) {
        out.writeInteger(UInt16(0xFFD8))
        out.writeInteger(UInt16(0xFFFE))
        out.writeInteger(UInt16(2 + comment.readableBytes))
        var comment = comment
        out.writeBuffer(&comment)
        // DQT: table 0, all ones (the DC value passes unchanged).
        out.writeInteger(UInt16(0xFFDB))
        out.writeInteger(UInt16(67))
        out.writeInteger(UInt8(0))
        out.writeRepeatingByte(1, count: 64)
        // SOF0: 8-bit, height, width, one component (id 1, 1×1 sampling, table 0).
        out.writeInteger(UInt16(0xFFC0))
        out.writeInteger(UInt16(11))
        out.writeInteger(UInt8(8))
        out.writeInteger(UInt16(height))
        out.writeInteger(UInt16(width))
        out.writeBytes([1, 1, 0x11, 0])
        // DHT: DC table 0, then AC table 0 with the single symbol 0x00 (EOB) coded as "0".
        out.writeInteger(UInt16(0xFFC4))
        out.writeInteger(UInt16(2 + 1 + 16 + 12))
        out.writeInteger(UInt8(0x00))
        out.writeBytes(dcLengths)
        out.writeBytes(Array(0...11) as [UInt8])
        out.writeInteger(UInt16(0xFFC4))
        out.writeInteger(UInt16(2 + 1 + 16 + 1))
        out.writeInteger(UInt8(0x10))
        out.writeBytes([1] + [UInt8](repeating: 0, count: 15))
        out.writeInteger(UInt8(0))
        // SOS: one component, tables 0/0, full spectral range.
        out.writeInteger(UInt16(0xFFDA))
        out.writeBytes([0, 8, 1, 1, 0x00, 0, 63, 0])

        var writer = BitWriter()
        var previous = 0
        for level in blocks {
            let dc = 8 * (Int(level) - 128)
            let diff = dc - previous
            previous = dc
            let magnitude = abs(diff)
            let category = magnitude == 0 ? 0 : (Int.bitWidth - magnitude.leadingZeroBitCount)
            let huffman = dcCodes[category]
            writer.write(huffman.code, count: huffman.length, to: &out)
            if category > 0 {
                let bits = diff >= 0 ? diff : diff + (1 << category) - 1
                writer.write(UInt32(bits), count: category, to: &out)
            }
            writer.write(0, count: 1, to: &out)  // EOB
        }
        writer.flush(to: &out)
        out.writeInteger(UInt16(0xFFD9))
    }

    struct BitWriter {
        var accumulator: UInt32 = 0
        var count = 0

        mutating func write(_ value: UInt32, count bits: Int, to out: inout ByteBuffer) {
            for shift in stride(from: bits - 1, through: 0, by: -1) {
                accumulator = (accumulator << 1) | ((value >> UInt32(shift)) & 1)
                count += 1
                if count == 8 {
                    emit(to: &out)
                }
            }
        }

        mutating func emit(to out: inout ByteBuffer) {
            let byte = UInt8(accumulator & 0xFF)
            out.writeInteger(byte)
            if byte == 0xFF { out.writeInteger(UInt8(0)) }  // byte stuffing
            accumulator = 0
            count = 0
        }

        /// Pads the last byte with one bits, as T.81 requires.
        mutating func flush(to out: inout ByteBuffer) {
            guard count > 0 else { return }
            while count < 8 {
                accumulator = (accumulator << 1) | 1
                count += 1
            }
            emit(to: &out)
        }
    }
}
