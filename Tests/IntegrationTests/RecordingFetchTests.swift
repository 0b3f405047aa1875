import CamRigCoordinator
import CamRigTestSupport
import CamRigWire
import Crypto
import Foundation
import NIOCore
import Testing

/// A recording's files fetched over the protocol by a client that asks for little: every reply fits what
/// it announced, and every request is answered.
@Suite("On-host recording: files over the wire", .serialized, .timeLimit(.minutes(2)))
struct RecordingFetchTests {
    @Test("a client announcing the smallest frame limit fetches a recorded file whole, in chunks that fit it; an acknowledgement repeated is Ok; the room for recordings follows what the host holds")
    func fetchAtTheSmallestFrameLimit() async throws {
        let (pki, agent) = try await AgentProcess.secured(["--synthetic", "1", "--recording-space-mb", "500"])
        defer {
            agent.terminate()
            pki.remove()
        }
        let limit = WireProtocol.minimumMaxFrameLength
        let client = try await agent.connect(pki, maxFrameLength: limit)
        let (device, now) = try await Self.cameraAndClock(client)
        /// The room the agent reports for recordings (of its 500 MiB).
        func room() async throws -> UInt64 {
            var check = WireCheckRecording()
            var track = WireRecordingTrack()
            track.deviceID = device.uniqueID
            check.tracks = [track]
            check.durationNs = 1_000_000_000
            let reply = try await client.request(.checkRecording(check))
            guard case .recordingCheck(let answer) = reply.frame.envelope.body else { throw AgentClientError(.protocolViolation, agent: "agent-1", "no check") }
            return answer.availableBytes
        }
        let roomBefore = try await room()
        #expect(roomBefore == 500 << 20, "an empty recordings folder leaves all the space")
        // Half a second of uncompressed frames: several megabytes in one file.
        var request = Self.recording("fetch-at-the-minimum", of: device, startingAt: now.agentTransmitNs + 300_000_000, frames: 15)
        request.sessionID = "fetch-test"
        request.tracks[0].codec = .raw
        var ended: WireRecordingEnded?
        for try await frame in client.stream(.startRecording(request)) {
            if case .recordingEnded(let end) = frame.envelope.body {
                ended = end
                break
            }
        }
        let file = try #require(ended?.tracks.first?.files.first { $0.name.hasSuffix(".mkv") }, "the recording ended with its video")
        #expect(file.size > 2 * UInt64(limit), "the file needs several chunks: \(file.size) bytes")
        let held = ended?.tracks.flatMap(\.files).reduce(0) { $0 + $1.size } ?? 0
        #expect(try await room() == roomBefore - held, "the room shrinks by what the recording holds")

        var fetch = WireFetchRecordingFile()
        fetch.recordingID = request.recordingID
        fetch.name = file.name
        var received = ByteBuffer()
        var hasher = SHA256()
        var chunks = 0
        for try await frame in client.stream(.fetchRecordingFile(fetch)) {
            guard case .fileChunk(let chunk) = frame.envelope.body else {
                Issue.record("fetch answered \(frame.envelope.messageName)")
                break
            }
            let payload = frame.payload ?? ByteBuffer()
            #expect(chunk.offset == UInt64(received.readableBytes), "chunks follow each other")
            #expect(payload.readableBytes + 1024 <= Int(limit), "a chunk of \(payload.readableBytes) bytes fits the announced \(limit)")
            payload.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
            var copy = payload
            received.writeBuffer(&copy)
            chunks += 1
            if chunk.last { break }
        }
        #expect(UInt64(received.readableBytes) == file.size && chunks >= 3)
        #expect(Data(hasher.finalize()) == file.sha256, "the bytes are the file the agent recorded")

        var acknowledge = WireAcknowledgeRecording()
        acknowledge.recordingID = request.recordingID
        for attempt in 1...2 {
            let reply = try await client.request(.acknowledgeRecording(acknowledge))
            guard case .ok = reply.frame.envelope.body else {
                Issue.record("acknowledgement \(attempt) answered \(reply.frame.envelope.messageName)")
                continue
            }
        }
        #expect(try await room() == roomBefore, "acknowledged files give their room back")
        let gone = try await client.request(.listRecordings(WireListRecordings()))
        if case .recordingList(let recordings) = gone.frame.envelope.body {
            #expect(recordings.recordings.isEmpty, "acknowledged: nothing left on the host")
        }
        await client.close()
    }
    @Test("StopRecording ends a recording at the instant nearest it: the tracks close complete, short of their planned length")
    func stopEndsARecording() async throws {
        let (pki, agent) = try await AgentProcess.secured(["--synthetic", "1"])
        defer {
            agent.terminate()
            pki.remove()
        }
        let client = try await agent.connect(pki)
        let (device, now) = try await Self.cameraAndClock(client)
        // A minute planned: the stop, not the plan, ends it.
        let request = Self.recording("stopped-early", of: device, startingAt: now.agentTransmitNs + 300_000_000, frames: 1800)
        var stop = WireStopRecording()
        stop.recordingID = request.recordingID
        var ended: WireRecordingEnded?
        for try await frame in client.stream(.startRecording(request)) {
            switch frame.envelope.body {
            case .recordingStarted:
                try await Task.sleep(for: .seconds(1))
                _ = try await client.request(.stopRecording(stop))
            case .recordingEnded(let end):
                ended = end
            default:
                break
            }
            if ended != nil { break }
        }
        let recorded = try #require(ended?.tracks.first)
        #expect(recorded.state == .complete, "\(recorded.error)")
        #expect(recorded.frames > 10 && recorded.frames < 120, "about a second of frames, not a minute: \(recorded.frames)")
        await client.close()
    }
    @Test("a StartRecording with absurd times is refused as an invalid argument, and the agent serves on")
    func absurdTimesAreRefused() async throws {
        let (pki, agent) = try await AgentProcess.secured(["--synthetic", "1"])
        defer {
            agent.terminate()
            pki.remove()
        }
        let client = try await agent.connect(pki)
        let (device, _) = try await Self.cameraAndClock(client)
        let track = Self.recording("", of: device, startingAt: 0, frames: 0).tracks[0]
        for (name, period, count, start) in [("forever", 1e18, UInt64(1) << 40, Int64(0)), ("past-the-clock", 1e9 / 30, UInt64(30), Int64.min)] {
            var request = Self.recording(name, of: device, startingAt: start, frames: count)
            request.gridPeriodNs = period
            do {
                for try await _ in client.stream(.startRecording(request)) {}
                Issue.record("\(name): started")
            } catch let error as AgentClientError {
                #expect(error.code == .invalidArgument, "\(name): \(error)")
            }
            var check = WireCheckRecording()
            check.tracks = [track]
            check.durationNs = .max
            do {
                _ = try await client.request(.checkRecording(check))
                Issue.record("a check of \(check.durationNs) ns answered")
            } catch let error as AgentClientError {
                #expect(error.code == .invalidArgument, "\(error)")
            }
        }
        // Still serving, and still the same process.
        _ = try await client.ping()
        #expect(agent.isRunning)
        await client.close()
    }

