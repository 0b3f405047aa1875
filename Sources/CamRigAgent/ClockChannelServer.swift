import CamRigClockSocket
import CamRigClock
import CamRigDevices
import CamRigWire
import Crypto
import Foundation
import Logging
import NIOConcurrencyHelpers

/// The agent's end of the UDP clock channel: answers authenticated clock probes on its own thread,
/// with t2 from the kernel's receive timestamp, away from event loops and TLS. A probe that asks for
/// follow-ups gets, after its reply, the reply's kernel transmit stamp as t3 (two-step): the reply's
/// own t3 is read before its MAC is computed and it is sent, so it is early by that work.
///
/// Each TLS connection that asks (`OpenClockChannel`) gets a key of its own, forgotten when it closes;
/// datagrams under no current key, malformed or forged, are dropped without an answer.
public final class ClockChannelServer: Sendable {
    private struct Key: Sendable {
        var key: SymmetricKey
        var connection: UInt64
    }

    private let clock: HostClock
    private let logger: Logger
    private let keys = NIOLockedValueBox<[UInt32: Key]>([:])
    private let socket = NIOLockedValueBox<TimestampingUDPSocket?>(nil)
    private let running = NIOLockedValueBox(false)
    private let dropped = NIOLockedValueBox(0)

    public init(clock: HostClock, logger: Logger) {
        self.clock = clock
        self.logger = logger
    }

    /// Binds UDP `host:port` and starts answering. Failure is logged: clients then probe over TLS.
    func start(host: String, port: Int) {
        do {
            let bound = try TimestampingUDPSocket(host: host, port: port, transmitTimestamps: true)
            socket.withLockedValue { $0 = bound }
            running.withLockedValue { $0 = true }
            let thread = Thread { [self] in self.serve(bound) }
            thread.name = "camrig-clock-udp"
            thread.qualityOfService = .userInteractive
            thread.start()
            logger.info("clock channel listening", metadata: ["udp": "\(host):\(bound.localPort)", "kernel_timestamps": "\(bound.kernelTimestamps)", "transmit_timestamps": "\(bound.transmitTimestamps)"])
        } catch {
            logger.warning("no UDP clock channel; clients will probe over TLS", metadata: ["error": "\(error)"])
        }
    }

    func stop() {
        running.withLockedValue { $0 = false }
    }

    /// A new key for `connection`, or `nil` when the channel is not running.
    func open(connection: UInt64) -> WireClockChannel? {
        guard let bound = socket.withLockedValue({ $0 }), running.withLockedValue({ $0 }) else { return nil }
        let key = SymmetricKey(size: .bits256)
        let id = keys.withLockedValue { keys -> UInt32 in
            // One key per connection: a new OpenClockChannel replaces (and so revokes) the previous key.
            keys = keys.filter { $0.value.connection != connection }
            var id = UInt32.random(in: 1...UInt32.max)
            while keys[id] != nil { id = UInt32.random(in: 1...UInt32.max) }
            keys[id] = Key(key: key, connection: connection)
            return id
        }
        var channel = WireClockChannel()
        channel.port = UInt32(bound.localPort)
        channel.keyID = id
        channel.key = key.withUnsafeBytes { Data($0) }
        channel.kernelTimestamps = bound.kernelTimestamps
        return channel
    }

    /// The connection closed: its keys stop working.
    func connectionClosed(_ connection: UInt64) {
        keys.withLockedValue { keys in keys = keys.filter { $0.value.connection != connection } }
    }

    private func serve(_ socket: TimestampingUDPSocket) {
        while running.withLockedValue({ $0 }) {
            guard let datagram = socket.receive() else { continue }
            let t2 = clock.reading(atMonotonic: datagram.receivedAt)
            guard let keyID = ClockPacket.keyID(of: datagram.bytes),
                let key = keys.withLockedValue({ $0[keyID]?.key }),
                let probe = ClockPacket.decode(datagram.bytes, expected: .probe, key: key)
            else {
                let count = dropped.withLockedValue { count -> Int in
                    count += 1
                    return count
                }
                if count.nonzeroBitCount == 1 {
                    logger.notice("dropped clock datagrams that were malformed or not authenticated", metadata: ["total": "\(count)"])
                }
                continue
            }
            logger.trace("clock probe", metadata: ["kernel_stamped": "\(datagram.kernelStamped)", "woke_after_ns": "\(HostClock.monotonicNow() - datagram.receivedAt)"])
            let followUp = probe.flags.contains(.followUps) && socket.transmitTimestamps
            var reply = ClockPacket(kind: .reply, flags: followUp ? .followUp : [], keyID: keyID, sequence: probe.sequence, t1: probe.t1, t2: t2)
            reply.t3 = clock.now()
            guard let sent = socket.send(reply.encoded(key: key), to: datagram.sender, length: datagram.senderLength), followUp else { continue }
            // Stamps of earlier sends (follow-ups, replies whose stamp came late) are read and let go here.
            guard let counter = sent.key, let left = socket.transmitStamp(of: counter, wait: .milliseconds(2)) else { continue }
            let precise = ClockPacket(kind: .followUp, keyID: keyID, sequence: probe.sequence, t3: clock.reading(atMonotonic: left))
            socket.send(precise.encoded(key: key), to: datagram.sender, length: datagram.senderLength)
        }
    }
}
