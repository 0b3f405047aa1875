import CamRigWire
import Logging
import NIOCore
import NIOEmbedded
import Testing

@testable import CamRigCoordinator

/// Counts the `read()` calls that get past the client handler towards the socket.
private final class ReadCounter: ChannelOutboundHandler {
    typealias OutboundIn = WireFrame

    var reads = 0

    func read(context: ChannelHandlerContext) {
        reads += 1
        context.read()
    }
}

/// A client connection on `NIOAsyncTestingChannel`, welcomed by a pretend agent, with its reads counted.
private struct TestConnection {
    let channel = NIOAsyncTestingChannel()
    var loop: NIOAsyncTestingEventLoop { channel.testingEventLoop }

    static func connected(readStallLimit: TimeAmount = .seconds(60)) async throws -> TestConnection {
        let connection = TestConnection()
        let channel = connection.channel
        let handshake = connection.loop.makePromise(of: WireWelcome.self)
        try await connection.loop.executeInContext {
            let handlers = channel.pipeline.syncOperations
            try handlers.addHandler(ReadCounter())
            try handlers.addHandler(
                AgentClientHandler(
                    agent: "agent-1", handshakePromise: handshake, verification: nil, readStallLimit: readStallLimit,
                    logger: Logger(label: "test"))
            )
        }
        try await channel.connect(to: try SocketAddress(ipAddress: "127.0.0.1", port: 7450))
        let hello = try #require(try await channel.readOutbound(as: WireFrame.self))
        guard case .hello = hello.envelope.body else {
            Issue.record("the client opened with \(hello.envelope.messageName), not a hello")
            return connection
        }
        var welcome = WireWelcome()
        welcome.protocolVersion = WireProtocol.supportedVersions.upperBound
        welcome.agentID = "agent-1"
        try await channel.writeInbound(WireFrame(requestID: hello.requestID, .welcome(welcome)))
        _ = try await handshake.futureResult.get()
        return connection
    }

    /// Reads that reached the socket end so far.
    func reads() async throws -> Int {
        let channel = self.channel
        return try await loop.executeInContext {
            try channel.pipeline.syncOperations.handler(type: ReadCounter.self).reads
        }
    }

    /// What auto-read does after every read cycle: ask the pipeline for another read.
    func read() async throws {
        let channel = self.channel
        try await loop.executeInContext { channel.pipeline.syncOperations.read() }
    }

    /// Opens a stream and returns it with the request id it went out with.
    func openStream(_ buffering: AgentStream.Buffering) async throws -> (AgentStream, UInt64) {
        let (channel, loop) = (self.channel, self.loop)
        let stream = try await loop.executeInContext {
            let handler = try channel.pipeline.syncOperations.handler(type: AgentClientHandler.self)
            var start = WireStartStream()
            start.deviceID = "synthetic:SYN0001"
            return AgentClient.openStream(
                .startStream(start), buffering: buffering, handler: NIOLoopBound(handler, eventLoop: loop))
        }
        await loop.run()
        let request = try #require(try await channel.readOutbound(as: WireFrame.self))
        return (stream, request.requestID)
    }

    func deliver(_ body: WireEnvelope.OneOf_Body, to requestID: UInt64) async throws {
        try await channel.writeInbound(WireFrame(requestID: requestID, body))
    }

    func deliverFrames(_ sequences: Range<UInt64>, to requestID: UInt64) async throws {
        for sequence in sequences {
            var video = WireVideoFrame()
            video.sequence = sequence
            try await channel.writeInbound(
                WireFrame(requestID: requestID, .videoFrame(video), payload: ByteBuffer(repeating: 7, count: 1024)))
        }
    }
}

