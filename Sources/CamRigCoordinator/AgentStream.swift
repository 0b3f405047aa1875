import CamRigWire
import NIOCore

/// The messages answering one streaming request (`StartStream`, a START_STREAM trigger, `FetchResults`,
/// `Subscribe`): the reply first, then the stream's messages, ending with its closing message. An
/// `Error` from the agent, or the connection closing, is thrown.
///
/// ## Bounded, with back-pressure to the agent
///
/// Each stream buffers at most `Buffering.highWatermark` messages (plus what the connection had
/// already read when it filled up: a few socket reads' worth), however slowly it is consumed. The
/// connection's handler yields every message into the stream's `NIOThrowingAsyncSequenceProducer`
/// (high/low watermark strategy). When a yield reports that the stream is full, the handler stops
/// reading the socket: it holds back the channel's `read()` (which is how auto-read asks for more),
/// so the kernel's receive buffer fills, TCP's window closes, and the agent's socket stops being
/// writable. The agent then drops frames and counts them (`dropped_before` on the next `VideoFrame`,
/// `frames_dropped` in `StreamEnded`), which a recording reports per camera. Once the consumer has
/// taken the stream down to the low watermark, the producer asks for more and the handler issues the
/// held `read()`. Memory thus depends on the watermarks, never on how far the consumer lags.
///
/// One connection carries every request to its agent, so while one stream's consumer lags, replies
/// and other streams on that connection wait too; and a consumer that waits for a reply on the same
/// connection while its stream is full would wait for ever. Reading therefore stops for at most a
/// stall limit (a second: long enough for a consumer starved of CPU to catch up, short enough that a
/// stuck one cannot wedge the connection): streams still full then shed their video frames on the
/// coordinator instead, counted into the next delivered frame's `dropped_before` and into
/// `StreamEnded.frames_dropped` just as the agent counts its own drops, and the connection reads
/// again. A stream sheds until its consumer has caught up. Other messages are never dropped.
///
/// So a consumer should not wait for a reply on the same connection inside its loop while frames keep
/// coming (send the request from another task, as a recording's stop does); if it does, it is
/// delayed until the reply gets through, and its stream may shed meanwhile.
///
/// A stream is consumed once. When its consumer stops (leaves the loop, drops the iterator, or its
/// task is cancelled, which throws `CancellationError`), the connection forgets the stream: later
/// messages for it are dropped instead of buffered.
public struct AgentStream: AsyncSequence, Sendable {
    public typealias Element = WireFrame

    /// How many messages a stream holds before the connection stops reading.
    public struct Buffering: Sendable, Hashable {
        /// Reading resumes once the consumer has taken the stream below this many messages.
        public var lowWatermark: Int
        /// Reading stops once the stream holds this many messages.
        public var highWatermark: Int

        /// `lowWatermark` must not exceed `highWatermark`; both at least 1.
        public init(lowWatermark: Int, highWatermark: Int) {
            precondition(1 <= lowWatermark && lowWatermark <= highWatermark, "watermarks must satisfy 1 <= low <= high")
            self.lowWatermark = lowWatermark
            self.highWatermark = highWatermark
        }

        /// Eight messages (a quarter of a second at 30 fps), reading again below two.
        public static let `default` = Buffering(lowWatermark: 2, highWatermark: 8)
    }

    typealias Producer = NIOThrowingAsyncSequenceProducer<
        WireFrame, any Error, NIOAsyncSequenceProducerBackPressureStrategies.HighLowWatermark, Delegate
    >
    typealias Source = Producer.Source

    private let producer: Producer

    /// A stream and the source its connection yields into. `handler` hears, on its event loop, when the
    /// consumer wants more and when it has gone.
    static func make(
        buffering: Buffering,
        handler: NIOLoopBound<AgentClientHandler>
    ) -> (stream: AgentStream, source: Source, token: Token) {
        let token = Token()
        let made = Producer.makeSequence(
            backPressureStrategy: .init(lowWatermark: buffering.lowWatermark, highWatermark: buffering.highWatermark),
            finishOnDeinit: true,
            delegate: Delegate(handler: handler, token: token)
        )
        return (AgentStream(producer: made.sequence), made.source, token)
    }

    private init(producer: Producer) {
        self.producer = producer
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: producer.makeAsyncIterator())
    }

    /// Iterates a stream's messages.
    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: Producer.AsyncIterator

        /// The next message, `nil` after the closing one.
        public mutating func next() async throws -> WireFrame? {
            try await base.next()
        }
    }

    /// Names one stream to its connection's handler before the stream has a request id (which only
    /// the event loop hands out).
    final class Token: Sendable {}

    /// Tells the connection's handler, on its event loop, what the consumer did.
    struct Delegate: NIOAsyncSequenceProducerDelegate {
        let handler: NIOLoopBound<AgentClientHandler>
        let token: Token

        func produceMore() {
            let (handler, token) = (handler, token)
            handler.eventLoop.execute { handler.value.consumerCaughtUp(token) }
        }

        func didTerminate() {
            let (handler, token) = (handler, token)
            handler.eventLoop.execute { handler.value.consumerStopped(token) }
        }
    }
}

@available(*, unavailable)
extension AgentStream.AsyncIterator: Sendable {}
