import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#endif

/// A hostile peer without a certificate: keeps many TCP connections open to an agent from many loopback
/// source addresses (`127.0.1.x`), each idle or trickling the first bytes of a TLS ClientHello, and
/// opens a new one whenever the agent closes one. It never completes a handshake.
public final class ConnectionFlood: Sendable {
    /// What the flood did.
    public struct Tally: Sendable {
        /// Connections opened (the agent accepted the TCP connection).
        public var opened = 0
        /// Connections the agent closed.
        public var closedByAgent = 0
    }

    private let running = NIOLockedValueBox(true)
    private let tally = NIOLockedValueBox(Tally())

    /// Starts flooding `port` on 127.0.0.1 from `addresses` source addresses with `perAddress`
    /// connections each; `trickle` sends one byte of a ClientHello every 100 ms instead of staying silent.
    public init(port: Int, addresses: Int, perAddress: Int, trickle: Bool = false) {
        let running = running
        let tally = tally
        let thread = Thread {
            var sockets: [(fd: Int32, source: Int, sent: Int)] = []
            let hello: [UInt8] = [0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03] + Array(repeating: 0x41, count: 64)
            var lastTrickle = Date()
            while running.withLockedValue({ $0 }) {
                // Top up to the wanted number of connections per source address.
                for source in 0..<addresses {
                    while sockets.filter({ $0.source == source }).count < perAddress {
                        guard let fd = Self.open(port: port, source: source) else { break }
                        sockets.append((fd, source, 0))
                        tally.withLockedValue { $0.opened += 1 }
                    }
                }
                // Drop the connections the agent closed.
                var byte: UInt8 = 0
                sockets.removeAll { socket in
                    let count = recv(socket.fd, &byte, 1, Int32(MSG_DONTWAIT))
                    if count == 0 || (count < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
                        close(socket.fd)
                        tally.withLockedValue { $0.closedByAgent += 1 }
                        return true
                    }
                    return false
                }
                if trickle, Date().timeIntervalSince(lastTrickle) > 0.1 {
                    lastTrickle = Date()
                    for index in sockets.indices where sockets[index].sent < hello.count {
                        _ = hello.withUnsafeBytes { send(sockets[index].fd, $0.baseAddress! + sockets[index].sent, 1, Int32(MSG_NOSIGNAL)) }
                        sockets[index].sent += 1
                    }
                }
                usleep(2_000)
            }
            for socket in sockets { close(socket.fd) }
        }
        thread.name = "camrig-test-flood"
        thread.start()
    }

    /// What the flood did so far.
    public var result: Tally { tally.withLockedValue { $0 } }

    /// Stops the flood and closes its connections.
    public func stop() {
        running.withLockedValue { $0 = false }
    }

    /// A connection to 127.0.0.1:`port` from 127.0.1.(`source` + 1); `nil` when it could not be made.
    private static func open(port: Int, source: Int) -> Int32? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        local.sin_addr.s_addr = inet_addr("127.0.1.\(source % 250 + 1)")
        var remote = sockaddr_in()
        remote.sin_family = sa_family_t(AF_INET)
        remote.sin_port = in_port_t(UInt16(port).bigEndian)
        remote.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        let connected = withUnsafePointer(to: &remote) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0, connected == 0 else {
            close(fd)
            return nil
        }
        return fd
    }
}
