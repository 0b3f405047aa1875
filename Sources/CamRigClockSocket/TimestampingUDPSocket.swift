import CamRigClock

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A UDP socket that reports when each datagram arrived: the kernel's receive timestamp
/// (`SO_TIMESTAMPNS`) where the socket offers it, else the time `recvmsg` returned, both on
/// `CLOCK_MONOTONIC`. Blocking, with a receive timeout, for a dedicated thread: the clock channel
/// keeps its timestamps away from event loops and TLS.
public final class TimestampingUDPSocket: @unchecked Sendable {
    /// A datagram and where it came from.
    public struct Datagram {
        public var bytes: [UInt8]
        public var sender: sockaddr_storage
        public var senderLength: socklen_t
        /// `CLOCK_MONOTONIC` nanoseconds.
        public var receivedAt: Int64
        /// Whether `receivedAt` is the kernel's stamp.
        public var kernelStamped: Bool
    }

    public let descriptor: Int32
    /// Whether the kernel stamps received datagrams.
    public let kernelTimestamps: Bool

    /// `SO_TIMESTAMPNS` on 64-bit Linux (`time_t` the size of the kernel's long).
    private static let timestampOption: Int32 = 35

    /// A socket bound to `host:port` (port 0: any), family as the address says.
    public init(host: String, port: Int, receiveTimeout: Duration = .milliseconds(200)) throws {
        var hints = addrinfo()
        hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST
        hints.ai_socktype = Int32(SOCK_DGRAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &result)
        guard status == 0, let info = result else {
            throw ClockSocketError("cannot use \(host):\(port) for UDP: \(String(cString: gai_strerror(status)))")
        }
        defer { freeaddrinfo(result) }
        let fd = socket(info.pointee.ai_family, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw ClockSocketError("cannot create a UDP socket: \(String(cString: strerror(errno)))") }
        var one: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        guard bind(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 else {
            let reason = String(cString: strerror(errno))
            Glibc.close(fd)
            throw ClockSocketError("cannot bind UDP \(host):\(port): \(reason)")
        }
        let (seconds, attoseconds) = receiveTimeout.components
        var timeout = timeval(tv_sec: Int(seconds), tv_usec: Int(attoseconds / 1_000_000_000_000))
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        kernelTimestamps = setsockopt(fd, SOL_SOCKET, Self.timestampOption, &one, socklen_t(MemoryLayout<Int32>.size)) == 0
        descriptor = fd
    }

    deinit { Glibc.close(descriptor) }

    /// The bound port.
    public var localPort: Int {
        var address = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) } }
        return Self.port(of: address)
    }

    /// The port of an IPv4 or IPv6 socket address.
    public static func port(of address: sockaddr_storage) -> Int {
        var address = address
        return withUnsafePointer(to: &address) { pointer in
            switch Int32(pointer.pointee.ss_family) {
            case AF_INET: pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin_port)) }
            case AF_INET6: pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin6_port)) }
            default: 0
            }
        }
    }

    /// Waits for one datagram of at most `capacity` bytes; `nil` on timeout or error.
    public func receive(capacity: Int = 128) -> Datagram? {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 8)
        let control = UnsafeMutableRawBufferPointer.allocate(byteCount: 128, alignment: 8)
        let sender = UnsafeMutablePointer<sockaddr_storage>.allocate(capacity: 1)
        let vector = UnsafeMutablePointer<iovec>.allocate(capacity: 1)
        defer {
            buffer.deallocate()
            control.deallocate()
            sender.deallocate()
            vector.deallocate()
        }
        vector.pointee = iovec(iov_base: buffer.baseAddress, iov_len: capacity)
        var message = msghdr()
        message.msg_name = UnsafeMutableRawPointer(sender)
        message.msg_namelen = socklen_t(MemoryLayout<sockaddr_storage>.size)
        message.msg_iov = vector
        message.msg_iovlen = 1
        message.msg_control = control.baseAddress
        message.msg_controllen = control.count
        let count = recvmsg(descriptor, &message, 0)
        let monotonic = HostClock.monotonicNow()
        guard count >= 0 else { return nil }
        var receivedAt = monotonic
        var stamped = false
        if let kernel = Self.timestamp(in: UnsafeRawBufferPointer(control), length: Int(message.msg_controllen)) {
            // The stamp is CLOCK_REALTIME: carry it over by how long ago it was on that clock.
            var now = timespec()
            clock_gettime(CLOCK_REALTIME, &now)
            let age = (Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)) - kernel
            if age >= 0 && age < 1_000_000_000 {
                receivedAt = monotonic - age
                stamped = true
            }
        }
        return Datagram(
            bytes: Array(UnsafeRawBufferPointer(rebasing: buffer[0..<count])),
            sender: sender.pointee,
            senderLength: message.msg_namelen,
            receivedAt: receivedAt,
            kernelStamped: stamped
        )
    }

    /// The `SCM_TIMESTAMPNS` control message's time (CLOCK_REALTIME ns), if present.
    private static func timestamp(in control: UnsafeRawBufferPointer, length: Int) -> Int64? {
        let headerSize = MemoryLayout<cmsghdr>.size
        let end = min(length, control.count)
        var offset = 0
        while offset + headerSize <= end {
            let header = control.loadUnaligned(fromByteOffset: offset, as: cmsghdr.self)
            guard header.cmsg_len >= headerSize else { return nil }
            if header.cmsg_level == SOL_SOCKET && header.cmsg_type == timestampOption, offset + headerSize + MemoryLayout<timespec>.size <= end {
                let spec = control.loadUnaligned(fromByteOffset: offset + headerSize, as: timespec.self)
                return Int64(spec.tv_sec) * 1_000_000_000 + Int64(spec.tv_nsec)
            }
            offset += (Int(header.cmsg_len) + 7) & ~7
        }
        return nil
    }

    /// Sends a datagram; `false` when the kernel refused it.
    @discardableResult
    public func send(_ bytes: [UInt8], to address: sockaddr_storage, length: socklen_t) -> Bool {
        var address = address
        return bytes.withUnsafeBytes { buffer in
            withUnsafePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(descriptor, buffer.baseAddress, buffer.count, 0, $0, length) }
            }
        } == bytes.count
    }
}

/// A UDP socket could not be set up; the message names the address and the system's reason.
public struct ClockSocketError: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ description: String) { self.description = description }
}
