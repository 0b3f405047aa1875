import CamRigWire
import Crypto

private let key = SymmetricKey(data: [UInt8](repeating: 7, count: 32))

/// The UDP clock channel's datagram parser on arbitrary datagrams: nothing but a datagram built with
/// the key is accepted, and an accepted one says what was built.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzClockPacket(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let bytes = Array(UnsafeRawBufferPointer(start: start, count: count))
    _ = ClockPacket.keyID(of: bytes)
    for kind in [ClockPacket.Kind.probe, .reply, .followUp] {
        _ = ClockPacket.sequence(of: bytes, kind: kind)
        if let packet = ClockPacket.decode(bytes, expected: kind, key: key) {
            // Only possible if the input carries a valid MAC under the key: then it re-encodes to itself.
            precondition(packet.encoded(key: key) == bytes, "a datagram decoded to something else")
        }
    }
    // A datagram made from the input's numbers, then damaged at one place, must not verify.
    guard bytes.count >= 17 else { return 0 }
    let words = bytes.withUnsafeBytes { ($0.loadUnaligned(fromByteOffset: 0, as: UInt64.self), $0.loadUnaligned(fromByteOffset: 8, as: UInt64.self)) }
    let packet = ClockPacket(kind: .probe, keyID: UInt32(truncatingIfNeeded: words.0), sequence: words.1, t1: Int64(bitPattern: words.0))
    var datagram = packet.encoded(key: key)
    precondition(ClockPacket.decode(datagram, expected: .probe, key: key) == packet)
    let index = Int(bytes[16]) % datagram.count
    datagram[index] ^= 0x01
    precondition(ClockPacket.decode(datagram, expected: .probe, key: key) == nil, "a damaged datagram verified")
    return 0
}
