import NIOCore

/// Writes `WireFrame`s: the head (prefix, envelope length, envelope) as one buffer and the payload as a
/// second, so image bytes go to the socket (or TLS) without being copied into a frame buffer.
public final class WireFrameEncoder: ChannelOutboundHandler, RemovableChannelHandler {
    public typealias OutboundIn = WireFrame
    public typealias OutboundOut = ByteBuffer

    /// The largest frame the peer accepts; larger writes fail with `.frameTooLarge`.
    public var peerMaxFrameLength: UInt32

    /// Creates an encoder.
    public init(peerMaxFrameLength: UInt32 = WireProtocol.defaultMaxFrameLength) {
        self.peerMaxFrameLength = peerMaxFrameLength
    }

    public func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let frame = unwrapOutboundIn(data)
        var head = context.channel.allocator.buffer(capacity: 64)
        do {
            try frame.encodeHead(into: &head, maxFrameLength: peerMaxFrameLength)
        } catch {
            promise?.fail(error)
            return
        }
        if let payload = frame.payload, payload.readableBytes > 0 {
            context.write(wrapOutboundOut(head), promise: nil)
            context.write(wrapOutboundOut(payload), promise: promise)
        } else {
            context.write(wrapOutboundOut(head), promise: promise)
        }
    }
}

@available(*, unavailable)
extension WireFrameEncoder: Sendable {}
