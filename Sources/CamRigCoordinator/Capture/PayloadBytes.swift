import CamRigCapture
import NIOCore

/// A received frame's payload as a sink reads it: in the receive buffer, without a copy.
struct PayloadBytes: FrameBytes {
    let buffer: ByteBuffer

    init(_ buffer: ByteBuffer) {
        self.buffer = buffer
    }

    func withFrameBytes<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        try buffer.withUnsafeReadableBytes(body)
    }
}
