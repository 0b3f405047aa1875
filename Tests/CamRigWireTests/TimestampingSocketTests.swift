import CamRigClock
import CLinux
import CamRigClockSocket
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The clock channel's socket: the kernel's transmit and receive stamps, on `CLOCK_MONOTONIC`, for
/// the datagrams they belong to.
@Suite("Kernel-timestamping UDP socket", .timeLimit(.minutes(1)))
struct TimestampingSocketTests {
    @Test("each send gets the kernel's transmit stamp under its own counter, between the send call and the receiver's kernel receive stamp")
    func transmitStamps() throws {
        let sender = try TimestampingUDPSocket(host: "127.0.0.1", port: 0, transmitTimestamps: true)
        let receiver = try TimestampingUDPSocket(host: "127.0.0.1", port: 0)
        try #require(sender.transmitTimestamps, "this kernel offers no software transmit stamps")
        let target = try Self.address(port: receiver.localPort)
        var sends: [TimestampingUDPSocket.Sent] = []
        var arrivals: [Int64] = []
        for index in 0..<5 {
            let sent = try #require(sender.send([UInt8(index)], to: target.0, length: target.1))
            sends.append(sent)
            let datagram = try #require(receiver.receive())
            #expect(datagram.bytes == [UInt8(index)])
            #expect(datagram.kernelStamped)
            arrivals.append(datagram.receivedAt)
        }
        #expect(sends.compactMap(\.key) == [0, 1, 2, 3, 4], "counters follow the sends")
        let stamps = sender.transmitStamps()
        #expect(stamps.count == 5)
        for (index, sent) in sends.enumerated() {
            let stamp = try #require(stamps[sent.key!], "no stamp for send \(index)")
            #expect(stamp >= sent.before, "send \(index) stamped before it was made")
            #expect(stamp <= arrivals[index], "send \(index) stamped after it arrived")
        }
        #expect(sender.transmitStamps().isEmpty, "reading the stamps takes them off the queue")
    }

    @Test("a receiver blocked in recvmsg gets the kernel's receive stamp, within microseconds of the sender's transmit stamp, however late its thread wakes")
    func blockedReceiver() async throws {
        let sender = try TimestampingUDPSocket(host: "127.0.0.1", port: 0, transmitTimestamps: true)
        let receiver = try TimestampingUDPSocket(host: "127.0.0.1", port: 0, receiveTimeout: .seconds(2))
        let target = try Self.address(port: receiver.localPort)
        var gaps: [Int64] = []
        for index in 0..<20 {
            // The receiver blocks a thread of its own, not one of the cooperative pool's.
            let thread = ThreadID()
            let arrival = ReceiveResult()
            Thread {
                thread.set(camrig_gettid())
                arrival.deliver(receiver.receive())
            }.start()
            #expect(await Self.blockedInReceive(thread), "the receiver never blocked in recvmsg")
            let sent = try #require(sender.send([UInt8(index)], to: target.0, length: target.1))
            let datagram = try #require(await arrival.value())
            let key = try #require(sent.key)
            let stamp = try #require(sender.transmitStamp(of: key, wait: .milliseconds(5)))
            #expect(datagram.kernelStamped)
            gaps.append(datagram.receivedAt - stamp)
        }
        gaps.sort()
        // Loopback carries a datagram in about a microsecond; a thread's wake-up takes tens.
        #expect(gaps[0] >= -2_000 && gaps[gaps.count / 2] < 10_000, "receive − transmit stamps: \(gaps)")
    }

    /// Waits up to ten seconds until the thread `thread` names sits in the recvmsg system call
    /// (`/proc/self/task/TID/syscall` starts with its number).
    static func blockedInReceive(_ thread: ThreadID) async -> Bool {
        #if arch(x86_64)
            let recvmsg = "47"
        #else
            let recvmsg = "212"
        #endif
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            let tid = thread.value
            if tid != 0, let text = try? String(contentsOfFile: "/proc/self/task/\(tid)/syscall", encoding: .utf8),
                text.split(separator: " ").first == Substring(recvmsg)
            {
                return true
            }
            try? await Task.sleep(for: .microseconds(200))
        }
        return false
    }

    /// What a receiving thread got, awaited by the test.
    final class ReceiveResult: @unchecked Sendable {
        private let lock = NSLock()
        private var result: TimestampingUDPSocket.Datagram??
        private var waiter: CheckedContinuation<TimestampingUDPSocket.Datagram?, Never>?

        func deliver(_ datagram: TimestampingUDPSocket.Datagram?) {
            let waiting: CheckedContinuation<TimestampingUDPSocket.Datagram?, Never>? = lock.withLock {
                result = .some(datagram)
                defer { waiter = nil }
                return waiter
            }
            waiting?.resume(returning: datagram)
        }

        func value() async -> TimestampingUDPSocket.Datagram? {
            await withCheckedContinuation { continuation in
                let known: TimestampingUDPSocket.Datagram?? = lock.withLock {
                    if result == nil { waiter = continuation }
                    return result
                }
                if let known { continuation.resume(returning: known) }
            }
        }
    }

    /// A thread id set by one thread and read by another.
    final class ThreadID: @unchecked Sendable {
        private let lock = NSLock()
        private var tid: pid_t = 0
        func set(_ tid: pid_t) { lock.withLock { self.tid = tid } }
        var value: pid_t { lock.withLock { tid } }
    }

    @Test("waiting for one send's stamp finds it; a counter never sent waits its time and finds nothing; a socket without transmit stamps has none")
    func waitingForAStamp() throws {
        let sender = try TimestampingUDPSocket(host: "127.0.0.1", port: 0, transmitTimestamps: true)
        let receiver = try TimestampingUDPSocket(host: "127.0.0.1", port: 0, receiveTimeout: .milliseconds(50))
        let target = try Self.address(port: receiver.localPort)
        let sent = try #require(sender.send([1, 2, 3], to: target.0, length: target.1))
        let key = try #require(sent.key)
        #expect(sender.transmitStamp(of: key, wait: .milliseconds(5)) != nil)
        let start = HostClock.monotonicNow()
        #expect(sender.transmitStamp(of: 99, wait: .milliseconds(20)) == nil)
        #expect(HostClock.monotonicNow() - start >= 19_000_000)

        let plain = try TimestampingUDPSocket(host: "127.0.0.1", port: 0)
        #expect(!plain.transmitTimestamps)
        #expect(plain.send([1], to: target.0, length: target.1)?.key == nil)
        #expect(plain.transmitStamps().isEmpty)
    }

    static func address(port: Int) throws -> (sockaddr_storage, socklen_t) {
        var storage = sockaddr_storage()
        withUnsafeMutableBytes(of: &storage) { raw in
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            withUnsafeBytes(of: &address) { raw.copyMemory(from: $0) }
        }
        return (storage, socklen_t(MemoryLayout<sockaddr_in>.size))
    }
}
