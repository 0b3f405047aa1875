import CamRigWire
import NIOCore

/// The frame decoder fed arbitrary bytes, split at an arbitrary point as TCP might deliver them: it
/// returns frames or throws a `WireProtocolError`, never crashes, never decodes a frame beyond its
/// maximum, and never holds more than one maximum-sized frame's bytes.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzFrameDecoder(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: start, count: count)
    guard let split = bytes.first else { return 0 }
    let body = bytes.dropFirst()
    let maximum: UInt32 = 4096
    var decoder = WireFrameDecoder(maxFrameLength: maximum)
    var buffer = ByteBuffer()
    // The first byte chooses where the rest is cut in two.
    let cut = Int(split) % (body.count + 1)
    do {
        for part in [body.prefix(cut), body.dropFirst(cut)] {
            buffer.writeBytes(part)
            while let frame = try decoder.decode(buffer: &buffer) {
                precondition(4 + 4 + frame.payloadLength <= Int(maximum) + 4, "a frame beyond the maximum was decoded")
                _ = frame.envelope.messageName
            }
            precondition(buffer.readableBytes <= Int(maximum) + 4, "the decoder held more than one frame's bytes")
        }
        while let frame = try decoder.decodeLast(buffer: &buffer, seenEOF: true) {
            _ = frame.envelope.messageName
        }
    } catch is WireProtocolError {
        // What the agent answers with, before closing.
    } catch {
        preconditionFailure("the decoder threw something other than a WireProtocolError: \(error)")
    }
    return 0
}
