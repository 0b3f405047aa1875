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

    private struct Pending: Sendable {
        var keyID: UInt32
        var key: SymmetricKey
        var deadline: Int64
        var continuation: CheckedContinuation<(ClockSample, Bool), any Error>
    }

    /// The process's clock channel client.
    public static let shared = ClockChannelClient()

    private let pending = NIOLockedValueBox<[UInt64: Pending]>([:])
    private let nextSequence = NIOLockedValueBox<UInt64>(UInt64.random(in: 1...UInt64.max / 2))
    private let sockets = NIOLockedValueBox<[Int32: TimestampingUDPSocket]>([:])

    private init() {}

    /// One probe; returns the four timestamps and whether t4 is the kernel's receive timestamp.
    ///
    /// - Throws: `AgentClientError(.timeout)` when no authenticated reply comes within `timeout`.
    public func probe(_ channel: Channel, agent: String, timeout: Duration = .seconds(1)) async throws -> (ClockSample, Bool) {
        let sequence = nextSequence.withLockedValue { value -> UInt64 in
            value &+= 1
            return value
        }
        return try await withCheckedThrowingContinuation { continuation in
            let deadline = HostClock.monotonicNow() + timeout.nanoseconds
            let socket: TimestampingUDPSocket
            do {
                // Taken together with registering the probe, so an idle thread cannot retire the socket in between.
                socket = try sockets.withLockedValue { sockets in
                    let socket = try self.socket(family: Int32(channel.address.ss_family), in: &sockets)
                    pending.withLockedValue { $0[sequence] = Pending(keyID: channel.keyID, key: channel.key, deadline: deadline, continuation: continuation) }
                    return socket
                }
            } catch {
                continuation.resume(throwing: error)
                return
            }
            let probe = ClockPacket(kind: .probe, keyID: channel.keyID, sequence: sequence, t1: HostClock.monotonicNow())
            if !socket.send(probe.encoded(key: channel.key), to: channel.address, length: channel.addressLength) {
                if let entry = pending.withLockedValue({ $0.removeValue(forKey: sequence) }) {
                    entry.continuation.resume(throwing: AgentClientError(.connectFailed, agent: agent, "cannot send a UDP clock probe: \(String(cString: strerror(errno)))"))
                }
            }
        }
    }

    /// How long a socket and its thread outlive the last pending probe.
    static let idleLifetime: Int64 = 5_000_000_000

    private func socket(family: Int32, in sockets: inout [Int32: TimestampingUDPSocket]) throws -> TimestampingUDPSocket {
        if let socket = sockets[family] { return socket }
        let socket = try TimestampingUDPSocket(host: family == AF_INET6 ? "::" : "0.0.0.0", port: 0, receiveTimeout: .milliseconds(100))
        sockets[family] = socket
        let thread = Thread { [self] in self.receive(on: socket, family: family) }
        thread.name = "camrig-clock-udp"
        thread.qualityOfService = .userInteractive
        thread.start()
        return socket
    }

    /// Matches replies to probes and expires probes past their deadline, until no probe has been pending
    /// for `idleLifetime`.
    private func receive(on socket: TimestampingUDPSocket, family: Int32) {
        var busyAt = HostClock.monotonicNow()
        while true {
            if let datagram = socket.receive(), let sequence = ClockPacket.sequence(of: datagram.bytes, kind: .reply),
                let keyID = ClockPacket.keyID(of: datagram.bytes)
            {
                let match = pending.withLockedValue { pending -> (Pending, ClockPacket)? in
                    guard let entry = pending[sequence], entry.keyID == keyID,
                        let reply = ClockPacket.decode(datagram.bytes, expected: .reply, key: entry.key), reply.sequence == sequence
                    else { return nil }
                    pending.removeValue(forKey: sequence)
                    return (entry, reply)
                }
                if let (entry, reply) = match {
                    let sample = ClockSample(coordinatorTransmit: reply.t1, agentReceive: reply.t2, agentTransmit: reply.t3, coordinatorReceive: datagram.receivedAt)
                    entry.continuation.resume(returning: (sample, datagram.kernelStamped))
                }
            }
            let now = HostClock.monotonicNow()
            let expired = pending.withLockedValue { pending -> [Pending] in
                let late = pending.filter { $0.value.deadline <= now }
                for key in late.keys { pending.removeValue(forKey: key) }
                return Array(late.values)
            }
            for entry in expired {
                entry.continuation.resume(throwing: AgentClientError(.timeout, agent: "udp", "no answer to a UDP clock probe"))
            }
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
}
