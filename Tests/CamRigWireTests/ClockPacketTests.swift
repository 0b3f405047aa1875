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