    /// The agent's first camera and its clock now.
    static func cameraAndClock(_ client: AgentClient) async throws -> (WireDeviceDescription, WireClockProbeReply) {
        let devices = try await client.request(.listDevices(WireListDevices()))
        let probe = try await client.request(.clockProbe(WireClockProbe()))
        guard case .deviceList(let list) = devices.frame.envelope.body, let device = list.devices.first else {
            throw AgentClientError(.protocolViolation, agent: "agent-1", "the agent lists no camera: \(devices.frame.envelope.messageName)")
        }
        guard case .clockProbeReply(let now) = probe.frame.envelope.body else {
            throw AgentClientError(.protocolViolation, agent: "agent-1", "no clock probe reply: \(probe.frame.envelope.messageName)")
        }
        return (device, now)
    }

    /// A recording of `frames` frames at 30 fps from `device` into the file stem "camera", its grid starting
    /// at `start` (agent clock).
    static func recording(_ id: String, of device: WireDeviceDescription, startingAt start: Int64, frames: UInt64) -> WireStartRecording {
        var request = WireStartRecording()
        request.recordingID = id
        var track = WireRecordingTrack()
        track.deviceID = device.uniqueID
        track.fileStem = "camera"
        request.tracks = [track]
        request.startAtNs = start
        request.gridPeriodNs = 1e9 / 30
        request.frameCount = frames
        request.frameDuration.numerator = 1
        request.frameDuration.denominator = 30
        return request
    }
}
