import CLinux
import CamRigClock
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A UDP socket that reports when each datagram arrived: the kernel's receive timestamp
/// (`SO_TIMESTAMPNS`) where the socket offers it, else the time `recvmsg` returned, both on
/// `CLOCK_MONOTONIC`. Blocking, with a receive timeout, for a dedicated thread: the clock channel
/// keeps its timestamps away from event loops and TLS.
///
/// It also reports when each datagram left: with `transmitTimestamps`, the kernel stamps every send
/// as the datagram reaches the network device (`SO_TIMESTAMPING`, software transmit stamps), and
/// queues the stamp on the socket's error queue under the send's counter; `send` returns that
/// counter and `transmitStamps` reads the queue. Time spent between reading a clock and the datagram
/// leaving (computing a MAC, the system call, the scheduler) is then outside every timestamp.
public final class TimestampingUDPSocket: @unchecked Sendable {
    /// A datagram and where it came from.
    public struct Datagram: @unchecked Sendable {
        public var bytes: [UInt8]
        public var sender: sockaddr_storage
        public var senderLength: socklen_t
        /// `CLOCK_MONOTONIC` nanoseconds.
        public var receivedAt: Int64
        /// Whether `receivedAt` is the kernel's stamp.
        public var kernelStamped: Bool
    }

    /// A datagram handed to the kernel.
    public struct Sent: Sendable {
        /// The counter its transmit stamp will carry, when the socket stamps transmits.
        public var key: UInt32?
        /// `CLOCK_MONOTONIC` just before the system call, a bound below its transmit stamp.
        public var before: Int64
    }

    public let descriptor: Int32
    /// Whether the kernel stamps received datagrams.
    public let kernelTimestamps: Bool
    /// Whether the kernel stamps sent datagrams (readable with `transmitStamps`).
    public let transmitTimestamps: Bool
    /// The kernel's per-socket send counter as this side knows it; `nil` after a failed send until
    /// it is reset. Sends hold the lock, so keys follow the order the kernel saw them in.
    private let sendCounter = NIOLockedValueBox<UInt32?>(0)

    /// `SO_TIMESTAMPNS` on 64-bit Linux (`time_t` the size of the kernel's long).
    private static let timestampOption: Int32 = 35

