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
///
/// The keys, the socket and whether it runs are one `State` under one lock; the serving thread keeps
/// its own count of dropped datagrams.
public final class ClockChannelServer: Sendable {
    private struct Key: Sendable {
        var key: SymmetricKey
        var connection: UInt64
    }

    private let clock: HostClock
    private let logger: Logger

    private struct State: Sendable {
        var keys: [UInt32: Key] = [:]
        /// The bound socket, while the channel runs.
        var socket: TimestampingUDPSocket?
        var running = false
    }

    private let state = NIOLockedValueBox(State())

    public init(clock: HostClock, logger: Logger) {
        self.clock = clock
        self.logger = logger
    }

    /// Binds UDP `host:port` and starts answering. Failure is logged: clients then probe over TLS.
    func start(host: String, port: Int) {
        do {
            let bound = try TimestampingUDPSocket(host: host, port: port, transmitTimestamps: true)
            state.withLockedValue {
                $0.socket = bound
                $0.running = true
            }
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
        state.withLockedValue { $0.running = false }
    }

    /// A new key for `connection`, or `nil` when the channel is not running.
    func open(connection: UInt64) -> WireClockChannel? {
        let key = SymmetricKey(size: .bits256)
        let opened = state.withLockedValue { state -> (UInt32, TimestampingUDPSocket)? in
            guard let bound = state.socket, state.running else { return nil }
            // One key per connection: a new OpenClockChannel replaces (and so revokes) the previous key.
            state.keys = state.keys.filter { $0.value.connection != connection }
            var id = UInt32.random(in: 1...UInt32.max)
            while state.keys[id] != nil { id = UInt32.random(in: 1...UInt32.max) }
            state.keys[id] = Key(key: key, connection: connection)
            return (id, bound)
        }
        guard let (id, bound) = opened else { return nil }
        var channel = WireClockChannel()
        channel.port = UInt32(bound.localPort)
        channel.keyID = id
        channel.key = key.withUnsafeBytes { Data($0) }
        channel.kernelTimestamps = bound.kernelTimestamps
        return channel
    }

    /// The connection closed: its keys stop working.
    func connectionClosed(_ connection: UInt64) {
        state.withLockedValue { $0.keys = $0.keys.filter { $0.value.connection != connection } }
    }

    private func serve(_ socket: TimestampingUDPSocket) {
        var dropped = 0
        while state.withLockedValue({ $0.running }) {
            guard let datagram = socket.receive() else { continue }
            let t2 = clock.reading(atMonotonic: datagram.receivedAt)
            guard let keyID = ClockPacket.keyID(of: datagram.bytes),
                let key = state.withLockedValue({ $0.keys[keyID]?.key }),
                let probe = ClockPacket.decode(datagram.bytes, expected: .probe, key: key)
            else {
                dropped += 1
                if dropped.nonzeroBitCount == 1 {
                    logger.notice("dropped clock datagrams that were malformed or not authenticated", metadata: ["total": "\(dropped)"])
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
