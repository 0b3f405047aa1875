import CamRigClockSocket
import CamRigCoordinator
import CamRigDevices
import CamRigSecurity
import CamRigTestSupport
import CamRigWire
import Crypto
import Foundation
import NIOCore
import Testing

/// The places where `PROTOCOL.md` and the agent once disagreed, each held to the letter now.
@Suite("The protocol to the letter", .serialized, .timeLimit(.minutes(2)))
struct ProtocolLetterTests {
    let device = "synthetic:SYN0001"

    func lock(_ client: AgentClient) async throws -> String {
        var lock = WireLock()
        lock.deviceID = device
        guard case .lease(let lease) = try await client.request(.lock(lock)).frame.envelope.body else {
            throw CommandError("lock refused")
        }
        return lease.lease.leaseID
    }

    struct CommandError: Error { let message: String; init(_ message: String) { self.message = message } }

    /// The agent's error reply to `body`, which the client raises; `nil` (recorded) when it was answered otherwise.
    func refusal(_ client: AgentClient, _ body: WireEnvelope.OneOf_Body) async -> AgentClientError? {
        do {
            let reply = try await client.request(body)
            Issue.record("\(body.messageName) was answered with \(reply.frame.envelope.messageName)")
            return nil
        } catch let error as AgentClientError {
            #expect(error.kind == .remoteError, "\(error)")
            return error
        } catch {
            Issue.record("\(error)")
            return nil
        }
    }

    @Test("a frame larger than the client announced ends the stream with FRAME_TOO_LARGE and counts it dropped, rather than going silent")
    func frameTooLarge() async throws {
        let (pki, agent) = try await AgentProcess.secured(["--synthetic", "1"])
        defer { agent.terminate(); pki.remove() }
        let client = try await agent.connect(pki, maxFrameLength: WireProtocol.minimumMaxFrameLength)
        var configure = WireConfigure()
        configure.deviceID = device
        configure.leaseID = try await lock(client)
        configure.formatID = "YUYV-1920x1080"
        guard case .deviceState = try await client.request(.configure(configure)).frame.envelope.body else {
            Issue.record("could not choose 1080p")
            return
        }
        var start = WireStartStream()
        start.deviceID = device
        var ended: WireStreamEnded?
        var frames = 0
        for try await message in client.stream(.startStream(start)) {
            if case .streamEnded(let end) = message.envelope.body { ended = end }
            if case .videoFrame = message.envelope.body { frames += 1 }
        }
        #expect(frames == 0)
        let end = try #require(ended, "the stream never ended")
        #expect(end.reason == .frameTooLarge)
        #expect(end.framesSent == 0 && end.framesDropped >= 1)
        #expect(end.message.contains("\(WireProtocol.minimumMaxFrameLength)"), "\(end.message)")
        await client.close()
    }

    @Test("an agent shutting down ends open streams with StreamEnded(SHUTTING_DOWN) before its Goodbye")
    func shutdownEndsStreams() async throws {
        let (pki, agent) = try await AgentProcess.secured(["--synthetic", "1"])
        defer { pki.remove() }
        let client = try await agent.connect(pki)
        var start = WireStartStream()
        start.deviceID = device
        var ended: WireStreamEnded?
        var frames = 0
        do {
            for try await message in client.stream(.startStream(start)) {
                if case .videoFrame = message.envelope.body {
                    frames += 1
                    if frames == 5 { Task.detached { await agent.stop() } }
                }
                if case .streamEnded(let end) = message.envelope.body { ended = end }
            }
        } catch {
            // The connection closing after the StreamEnded is fine; closing before it is what this test catches.
        }
        #expect(ended?.reason == .shuttingDown, "the stream ended without saying so: \(String(describing: ended))")
        await client.close()
    }

