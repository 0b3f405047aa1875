import CamRigDeviceModel
import CamRigDevices
import CamRigTestSupport
import CamRigWire
import NIOCore
import Testing

@Suite("Agent connection under random input", .timeLimit(.minutes(3)))
struct RandomInputTests {
    /// Random bytes, sometimes shaped like frames: plausible lengths, real envelopes with flipped bits.
    static func randomStream(_ rng: inout SeededRandom) -> [[UInt8]] {
        var chunks: [[UInt8]] = []
        if Bool.random(using: &rng) { chunks.append(RawPeer.hello) }
        for _ in 0..<Int.random(in: 1...4, using: &rng) {
            switch Int.random(in: 0..<3, using: &rng) {
            case 0:
                chunks.append((0..<Int.random(in: 1...64, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) })
            case 1:
                let body = (0..<Int.random(in: 0...40, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
                let envelopeLength = UInt32.random(in: 0...UInt32(body.count), using: &rng)
                var frame: [UInt8] = []
                withUnsafeBytes(of: UInt32(4 + body.count).bigEndian) { frame += $0 }
                withUnsafeBytes(of: envelopeLength.bigEndian) { frame += $0 }
                chunks.append(frame + body)
            default:
                var frame = RawPeer.frame(requestID: UInt64.random(in: 0...3, using: &rng), .ping(.init()))
                let index = Int.random(in: 0..<frame.count, using: &rng)
                frame[index] ^= UInt8(1) << UInt8.random(in: 0...7, using: &rng)
                chunks.append(frame)
            }
        }
        return chunks
    }

    @Test("random byte streams never crash the agent: it answers, waits, or sends one fatal error and closes")
    func randomStreams() throws {
        var rng = SeededRandom(seed: 0xCA3_1A6)
        var closed = 0
        for _ in 0..<3000 {
            let connection = try EmbeddedAgentConnection()
            for chunk in Self.randomStream(&rng) where connection.isOpen {
                try connection.send(chunk)
            }
            let frames = try connection.received()
            let isFatal: (WireFrame) -> Bool = { if case .error(let error) = $0.envelope.body { error.fatal } else { false } }
            #expect(frames.filter(isFatal).count <= 1)
            if let index = frames.firstIndex(where: isFatal) {
                #expect(index == frames.count - 1, "nothing may follow a fatal error")
                #expect(!connection.isOpen)
                closed += 1
            } else if !connection.isOpen {
                Issue.record("closed without telling the client why")
            }
            try? connection.channel.close().wait()
        }
        #expect(closed > 1000, "the generator should mostly produce invalid streams (\(closed) closed)")
    }
}
