import CamRigCoordinator
import CamRigDevices
import CamRigSecurity
import CamRigTestSupport
import CamRigWire
import Foundation
import NIOCore
import Testing

/// Streaming from a real agent process with synthetic cameras.
@Suite("Streaming over the wire", .timeLimit(.minutes(3)))
struct StreamingTests {
    func start(_ device: String, maxQueued: UInt32 = 0) -> WireEnvelope.OneOf_Body {
        var start = WireStartStream()
        start.deviceID = device
        start.maxQueuedFrames = maxQueued
        return .startStream(start)
    }

    @Test("frames arrive in order with their device timestamp, format and pixels; stop ends the stream with counts")
    func stream() async throws {
        let (pki, agent) = try await AgentProcess.secured(["--synthetic", "1"])
        defer {
            agent.terminate()
            pki.remove()
        }
        let client = try await agent.connect(pki, as: "viewer-1")
        var streamID = ""
        var frames: [(WireVideoFrame, ByteBuffer)] = []
        var ended: WireStreamEnded?
        for try await message in client.stream(start("synthetic:SYN0001")) {
            switch message.envelope.body {
            case .streamStarted(let started):
                streamID = started.streamID
                #expect(started.format.id == "YUYV-640x480")
            case .videoFrame(let frame):
                frames.append((frame, message.payload ?? ByteBuffer()))
                if frames.count == 30 {
                    var stop = WireStopStream()
                    stop.streamID = streamID
                    _ = try await client.request(.stopStream(stop))
                }
            case .streamEnded(let end):
                ended = end
            default:
                Issue.record("unexpected \(message.envelope.messageName)")
            }
        }
        #expect(frames.count >= 30)
        let sequences = frames.map(\.0.sequence)
        let firstSequence = try #require(sequences.first, "no video frame arrived")
        #expect(sequences == Array(firstSequence..<(firstSequence + UInt64(frames.count))))
        for (frame, payload) in frames {
            #expect(frame.streamID == streamID)
            #expect(frame.timestamp.clock == .agentMonotonic)
            #expect(frame.timestamp.marks == .startOfExposure)
            #expect(frame.dimensions.width == 640 && frame.bytesPerLine == 1280)
            #expect(payload.readableBytes == 640 * 480 * 2)
            let header = try #require(SyntheticFrameHeader.decode(payload, format: .yuyv))
            #expect(header.sequence == frame.sequence)
            #expect(header.timestamp == frame.timestamp.nanoseconds)
        }
        #expect(ended?.reason == .stopped)
        #expect(ended?.framesSent == UInt64(frames.count))
        await client.close()
    }

    @Test("two clients watching one device get the same frames")
    func fanOut() async throws {
        let (pki, agent) = try await AgentProcess.secured(["--synthetic", "1"])
        defer {
            agent.terminate()
            pki.remove()
        }
        let a = try await agent.connect(pki)
        let b = try await agent.connect(pki, as: "viewer-1")
        func sequences(_ client: AgentClient) async throws -> Set<UInt64> {
            var seen = Set<UInt64>()
            for try await message in client.stream(start("synthetic:SYN0001")) {
                if case .videoFrame(let frame) = message.envelope.body { seen.insert(frame.sequence) }
                if seen.count == 40 { break }
            }
            return seen
        }
        async let first = sequences(a)
        async let second = sequences(b)
        let (x, y) = try await (first, second)
        #expect(x.intersection(y).count >= 20, "both watch the same device stream")
        await a.close()
        await b.close()
    }

    @Test("a client that stops reading 1080p frames: agent memory stays bounded, and the stream says what was dropped")
    func slowClient() async throws {
        let (pki, agent) = try await AgentProcess.secured(["--synthetic", "1", "--log-level", "notice"])
        defer {
            agent.terminate()
            pki.remove()
        }
        // Put the camera in 1920x1080 YUYV (4 MB frames) at 30 fps.
        let coordinator = try await agent.connect(pki)
        var lock = WireLock()
        lock.deviceID = "synthetic:SYN0001"
        let answer = try await coordinator.request(.lock(lock)).frame.envelope
        guard case .lease(let lease) = answer.body else {
            Issue.record("expected a lease in reply to lock, got \(answer.messageName)")
            return
        }
        var configure = WireConfigure()
        configure.deviceID = "synthetic:SYN0001"
        configure.leaseID = lease.lease.leaseID
        configure.formatID = "YUYV-1920x1080"
        _ = try await coordinator.request(.configure(configure))
        let baseline = try #require(agent.residentKilobytes)

        let peak = PeakMemory()
        let exchange = try await RawPeer.exchange(
            port: agent.port,
            transport: .tls(directory: pki.directory, name: "viewer-1"),
            chunks: [RawPeer.hello, RawPeer.frame(requestID: 2, start("synthetic:SYN0001", maxQueued: 2))],
            timeout: .seconds(2),
            stopReadingFor: .seconds(4),
            whilePaused: { peak.record(agent.residentKilobytes ?? 0) }
        )
        let growth = peak.value - baseline
        // 120 frames of 4 MB were captured during the pause; unbounded queueing would take ~480 MB.
        #expect(growth < 96 * 1024, "agent resident memory grew by \(growth) KiB while the client did not read")
        let frames = exchange.frames.compactMap { frame -> WireVideoFrame? in
            if case .videoFrame(let video) = frame.envelope.body { return video }
            return nil
        }
        #expect(!frames.isEmpty)
        let dropped = frames.reduce(0) { $0 + $1.droppedBefore }
        #expect(dropped > 0, "frames dropped for the stalled client are reported")
        // Sequence gaps are exactly the reported drops.
        for (next, previous) in zip(frames.dropFirst(), frames) {
            #expect(next.sequence - previous.sequence - 1 == next.droppedBefore)
        }
        _ = try await coordinator.ping()
        await coordinator.close()
    }
}

/// The highest resident memory seen.
final class PeakMemory: @unchecked Sendable {
    private let lock = NSLock()
    private var highest = 0
    func record(_ kilobytes: Int) { lock.lock(); highest = max(highest, kilobytes); lock.unlock() }
    var value: Int { lock.lock(); defer { lock.unlock() }; return highest }
}