    @Test("a trigger naming a device the agent does not have is refused at once, as CapturePhoto is")
    func triggerUnknownDevice() async throws {
        let (pki, agent) = try await AgentProcess.secured(["--synthetic", "1"])
        defer { agent.terminate(); pki.remove() }
        let client = try await agent.connect(pki)
        var trigger = WireScheduleTrigger()
        trigger.triggerID = "t-unknown"
        trigger.action = .capturePhoto
        trigger.deviceIds = [device, "synthetic:NOPE"]
        trigger.fireAtNs = client.welcome.agentMonotonicNs + 5_000_000_000
        let error = try #require(await refusal(client, .scheduleTrigger(trigger)))
        #expect(error.code == .deviceNotFound)
        #expect(error.message.contains("synthetic:NOPE"))
        #expect(error.message.contains("it has: \(device)"), "the error lists the devices the agent has")
        await client.close()
    }

    @Test("acknowledging a result the agent never stored is NOT_FOUND naming it; repeating a real acknowledgement is Ok")
    func acknowledgeUnknown() async throws {
        let (pki, agent) = try await AgentProcess.secured(["--synthetic", "1"])
        defer { agent.terminate(); pki.remove() }
        let client = try await agent.connect(pki)
        var photo = WireCapturePhoto()
        photo.deviceID = device
        photo.sessionID = "s-ack"
        guard case .triggerFired(let fired) = try await client.request(.capturePhoto(photo)).frame.envelope.body else {
            Issue.record("no photo")
            return
        }
        var acknowledge = WireAcknowledgeResults()
        acknowledge.resultIds = fired.resultIds
        for attempt in 1...2 {
            guard case .ok = try await client.request(.acknowledgeResults(acknowledge)).frame.envelope.body else {
                Issue.record("acknowledgement \(attempt) of a real result was refused")
                return
            }
        }
        acknowledge.resultIds = ["never-stored"]
        let error = try #require(await refusal(client, .acknowledgeResults(acknowledge)))
        #expect(error.code == .notFound)
        #expect(error.message.contains("never-stored"))
        await client.close()
    }

    @Test("max_photo_dimensions is a request: the largest supported size within it (binned), or the smallest with a note saying so")
    func photoDimensions() async throws {
        let (pki, agent) = try await AgentProcess.secured(["--synthetic", "1"])
        defer { agent.terminate(); pki.remove() }
        let client = try await agent.connect(pki)
        for (index, (requested, made)) in [((320, 240), (320, 240)), ((100, 100), (320, 240)), ((4000, 3000), (640, 480))].enumerated() {
            var photo = WireCapturePhoto()
            photo.deviceID = device
            photo.sessionID = "dimensions-\(index)"
            photo.settings.maxPhotoDimensions.width = UInt32(requested.0)
            photo.settings.maxPhotoDimensions.height = UInt32(requested.1)
            let reply = try await client.request(.capturePhoto(photo)).frame.envelope.body
            guard case .triggerFired = reply else {
                Issue.record("a photo within \(requested) was answered with \(reply)")
                continue
            }
            var fetch = WireFetchResults()
            fetch.sessionID = photo.sessionID
            var results: [(WirePhotoResult, ByteBuffer)] = []
            for try await message in client.stream(.fetchResults(fetch)) {
                if case .photoResult(let result) = message.envelope.body { results.append((result, message.payload ?? ByteBuffer())) }
            }
            try #require(results.count == 1)
            let (result, image) = results[0]
            #expect(result.dimensions.width == UInt32(made.0) && result.dimensions.height == UInt32(made.1))
            #expect(result.resolved.dimensions == result.dimensions)
            #expect(image.readableBytes == made.0 * made.1 * 2)
            #expect(result.resolved.note.isEmpty == (requested.0 >= 320), "a note only when nothing fits: '\(result.resolved.note)'")
            // The binned photo keeps the frame's header.
            #expect(SyntheticFrameHeader.decode(image, format: .yuyv)?.sequence == result.sequence)
        }
        await client.close()
    }