    /// A socket bound to `host:port` (port 0: any), family as the address says. `receiveBufferBytes`
    /// asks for a larger receive buffer than the system's default (the kernel caps it at
    /// `net.core.rmem_max`): a coordinator's socket takes the replies of every agent, and a datagram
    /// the buffer has no room for is lost and its probe waits out its timeout.
    public init(
        host: String, port: Int, receiveTimeout: Duration = .milliseconds(200), transmitTimestamps wantsTransmitStamps: Bool = false,
        receiveBufferBytes: Int32? = nil
    ) throws {
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
        if var bytes = receiveBufferBytes {
            _ = setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, socklen_t(MemoryLayout<Int32>.size))
        }
        kernelTimestamps = setsockopt(fd, SOL_SOCKET, Self.timestampOption, &one, socklen_t(MemoryLayout<Int32>.size)) == 0
        descriptor = fd
        transmitTimestamps = wantsTransmitStamps && Self.enableTransmitStamps(fd)
    }

    /// Turns transmit stamping off and on again, which restarts the kernel's send counter at 0.
    private static func enableTransmitStamps(_ fd: Int32) -> Bool {
        var off: UInt32 = 0
        _ = setsockopt(fd, SOL_SOCKET, camrig_so_timestamping, &off, socklen_t(MemoryLayout<UInt32>.size))
        var flags = camrig_tstamp_transmit_flags
        return setsockopt(fd, SOL_SOCKET, camrig_so_timestamping, &flags, socklen_t(MemoryLayout<UInt32>.size)) == 0
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
        let now = Self.clocksNow()
        let monotonic = now.monotonic
        guard count >= 0 else { return nil }
        var receivedAt = monotonic
        var stamped = false
        // The stamp is CLOCK_REALTIME: carry it over by how long ago it was on that clock.
        if let kernel = Self.timestamp(in: UnsafeRawBufferPointer(control), length: Int(message.msg_controllen)),
            let converted = Self.monotonic(realtime: kernel, at: now)
        {
            receivedAt = converted
            stamped = true
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

    /// Sends a datagram; `nil` when the kernel refused it.
    @discardableResult
    public func send(_ bytes: [UInt8], to address: sockaddr_storage, length: socklen_t) -> Sent? {
        var address = address
        return sendCounter.withLockedValue { counter -> Sent? in
            let before = HostClock.monotonicNow()
            let sent = bytes.withUnsafeBytes { buffer in
                withUnsafePointer(to: &address) { pointer in
                    pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(descriptor, buffer.baseAddress, buffer.count, 0, $0, length) }
                }
            }
            guard transmitTimestamps else { return sent == bytes.count ? Sent(key: nil, before: before) : nil }
            guard sent == bytes.count, let key = counter else {
                // Whether the kernel counted a refused send is unknown: restart its counter.
                counter = Self.enableTransmitStamps(descriptor) ? 0 : nil
                return sent == bytes.count ? Sent(key: nil, before: before) : nil
            }
            counter = key &+ 1
            return Sent(key: key, before: before)
        }
    }

    /// The transmit stamps waiting on the error queue, by send counter, in `CLOCK_MONOTONIC`
    /// nanoseconds. Reading them takes them off the queue.
    public func transmitStamps() -> [UInt32: Int64] {
        guard transmitTimestamps else { return [:] }
        var stamps: [UInt32: Int64] = [:]
        let control = UnsafeMutableRawBufferPointer.allocate(byteCount: 256, alignment: 8)
        defer { control.deallocate() }
        while true {
            var message = msghdr()
            message.msg_control = control.baseAddress
            message.msg_controllen = control.count
            guard recvmsg(descriptor, &message, camrig_msg_errqueue | Int32(MSG_DONTWAIT)) >= 0 else { break }
            let now = Self.clocksNow()
            if let (key, realtime) = Self.transmitStamp(in: UnsafeRawBufferPointer(control), length: Int(message.msg_controllen)),
                let converted = Self.monotonic(realtime: realtime, at: now)
            {
                stamps[key] = converted
            }
        }
        return stamps
    }

    /// The transmit stamp of the send counted `key`, waiting up to `wait` for it (a device that
    /// queues datagrams stamps them after `send` returns). Other stamps read meanwhile are let go.
    public func transmitStamp(of key: UInt32, wait: Duration) -> Int64? {
        let deadline = HostClock.monotonicNow() + wait.nanoseconds
        while true {
            if let stamp = transmitStamps()[key] { return stamp }
            let remaining = deadline - HostClock.monotonicNow()
            guard remaining > 0 else { return nil }
            // The error queue is reported as POLLERR whatever the events ask for.
            var waiting = pollfd(fd: descriptor, events: 0, revents: 0)
            _ = poll(&waiting, 1, Int32(clamping: (remaining + 999_999) / 1_000_000))
        }
    }

    /// The key and `CLOCK_REALTIME` stamp of an error-queue message carrying a software transmit stamp.
    private static func transmitStamp(in control: UnsafeRawBufferPointer, length: Int) -> (UInt32, Int64)? {
        let headerSize = MemoryLayout<cmsghdr>.size
        let end = min(length, control.count)
        var offset = 0
        var stamp: Int64?
        var key: UInt32?
        while offset + headerSize <= end {
            let header = control.loadUnaligned(fromByteOffset: offset, as: cmsghdr.self)
            guard header.cmsg_len >= headerSize else { break }
            let data = offset + headerSize
            if header.cmsg_level == SOL_SOCKET && header.cmsg_type == camrig_scm_timestamping, data + MemoryLayout<timespec>.size <= end {
                // struct scm_timestamping: ts[0] is the software stamp.
                let spec = control.loadUnaligned(fromByteOffset: data, as: timespec.self)
                stamp = Int64(spec.tv_sec) * 1_000_000_000 + Int64(spec.tv_nsec)
            } else if (header.cmsg_level == IPPROTO_IP && header.cmsg_type == IP_RECVERR) || (header.cmsg_level == IPPROTO_IPV6 && header.cmsg_type == IPV6_RECVERR),
                data + MemoryLayout<sock_extended_err>.size <= end
            {
                let error = control.loadUnaligned(fromByteOffset: data, as: sock_extended_err.self)
                if error.ee_errno == UInt32(ENOMSG), error.ee_origin == camrig_ee_origin_timestamping, error.ee_info == camrig_scm_tstamp_snd {
                    key = error.ee_data
                }
            }
            offset += (Int(header.cmsg_len) + 7) & ~7
        }
        guard let stamp, let key else { return nil }
        return (key, stamp)
    }

    /// `CLOCK_MONOTONIC` and `CLOCK_REALTIME` read back to back, in nanoseconds.
    ///
    /// A kernel stamp (`CLOCK_REALTIME`) is carried over to `CLOCK_MONOTONIC` by its age, so both clocks
    /// must be read at one moment: anything done between the two readings (parsing the control
    /// messages, slow in a debug build) would make every converted stamp early by that long.
    static func clocksNow() -> (monotonic: Int64, realtime: Int64) {
        var monotonic = timespec()
        var realtime = timespec()
        clock_gettime(CLOCK_MONOTONIC, &monotonic)
        clock_gettime(CLOCK_REALTIME, &realtime)
        return (Int64(monotonic.tv_sec) * 1_000_000_000 + Int64(monotonic.tv_nsec), Int64(realtime.tv_sec) * 1_000_000_000 + Int64(realtime.tv_nsec))
    }

    /// A `CLOCK_REALTIME` stamp carried over to `CLOCK_MONOTONIC` by its age at `now`; `nil` when the
    /// age is negative or above a second (the wall clock was stepped in between).
    static func monotonic(realtime stamp: Int64, at now: (monotonic: Int64, realtime: Int64)) -> Int64? {
        let age = now.realtime - stamp
        guard age >= 0 && age < 1_000_000_000 else { return nil }
        return now.monotonic - age
    }
}

/// A UDP socket could not be set up; the message names the address and the system's reason.
public struct ClockSocketError: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ description: String) { self.description = description }
}
