import Crypto

/// The datagrams of the UDP clock channel: fixed-size, big-endian, authenticated with HMAC-SHA256
/// (truncated to 16 bytes) under the key handed out in `ClockChannel`. See PROTOCOL.md, "UDP clock channel".
///
/// ```
/// offset  size  probe (48 bytes)     reply (64 bytes)     follow-up (48 bytes)
///  0       4    magic "CRCK"         magic "CRCK"         magic "CRCK"
///  4       1    version 1            version 1            version 1
///  5       1    kind 1               kind 2               kind 3
///  6       1    flags                flags                0
///  7       1    0                    0                    0
///  8       4    key_id               key_id               key_id
/// 12       4    0                    0                    0
/// 16       8    sequence             sequence (echoed)    sequence (of the reply)
/// 24       8    t1                   t1 (echoed)          t3, the kernel's transmit stamp of the reply
/// 32       8    MAC (16 bytes)       t2                   MAC (16 bytes)
/// 40       8                         t3
/// 48      16                         MAC
/// ```
///
/// Flags: in a probe, `followUps` asks the agent for follow-ups; in a reply, `followUp` says one
/// comes (two-step, as PTP: the reply's own transmit time is known only once it has left).
public struct ClockPacket: Sendable, Equatable {
    public enum Kind: UInt8, Sendable {
        case probe = 1
        case reply = 2
        case followUp = 3

        var length: Int { self == .reply ? ClockPacket.replyLength : ClockPacket.probeLength }
    }

    /// Byte 6 of probes and replies.
    public struct Flags: OptionSet, Sendable, Equatable {
        public var rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        /// Probe: send a follow-up after each reply with the kernel's transmit stamp of the reply.
        public static let followUps = Flags(rawValue: 0x01)
        /// Reply: a follow-up with this reply's kernel transmit stamp comes next.
        public static let followUp = Flags(rawValue: 0x01)
    }

    public static let magic: [UInt8] = Array("CRCK".utf8)
    public static let version: UInt8 = 1
    public static let probeLength = 48
    public static let replyLength = 64
    public static let followUpLength = 48
    public static let macLength = 16

    public var kind: Kind
    public var flags: Flags = []
    public var keyID: UInt32
    public var sequence: UInt64
    /// Coordinator transmit time (t1), echoed by the agent.
    public var t1: Int64
    /// Agent receive and transmit times (replies; follow-ups carry t3 alone).
    public var t2: Int64 = 0
    public var t3: Int64 = 0

    public init(kind: Kind, flags: Flags = [], keyID: UInt32, sequence: UInt64, t1: Int64 = 0, t2: Int64 = 0, t3: Int64 = 0) {
        self.kind = kind
        self.flags = flags
        self.keyID = keyID
        self.sequence = sequence
        self.t1 = t1
        self.t2 = t2
        self.t3 = t3
    }

    /// The datagram, authenticated under `key`.
    public func encoded(key: SymmetricKey) -> [UInt8] {
        var bytes = Self.magic + [Self.version, kind.rawValue, kind == .followUp ? 0 : flags.rawValue, 0]
        Self.append(UInt64(keyID) << 32, to: &bytes)
        Self.append(sequence, to: &bytes)
        Self.append(UInt64(bitPattern: kind == .followUp ? t3 : t1), to: &bytes)
        if kind == .reply {
            Self.append(UInt64(bitPattern: t2), to: &bytes)
            Self.append(UInt64(bitPattern: t3), to: &bytes)
        }
        bytes += Array(HMAC<SHA256>.authenticationCode(for: bytes, using: key)).prefix(Self.macLength)
        return bytes
    }

    /// The key id of a datagram, so the receiver can find the key before authenticating it.
    public static func keyID(of datagram: some Collection<UInt8>) -> UInt32? {
        let bytes = Array(datagram.prefix(16))
        guard bytes.count == 16, Array(bytes[0..<4]) == magic, bytes[4] == version else { return nil }
        return UInt32(read(bytes, at: 8) >> 32)
    }

    /// The sequence number of a datagram of `kind`, so a client can find the probe it answers before
    /// authenticating it.
    public static func sequence(of datagram: [UInt8], kind: Kind) -> UInt64? {
        guard datagram.count == kind.length, datagram.count > 5, datagram[5] == kind.rawValue, keyID(of: datagram) != nil else { return nil }
        return read(datagram, at: 16)
    }

    /// Parses and authenticates a datagram; `nil` for anything malformed, of another kind than
    /// `expected`, or not authenticated under `key` (compared in constant time).
    public static func decode(_ datagram: [UInt8], expected: Kind, key: SymmetricKey) -> ClockPacket? {
        let length = expected.length
        guard datagram.count == length, Array(datagram[0..<4]) == magic, datagram[4] == version, datagram[5] == expected.rawValue else {
            return nil
        }
        let body = datagram[0..<(length - macLength)]
        let full = Array(HMAC<SHA256>.authenticationCode(for: Array(body), using: key))
        var difference: UInt8 = 0
        for index in 0..<macLength { difference |= full[index] ^ datagram[length - macLength + index] }
        guard difference == 0 else { return nil }
        var packet = ClockPacket(
            kind: expected,
            flags: expected == .followUp ? [] : Flags(rawValue: datagram[6]),
            keyID: UInt32(read(datagram, at: 8) >> 32),
            sequence: read(datagram, at: 16)
        )
        if expected == .followUp {
            packet.t3 = Int64(bitPattern: read(datagram, at: 24))
        } else {
            packet.t1 = Int64(bitPattern: read(datagram, at: 24))
        }
        if expected == .reply {
            packet.t2 = Int64(bitPattern: read(datagram, at: 32))
            packet.t3 = Int64(bitPattern: read(datagram, at: 40))
        }
        return packet
    }

    private static func append(_ value: UInt64, to bytes: inout [UInt8]) {
        for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: value >> UInt64(shift))) }
    }

    private static func read(_ bytes: [UInt8], at offset: Int) -> UInt64 {
        var value: UInt64 = 0
        for index in offset..<(offset + 8) { value = value << 8 | UInt64(bytes[index]) }
        return value
    }
}