    @Test("reusing the request id of an open stream is a fatal INVALID_REQUEST_ID")
    func requestIDOfOpenStream() async throws {
        let (pki, agent) = try await AgentProcess.secured(["--synthetic", "1"])
        defer { agent.terminate(); pki.remove() }
        var start = WireStartStream()
        start.deviceID = device
        var ping = WirePing()
        ping.nonce = 9
        let exchange = try await RawPeer.exchange(
            port: agent.port, transport: .tls(directory: TLSDirectory(path: pki.path), name: "coordinator"),
            chunks: [RawPeer.hello, RawPeer.frame(requestID: 2, .startStream(start)), RawPeer.frame(requestID: 2, .ping(ping))],
            timeout: .seconds(5), spacing: .milliseconds(300))
        #expect(exchange.closedByAgent)
        let fatal = try #require(exchange.errors.first { $0.fatal }, "no fatal error: \(exchange.frames.map(\.envelope.messageName))")
        #expect(fatal.code == .invalidRequestID)
        #expect(fatal.message.contains("request_id 2"))
    }

    @Test("a second OpenClockChannel revokes the first key: probes under it go unanswered")
    func secondClockChannelRevokesFirst() async throws {
        let (pki, agent) = try await AgentProcess.secured([])
        defer { agent.terminate(); pki.remove() }
        let client = try await agent.connect(pki)
        guard case .clockChannel(let first) = try await client.request(.openClockChannel(WireOpenClockChannel())).frame.envelope.body,
            case .clockChannel(let second) = try await client.request(.openClockChannel(WireOpenClockChannel())).frame.envelope.body
        else {
            Issue.record("no clock channel")
            return
        }
        #expect(first.keyID != second.keyID)
        let socket = try TimestampingUDPSocket(host: "127.0.0.1", port: 0, receiveTimeout: .milliseconds(300))
        var target = sockaddr_storage()
        let length = try SocketAddress(ipAddress: "127.0.0.1", port: Int(second.port)).withSockAddr { pointer, size in
            withUnsafeMutableBytes(of: &target) { $0.copyMemory(from: UnsafeRawBufferPointer(start: pointer, count: size)) }
            return socklen_t(size)
        }
        func answered(_ channel: WireClockChannel, sequence: UInt64) -> Bool {
            let probe = ClockPacket(kind: .probe, keyID: channel.keyID, sequence: sequence, t1: 1)
            socket.send(probe.encoded(key: SymmetricKey(data: channel.key)), to: target, length: length)
            return socket.receive() != nil
        }
        #expect(!answered(first, sequence: 1), "the first key still works")
        #expect(answered(second, sequence: 2), "the second key does not work")
        await client.close()
    }

    @Test("a viewer's GetSpoolStatus and GetPhaseStatus are answered, as §2 lets a viewer send them; a Lock is not")
    func viewerStatusRequests() async throws {
        let (pki, agent) = try await AgentProcess.secured(["--synthetic", "1"])
        defer { agent.terminate(); pki.remove() }
        let viewer = try await AgentClient.connect(
            to: AgentEndpoint(host: agent.host, port: agent.port),
            security: .tls(try MutualTLS.client(directory: pki.directory, identityName: "viewer-1")))
        #expect(viewer.welcome.clientRole == .viewer)
        let spool = try await viewer.request(.getSpoolStatus(WireGetSpoolStatus())).frame.envelope.body
        guard case .spoolStatus(let status) = spool else {
            Issue.record("a viewer's GetSpoolStatus was answered with \(spool)")
            return
        }
        #expect(status.capacityBytes > 0)
        var phases = WireGetPhaseStatus()
        phases.deviceIds = [device]
        let phase = try await viewer.request(.getPhaseStatus(phases)).frame.envelope.body
        guard case .phaseStatusList = phase else {
            Issue.record("a viewer's GetPhaseStatus was answered with \(phase)")
            return
        }
        var lock = WireLock()
        lock.deviceID = device
        #expect(await refusal(viewer, .lock(lock))?.code == .permissionDenied)
        await viewer.close()
    }

