import CamRigWire
import Crypto
import Testing

/// The UDP clock channel's datagrams: exact layout, authentication, and refusal of anything else.
@Suite("UDP clock channel datagrams", .timeLimit(.minutes(1)))
struct ClockPacketTests {
    let key = SymmetricKey(size: .bits256)

    @Test("a probe and a reply survive encoding under the right key, at the documented sizes")
    func roundTrip() throws {
        let probe = ClockPacket(kind: .probe, keyID: 0xDEAD_BEEF, sequence: 42, t1: -7)
        let probeBytes = probe.encoded(key: key)
        #expect(probeBytes.count == ClockPacket.probeLength)
        #expect(Array(probeBytes.prefix(6)) == Array("CRCK".utf8) + [1, 1])
        #expect(ClockPacket.keyID(of: probeBytes) == 0xDEAD_BEEF)
        #expect(ClockPacket.decode(probeBytes, expected: .probe, key: key) == probe)

        let reply = ClockPacket(kind: .reply, keyID: 7, sequence: .max, t1: 1, t2: .max, t3: .min)
        let replyBytes = reply.encoded(key: key)
        #expect(replyBytes.count == ClockPacket.replyLength)
        #expect(ClockPacket.decode(replyBytes, expected: .reply, key: key) == reply)
    }

    @Test("flags and the follow-up: byte 6 carries the flags, a follow-up carries t3 at offset 24, and a probe is never taken for a follow-up of the same length")
    func followUps() throws {
        let probe = ClockPacket(kind: .probe, flags: .followUps, keyID: 5, sequence: 8, t1: 11)
        let probeBytes = probe.encoded(key: key)
        #expect(probeBytes[6] == 0x01)
        #expect(ClockPacket.decode(probeBytes, expected: .probe, key: key)?.flags == .followUps)

        let reply = ClockPacket(kind: .reply, flags: .followUp, keyID: 5, sequence: 8, t1: 11, t2: 20, t3: 30)
        #expect(ClockPacket.decode(reply.encoded(key: key), expected: .reply, key: key)?.flags == .followUp)

        let followUp = ClockPacket(kind: .followUp, keyID: 5, sequence: 8, t3: 31)
        let bytes = followUp.encoded(key: key)
        #expect(bytes.count == ClockPacket.followUpLength)
        #expect(bytes[5] == 3 && bytes[6] == 0)
        #expect(Array(bytes[24..<32]) == [0, 0, 0, 0, 0, 0, 0, 31])
        let decoded = try #require(ClockPacket.decode(bytes, expected: .followUp, key: key))
        #expect(decoded.t3 == 31 && decoded.sequence == 8 && decoded.t1 == 0)
        #expect(ClockPacket.decode(bytes, expected: .probe, key: key) == nil)
        #expect(ClockPacket.decode(probeBytes, expected: .followUp, key: key) == nil)
        #expect(ClockPacket.sequence(of: bytes, kind: .probe) == nil)
        #expect(ClockPacket.sequence(of: bytes, kind: .followUp) == 8)
    }

    @Test("every single flipped bit, another key, another kind or another length is refused")
    func forgeries() {
        let bytes = ClockPacket(kind: .reply, keyID: 9, sequence: 3, t1: 100, t2: 200, t3: 300).encoded(key: key)
        for index in bytes.indices {
            for bit in 0..<8 {
                var forged = bytes
                forged[index] ^= 1 << bit
                #expect(ClockPacket.decode(forged, expected: .reply, key: key) == nil, "byte \(index) bit \(bit) went unnoticed")
            }
        }
        #expect(ClockPacket.decode(bytes, expected: .reply, key: SymmetricKey(size: .bits256)) == nil)
        #expect(ClockPacket.decode(bytes, expected: .probe, key: key) == nil)
        #expect(ClockPacket.decode(Array(bytes.dropLast()), expected: .reply, key: key) == nil)
        #expect(ClockPacket.decode(bytes + [0], expected: .reply, key: key) == nil)
    }

    @Test("short or foreign datagrams have no key id (and never trap)")
    func shortInput() {
        for length in 0..<20 {
            let datagram = Array("CRCK".utf8) + [1, 1] + [UInt8](repeating: 0xAB, count: max(0, length - 6))
            let id = ClockPacket.keyID(of: datagram.prefix(length))
            #expect(length < 16 ? id == nil : id == 0xABAB_ABAB)
        }
        #expect(ClockPacket.keyID(of: [UInt8](repeating: 0, count: 64)) == nil)
    }
}
