import CamRigTestSupport
import CamRigWire
import Logging
import NIOCore
import NIOEmbedded
import Testing

@testable import CamRigAgent

@Suite("Agent connection", .timeLimit(.minutes(1)))
struct AgentConnectionTests {
    @Test("hello gets a welcome; ping gets a pong; a clock probe gets t1 echoed with t2 ≤ t3")
    func handshakeAndFastPath() throws {
        let connection = try EmbeddedAgentConnection()
        try connection.sendHello()
        var ping = WirePing()
        ping.nonce = 99
        try connection.send(2, .ping(ping))
        var probe = WireClockProbe()
        probe.clientTransmitNs = 12345
        try connection.send(3, .clockProbe(probe))
        let frames = try connection.received()
        try #require(frames.count == 3)
        guard case .welcome(let welcome) = frames[0].envelope.body else {
            Issue.record("expected welcome, got \(frames[0].envelope.messageName)")
            return
        }
        #expect(welcome.protocolVersion == 1)
        #expect(welcome.agentID == "agent-test")
        #expect(welcome.capabilities.contains("ping"))
        #expect(frames[1].requestID == 2)
        if case .pong(let pong) = frames[1].envelope.body { #expect(pong.nonce == 99) } else { Issue.record("no pong") }
        #expect(frames[2].requestID == 3)
        if case .clockProbeReply(let reply) = frames[2].envelope.body {
            #expect(reply.clientTransmitNs == 12345)
            #expect(reply.agentReceiveNs > 0)
            #expect(reply.agentReceiveNs <= reply.agentTransmitNs)
        } else {
            Issue.record("no clock probe reply")
        }
        #expect(connection.isOpen)
    }

    static let unknownMessage: [UInt8] = [0, 0, 0, 11, 0, 0, 0, 7, 0x08, 0x09, 0x9A, 0x06, 0x02, 0xAA, 0xBB]
    static let undecodable: [UInt8] = [0, 0, 0, 10, 0, 0, 0, 6, 0x0A, 0xC8, 0x01, 1, 2, 3]

    struct BadInput: CustomTestStringConvertible, Sendable {
        var name: String
        var helloFirst: Bool
        var bytes: [[UInt8]]
        var code: WireErrorCode
        var testDescription: String { name }
    }

    static let badInputs: [BadInput] = [
        BadInput(name: "length 0xFFFFFFFF", helloFirst: false, bytes: [[0xFF, 0xFF, 0xFF, 0xFF]], code: .frameTooLarge),
        BadInput(name: "length 0xFFFFFFFF after hello", helloFirst: true, bytes: [[0xFF, 0xFF, 0xFF, 0xFF, 1, 2, 3]], code: .frameTooLarge),
        BadInput(name: "length just over the agent's 1 MiB + 4 limit for clients", helloFirst: true, bytes: [[0x00, 0x10, 0x00, 0x05]], code: .frameTooLarge),
        BadInput(name: "zero length", helloFirst: false, bytes: [[0, 0, 0, 0]], code: .malformedFrame),
        BadInput(name: "unknown message type", helloFirst: true, bytes: [unknownMessage], code: .unknownMessage),
        BadInput(name: "undecodable protobuf", helloFirst: true, bytes: [undecodable], code: .undecodableMessage),
        BadInput(name: "ping before hello", helloFirst: false, bytes: [RawPeer.frame(requestID: 1, .ping(.init()))], code: .unexpectedMessage),
        BadInput(name: "second hello", helloFirst: true, bytes: [RawPeer.hello], code: .unexpectedMessage),
        BadInput(name: "request id 0", helloFirst: true, bytes: [RawPeer.frame(requestID: 0, .ping(.init()))], code: .invalidRequestID),
        BadInput(name: "a reply sent as a request", helloFirst: true, bytes: [RawPeer.frame(requestID: 4, .welcome(.init()))], code: .unexpectedMessage),
    ]

    @Test("bad input gets a fatal error naming the problem, then the agent closes", arguments: badInputs)
    func badInput(input: BadInput) throws {
        let connection = try EmbeddedAgentConnection()
        if input.helloFirst { try connection.sendHello() }
        for chunk in input.bytes { try connection.send(chunk) }
        let frames = try connection.received()
        let errors = frames.compactMap { frame -> WireError? in
            if case .error(let error) = frame.envelope.body { return error }
            return nil
        }
        #expect(errors.count == 1)
        #expect(errors.first?.code == input.code)
        #expect(errors.first?.fatal == true)
        #expect(errors.first?.agentID == "agent-test")
        #expect(errors.first?.message.isEmpty == false)
        #expect(!connection.isOpen, "the agent must close after a protocol violation")
        #expect(connection.log.contains("closing connection"))
    }

    @Test("bytes after a fatal error are ignored, not answered")
    func bytesAfterError() throws {
        let connection = try EmbeddedAgentConnection()
        try connection.send([0xFF, 0xFF, 0xFF, 0xFF])
        #expect(try connection.received().count == 1)
        try? connection.send(RawPeer.hello)
        #expect(try connection.received().isEmpty)
    }

    @Test("a frame cut off by the client's close is logged and nothing crashes")
    func truncatedFrame() throws {
        let connection = try EmbeddedAgentConnection()
        try connection.sendHello()
        let ping = RawPeer.frame(requestID: 2, .ping(.init()))
        try connection.send(Array(ping.prefix(ping.count - 2)))
        #expect(try connection.received().count == 1)  // the welcome; the partial ping waits
        #expect(connection.isOpen)
        try connection.channel.close().wait()
        #expect(connection.log.contains("connection ended inside a frame"))
    }

    @Test("a client that never says hello is told HANDSHAKE_TIMEOUT and closed")
    func handshakeTimeout() throws {
        let connection = try EmbeddedAgentConnection(handshakeTimeout: .seconds(3))
        connection.loop.advanceTime(by: .seconds(2))
        #expect(connection.isOpen)
        connection.loop.advanceTime(by: .seconds(2))
        let frames = try connection.received()
        guard case .error(let error) = frames.first?.envelope.body else {
            Issue.record("no error")
            return
        }
        #expect(error.code == .handshakeTimeout)
        #expect(error.message.contains("3 s"))
        #expect(!connection.isOpen)
    }

    @Test("a half-sent frame does not hold a connection forever: the idle timeout closes it")
    func stalledFrame() throws {
        let connection = try EmbeddedAgentConnection(idleTimeout: .seconds(30))
        try connection.sendHello()
        try connection.send([0x00, 0x0F, 0x00, 0x00, 0x00])  // claims ~1 MiB, sends 1 byte of it
        _ = try connection.received()
        connection.loop.advanceTime(by: .seconds(61))
        let frames = try connection.received()
        guard case .goodbye(let goodbye) = frames.first?.envelope.body else {
            Issue.record("expected goodbye, got \(frames.map(\.envelope.messageName))")
            return
        }
        #expect(goodbye.reason.contains("idle: no complete message within 30 s"))
        #expect(!connection.isOpen)
    }

    @Test("a client that keeps sending is never closed as idle")
    func activeClientStays() throws {
        let connection = try EmbeddedAgentConnection(idleTimeout: .seconds(30))
        try connection.sendHello()
        for id in 2...12 {
            connection.loop.advanceTime(by: .seconds(20))
            try connection.send(UInt64(id), .ping(.init()))
        }
        #expect(connection.isOpen)
        #expect(try connection.received().allSatisfy { if case .goodbye = $0.envelope.body { false } else { true } })
    }

    @Test("requests this agent does not serve yet get UNIMPLEMENTED and the connection stays usable")
    func unimplemented() throws {
        let connection = try EmbeddedAgentConnection()
        try connection.sendHello()
        try connection.send(5, .listDevices(.init()))
        try connection.send(6, .ping(.init()))
        let frames = try connection.received()
        #expect(frames.count == 3)
        guard frames.count == 3, case .error(let error) = frames[1].envelope.body else {
            Issue.record("expected an error reply")
            return
        }
        #expect(frames[1].requestID == 5)
        #expect(error.code == .unimplemented)
        #expect(!error.fatal)
        #expect(error.message.contains("list_devices"))
        if case .pong = frames[2].envelope.body {} else { Issue.record("ping after an error reply must still work") }
        #expect(connection.isOpen)
    }

    @Test("shutdown tells the client goodbye with the reason and closes")
    func shutdown() throws {
        let connection = try EmbeddedAgentConnection()
        try connection.sendHello()
        _ = try connection.received()
        connection.channel.pipeline.fireUserInboundEventTriggered(AgentShutdownEvent(reason: "agent stopping"))
        let frames = try connection.received()
        guard case .goodbye(let goodbye) = frames.first?.envelope.body else {
            Issue.record("no goodbye")
            return
        }
        #expect(goodbye.reason == "agent stopping")
        #expect(!connection.isOpen)
    }
}