/// Streams from an agent are bounded: a consumer that falls behind stops the connection's reads.
@Suite("Agent stream back-pressure", .timeLimit(.minutes(1)))
struct AgentStreamBackPressureTests {
    @Test(
        "a slow consumer stops the socket reads at the high watermark; they resume once it is below the low watermark")
    func slowConsumerStopsReads() async throws {
        let connection = try await TestConnection.connected()
        try await connection.read()
        #expect(try await connection.reads() == 1, "reads pass while no stream is full")

        let (stream, requestID) = try await connection.openStream(
            AgentStream.Buffering(lowWatermark: 2, highWatermark: 4))
        try await connection.deliverFrames(0..<3, to: requestID)
        try await connection.read()
        #expect(try await connection.reads() == 2, "below the high watermark the connection still reads")

        try await connection.deliverFrames(3..<4, to: requestID)
        try await connection.read()
        try await connection.read()
        #expect(try await connection.reads() == 2, "a full stream holds the reads back")

        // Frames already read keep arriving (the decoder's buffer): they are buffered, not lost.
        try await connection.deliverFrames(4..<6, to: requestID)

        var iterator = stream.makeAsyncIterator()
        var sequences: [UInt64] = []
        for _ in 0..<4 {
            let frame = try #require(try await iterator.next())
            guard case .videoFrame(let video) = frame.envelope.body else {
                Issue.record("expected a video frame, got \(frame.envelope.messageName)")
                return
            }
            sequences.append(video.sequence)
        }
        #expect(sequences == [0, 1, 2, 3])
        #expect(try await connection.reads() == 2, "two frames still buffered: not below the low watermark yet")

        _ = try #require(try await iterator.next())
        #expect(try await connection.reads() == 3, "below the low watermark the held read is issued")
        try await connection.read()
        #expect(try await connection.reads() == 4, "and reads pass again")

        _ = try #require(try await iterator.next())
        _ = try await connection.channel.finish(acceptAlreadyClosed: true)
        await #expect(throws: AgentClientError.self) { _ = try await iterator.next() }
    }

    @Test("a stream whose consumer is gone is forgotten: its frames never fill a buffer or stop the reads")
    func abandonedStreamIsForgotten() async throws {
        let connection = try await TestConnection.connected()
        var requestID: UInt64 = 0
        do {
            let (stream, id) = try await connection.openStream(AgentStream.Buffering(lowWatermark: 1, highWatermark: 2))
            requestID = id
            var iterator = stream.makeAsyncIterator()
            try await connection.deliverFrames(0..<1, to: requestID)
            _ = try #require(try await iterator.next())
        }
        // The dropped iterator tells the connection on its event loop.
        await connection.loop.run()
        try await connection.deliverFrames(1..<20, to: requestID)
        try await connection.read()
        #expect(try await connection.reads() == 1)
        _ = try await connection.channel.finish(acceptAlreadyClosed: true)
    }

    @Test(
        "a stream that stays full past the stall limit sheds its video frames with a count, and the connection reads again"
    )
    func stalledStreamSheds() async throws {
        let connection = try await TestConnection.connected(readStallLimit: .milliseconds(100))
        let (stream, requestID) = try await connection.openStream(
            AgentStream.Buffering(lowWatermark: 1, highWatermark: 2))
        try await connection.deliverFrames(0..<2, to: requestID)
        try await connection.read()
        #expect(try await connection.reads() == 0, "the stream is full")

        await connection.loop.advanceTime(by: .milliseconds(100))
        #expect(try await connection.reads() == 1, "past the stall limit the held read is issued")
        try await connection.deliverFrames(2..<5, to: requestID)
        try await connection.read()
        #expect(try await connection.reads() == 2, "a shedding stream does not stop the reads")

        var iterator = stream.makeAsyncIterator()
        var delivered: [(sequence: UInt64, droppedBefore: UInt64)] = []
        for _ in 0..<2 {
            let frame = try #require(try await iterator.next())
            guard case .videoFrame(let video) = frame.envelope.body else {
                Issue.record("expected a video frame, got \(frame.envelope.messageName)")
                return
            }
            delivered.append((video.sequence, video.droppedBefore))
        }
        // Caught up: the next frame is delivered, carrying the count of those shed.
        try await connection.deliverFrames(5..<6, to: requestID)
        var ended = WireStreamEnded()
        ended.reason = .stopped
        ended.framesDropped = 1
        try await connection.deliver(.streamEnded(ended), to: requestID)
        while let frame = try await iterator.next() {
            switch frame.envelope.body {
            case .videoFrame(let video): delivered.append((video.sequence, video.droppedBefore))
            case .streamEnded(let ended):
                #expect(ended.framesDropped == 4, "the agent's one drop and the three shed here")
            default: Issue.record("unexpected \(frame.envelope.messageName)")
            }
        }
        #expect(delivered.map(\.sequence) == [0, 1, 5])
        #expect(delivered.map(\.droppedBefore) == [0, 0, 3])
        _ = try await connection.channel.finish(acceptAlreadyClosed: true)
    }
}
