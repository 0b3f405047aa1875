import CamRigClockSocket
import CamRigClock
import CamRigWire
import Crypto
import Foundation
import NIOConcurrencyHelpers
import NIOCore

/// The coordinator's end of the UDP clock channel: one socket per address family for every agent,
/// a receive thread that stamps replies with the kernel's receive time (t4), and probes matched to
/// replies by sequence number and authenticated with each agent's key.
///
/// A family's socket and its thread exist while probes do: once no probe has been pending for
/// `idleLifetime`, the thread closes the socket and ends; the next probe opens a new one.
public final class ClockChannelClient: Sendable {
    /// Where an agent's channel is, and its key (from `ClockChannel`).
    public struct Channel: Sendable {
        public var address: sockaddr_storage
        public var addressLength: socklen_t
        public var keyID: UInt32
        public var key: SymmetricKey
        public var kernelTimestamps: Bool

        /// The channel of an agent at `remote` (its TLS peer address) as `ClockChannel` describes it.
        public init(remote: SocketAddress, channel: WireClockChannel) throws {
            guard let ip = remote.ipAddress else { throw AgentClientError(.protocolViolation, agent: "\(remote)", "has no IP address for a UDP clock channel") }
            let target = try SocketAddress(ipAddress: ip, port: Int(channel.port))
            var storage = sockaddr_storage()
            let length = target.withSockAddr { pointer, size in
                withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: UnsafeRawBufferPointer(start: pointer, count: size)) }
                return size
            }
            guard channel.key.count == 32 else { throw AgentClientError(.protocolViolation, agent: "\(remote)", "clock channel key is \(channel.key.count) bytes, not 32") }
            address = storage
            addressLength = socklen_t(length)
            keyID = channel.keyID
            key = SymmetricKey(data: channel.key)
            kernelTimestamps = channel.kernelTimestamps
        }
    }

    /// What one probe measured.
    public struct ProbeResult: Sendable {
        public var sample: ClockSample
        /// t2 and t4 are the kernel's receive stamps.
        public var receiveStamped: Bool
        /// t1 and t3 are the kernel's transmit stamps (t3 from the agent's follow-up).
        public var transmitStamped: Bool
    }

    private struct Pending: Sendable {
        var keyID: UInt32
        var key: SymmetricKey
        var deadline: Int64
        var continuation: CheckedContinuation<ProbeResult, any Error>
        /// The probe as handed to the kernel: the counter of its transmit stamp.
        var sent: TimestampingUDPSocket.Sent?
        /// The reply, while its follow-up is awaited.
        var reply: (packet: ClockPacket, t1: Int64?, t4: Int64, receiveStamped: Bool)?
    }

    /// The process's clock channel client.
    public static let shared = ClockChannelClient()

    private let pending = NIOLockedValueBox<[UInt64: Pending]>([:])
    private let nextSequence = NIOLockedValueBox<UInt64>(UInt64.random(in: 1...UInt64.max / 2))
    private let sockets = NIOLockedValueBox<[Int32: TimestampingUDPSocket]>([:])

    /// How long a reply that announced a follow-up waits for it before it counts without it.
    static let followUpWait: Int64 = 20_000_000

    private init() {}

    /// One probe; returns the four timestamps and which of them the kernel took.
    ///
    /// - Throws: `AgentClientError(.timeout)` when no authenticated reply comes within `timeout`.
    public func probe(_ channel: Channel, agent: String, timeout: Duration = .seconds(1)) async throws -> ProbeResult {
        let sequence = nextSequence.withLockedValue { value -> UInt64 in
            value &+= 1
            return value
        }
        return try await withCheckedThrowingContinuation { continuation in
            let deadline = HostClock.monotonicNow() + timeout.nanoseconds
            do {
                // Under the sockets' lock, so an idle thread cannot retire the socket in between; the send
                // under the probes' lock, so a reply cannot be matched before its probe's counter is known.
                try sockets.withLockedValue { sockets in
                    let socket = try self.socket(family: Int32(channel.address.ss_family), in: &sockets)
                    pending.withLockedValue { pending in
                        let probe = ClockPacket(kind: .probe, flags: .followUps, keyID: channel.keyID, sequence: sequence, t1: HostClock.monotonicNow())
                        guard let sent = socket.send(probe.encoded(key: channel.key), to: channel.address, length: channel.addressLength) else {
                            continuation.resume(throwing: AgentClientError(.connectFailed, agent: agent, "cannot send a UDP clock probe: \(String(cString: strerror(errno)))"))
                            return
                        }
                        pending[sequence] = Pending(keyID: channel.keyID, key: channel.key, deadline: deadline, continuation: continuation, sent: sent)
                    }
                }
            } catch {
                continuation.resume(throwing: error)
            }
        }
    }

    /// The receive buffer asked for: replies and follow-ups of a thousand agents probed in the same
    /// few milliseconds (about 2 KiB of buffer each) must fit while the receive thread waits for a core.
    static let receiveBufferBytes: Int32 = 4 << 20

    /// How long a socket and its thread outlive the last pending probe.
    static let idleLifetime: Int64 = 5_000_000_000

    private func socket(family: Int32, in sockets: inout [Int32: TimestampingUDPSocket]) throws -> TimestampingUDPSocket {
        if let socket = sockets[family] { return socket }
        let socket = try TimestampingUDPSocket(
            host: family == AF_INET6 ? "::" : "0.0.0.0", port: 0, receiveTimeout: .milliseconds(20), transmitTimestamps: true,
            receiveBufferBytes: Self.receiveBufferBytes)
        sockets[family] = socket
        let thread = Thread { [self] in self.receive(on: socket, family: family) }
        thread.name = "camrig-clock-udp"
        thread.qualityOfService = .userInteractive
        thread.start()
        return socket
    }

    /// Matches replies and follow-ups to probes and expires probes past their deadline, until no probe
    /// has been pending for `idleLifetime`.
    private func receive(on socket: TimestampingUDPSocket, family: Int32) {
        var busyAt = HostClock.monotonicNow()
        // Transmit stamps by send counter, read off the error queue every turn (it shares the
        // socket's receive budget, so it must not fill up).
        var stamps: [UInt32: Int64] = [:]
        while true {
            let datagram = socket.receive()
            stamps.merge(socket.transmitStamps()) { _, new in new }
            if let datagram, let keyID = ClockPacket.keyID(of: datagram.bytes) {
                let finished = pending.withLockedValue { pending -> (Pending, ProbeResult)? in
                    if let sequence = ClockPacket.sequence(of: datagram.bytes, kind: .reply), var entry = pending[sequence], entry.keyID == keyID,
                        entry.reply == nil, let reply = ClockPacket.decode(datagram.bytes, expected: .reply, key: entry.key), reply.sequence == sequence
                    {
                        // t1: the kernel's stamp of the probe, when it has one that fits its send.
                        let t1 = entry.sent?.key.flatMap { stamps.removeValue(forKey: $0) }.flatMap { stamp in
                            stamp >= entry.sent!.before && stamp - entry.sent!.before < 100_000_000 ? stamp : nil
                        }
                        let receiveStamped = datagram.kernelStamped
                        if reply.flags.contains(.followUp) {
                            entry.reply = (reply, t1, datagram.receivedAt, receiveStamped)
                            entry.deadline = min(entry.deadline, HostClock.monotonicNow() + Self.followUpWait)
                            pending[sequence] = entry
                            return nil
                        }
                        pending.removeValue(forKey: sequence)
                        return (entry, Self.result(reply, t1: t1, t3: nil, t4: datagram.receivedAt, receiveStamped: receiveStamped))
                    }
                    if let sequence = ClockPacket.sequence(of: datagram.bytes, kind: .followUp), let entry = pending[sequence], entry.keyID == keyID,
                        let (reply, t1, t4, receiveStamped) = entry.reply,
                        let followUp = ClockPacket.decode(datagram.bytes, expected: .followUp, key: entry.key), followUp.sequence == sequence
                    {
                        pending.removeValue(forKey: sequence)
                        return (entry, Self.result(reply, t1: t1, t3: followUp.t3, t4: t4, receiveStamped: receiveStamped))
                    }
                    return nil
                }
                if let (entry, result) = finished { entry.continuation.resume(returning: result) }
            }
            let now = HostClock.monotonicNow()
            let expired = pending.withLockedValue { pending -> [Pending] in
                let late = pending.filter { $0.value.deadline <= now }
                for key in late.keys { pending.removeValue(forKey: key) }
                return Array(late.values)
            }
            for entry in expired {
                if let (reply, t1, t4, receiveStamped) = entry.reply {
                    // The follow-up was lost: the reply counts with its own, earlier, t3.
                    entry.continuation.resume(returning: Self.result(reply, t1: t1, t3: nil, t4: t4, receiveStamped: receiveStamped))
                } else {
                    entry.continuation.resume(throwing: AgentClientError(.timeout, agent: "udp", "no answer to a UDP clock probe"))
                }
            }
            if stamps.count > 4096 { stamps.removeAll() }
            if pending.withLockedValue({ !$0.isEmpty }) {
                busyAt = now
            } else if now - busyAt > Self.idleLifetime {
                let retired = sockets.withLockedValue { sockets -> Bool in
                    guard pending.withLockedValue({ $0.isEmpty }) else { return false }
                    sockets.removeValue(forKey: family)
                    return true
                }
                // The socket closes when this thread lets go of it.
                if retired { return }
                busyAt = now
            }
        }
    }

    /// A probe's result: t1 and t3 the kernel's transmit stamps where both are known, else the
    /// readings each side took before sending (never one of each: their errors would not cancel).
    private static func result(_ reply: ClockPacket, t1: Int64?, t3: Int64?, t4: Int64, receiveStamped: Bool) -> ProbeResult {
        let stamped = t1 != nil && t3 != nil
        let sample = ClockSample(
            coordinatorTransmit: stamped ? t1! : reply.t1, agentReceive: reply.t2,
            agentTransmit: stamped ? t3! : reply.t3, coordinatorReceive: t4)
        return ProbeResult(sample: sample, receiveStamped: receiveStamped, transmitStamped: stamped)
    }
}