    /// The text of `PROTOCOL.md`.
    static func specification() throws -> String {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        return try String(contentsOf: root.appendingPathComponent("proto/PROTOCOL.md"), encoding: .utf8)
    }

    /// The names in backquotes in the specification's text from `start` to the first `end` after it.
    static func quotedNames(in text: String, from start: String, to end: String) throws -> [String] {
        let from = try #require(text.range(of: start), "PROTOCOL.md no longer says '\(start)'")
        let to = try #require(text.range(of: end, range: from.upperBound..<text.endIndex))
        return text[from.upperBound..<to.lowerBound].split(separator: "`", omittingEmptySubsequences: false)
            .enumerated().filter { $0.offset % 2 == 1 }.map { String($0.element) }
    }

    /// `FileChunk` as the schema's field name, `file_chunk`.
    static func snakeCase(_ name: String) -> String {
        name.enumerated().map { index, character in
            character.isUppercase ? (index == 0 ? "" : "_") + character.lowercased() : String(character)
        }.joined()
    }

    /// Every message an envelope can hold, read through the frame decoder: each envelope field number with
    /// an empty message in it, and whether the decoder accepts that message with a payload.
    static func everyMessage() throws -> [(body: WireEnvelope.OneOf_Body, takesPayload: Bool)] {
        func frame(field: Int, payload: [UInt8]) -> ByteBuffer {
            var envelope: [UInt8] = []
            var tag = field << 3 | 2
            while tag >= 0x80 {
                envelope.append(UInt8(tag & 0x7F) | 0x80)
                tag >>= 7
            }
            envelope += [UInt8(tag), 0]
            var buffer = ByteBuffer()
            buffer.writeInteger(UInt32(4 + envelope.count + payload.count), endianness: .big)
            buffer.writeInteger(UInt32(envelope.count), endianness: .big)
            buffer.writeBytes(envelope + payload)
            return buffer
        }
        var messages: [(WireEnvelope.OneOf_Body, Bool)] = []
        for field in 2..<1000 {
            var decoder = WireFrameDecoder()
            var plain = frame(field: field, payload: [])
            // A field number the envelope does not have holds no message.
            guard let body = (try? decoder.decode(buffer: &plain))?.envelope.body else { continue }
            var withPayload = frame(field: field, payload: [1, 2, 3])
            var payloadDecoder = WireFrameDecoder()
            do {
                let decoded = try payloadDecoder.decode(buffer: &withPayload)
                #expect(decoded?.payloadLength == 3)
                messages.append((body, true))
            } catch let error as WireProtocolError {
                #expect(error.code == .malformedFrame, "\(body.messageName) with a payload: \(error)")
                messages.append((body, false))
            }
        }
        return messages
    }

    @Test("the messages §3 lets carry a payload are exactly those the decoder accepts with one")
    func payloadMessages() throws {
        let messages = try Self.everyMessage()
        #expect(messages.count > 60, "every message of the envelope: \(messages.count)")
        let specified = try Self.quotedNames(in: Self.specification(), from: "may have `P > 0`:", to: ".")
        #expect(
            Set(specified.map(Self.snakeCase)) == Set(messages.filter(\.takesPayload).map(\.body.messageName)),
            "PROTOCOL.md §3 lists \(specified)")
    }

    @Test("the requests §2 lets a viewer send are exactly those the agent's role table allows")
    func viewerRequests() throws {
        let allowed = try Self.everyMessage().map(\.body).filter { $0.isClientRequest && WirePeerRole.viewer.mayRequest($0) }
        let specified = try Self.quotedNames(in: Self.specification(), from: "`viewer` may send", to: ");")
        #expect(Set(specified) == Set(allowed.map(\.messageName)), "PROTOCOL.md §2 lists \(specified)")
    }
}
