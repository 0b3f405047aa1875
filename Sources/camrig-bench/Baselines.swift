import CamRigClock
import CamRigCLI
import CamRigLocalRig
import Crypto
import Foundation

/// The minimal programs CamRig is measured against: a plain TCP pair, a TCP echo, an OpenSSL TLS
/// pair and OpenSSL's own AES-GCM speed. Each runs in this process (or as `openssl` child processes)
/// at the moment of the measurement it is compared with.
enum Baselines {
    // MARK: Sockets

    /// A listening TCP socket on 127.0.0.1 and its port.
    static func listen() throws -> (fd: Int32, port: UInt16) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw CommandFailure("socket: \(String(cString: strerror(errno)))") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && Glibc.listen(fd, 16) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else { throw CommandFailure("bind/listen on 127.0.0.1: \(String(cString: strerror(errno)))") }
        return (fd, UInt16(bigEndian: address.sin_port))
    }

    static func connect(port: UInt16) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = port.bigEndian
        let connected = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        guard connected else { throw CommandFailure("connect to 127.0.0.1:\(port): \(String(cString: strerror(errno)))") }
        noDelay(fd)
        return fd
    }

    static func noDelay(_ fd: Int32) {
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let written = write(fd, bytes.baseAddress! + offset, bytes.count - offset)
            if written <= 0 { if errno == EINTR { continue }; return false }
            offset += written
        }
        return true
    }

    /// How long a baseline may take before it is given up as stalled.
    static let deadline: Duration = .seconds(60)

    /// Reads from `fd` until `total` bytes have arrived; returns the seconds from the first byte to the
    /// last. Throws when the peer closes first, or when nothing arrives for `within` (the sender stalled).
    static func drain(_ fd: Int32, total: Int, what: String, within: Duration = deadline) throws -> Double {
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var received = 0
        var first: ContinuousClock.Instant?
        var giveUp = ContinuousClock.now + within
        while received < total {
            let left = giveUp - ContinuousClock.now
            guard left > .zero else {
                throw CommandFailure("\(what): \(received) of \(total) bytes arrived, then nothing for \(within); the sender stalled")
            }
            var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let polled = poll(&ready, 1, Int32(max(1, min(left.seconds * 1000, 1000))))
            if polled < 0 && errno == EINTR { continue }
            if polled == 0 { continue }
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress!, $0.count) }
            if count < 0 && errno == EINTR { continue }
            if count < 0 {
                throw CommandFailure("\(what): reading failed after \(received) of \(total) bytes: \(String(cString: strerror(errno)))")
            }
            if count == 0 {
                throw CommandFailure("\(what): the connection closed after \(received) of \(total) bytes")
            }
            if first == nil { first = .now }
            received += count
            giveUp = ContinuousClock.now + within
        }
        return (ContinuousClock.now - (first ?? .now)).seconds
    }

    static func thread(_ body: @escaping @Sendable () -> Void) {
        Thread { body() }.start()
    }

    /// A plain TCP sender and receiver on loopback, the sender writing `frame` `count` times: bytes per second.
    static func tcpPair(frame: [UInt8], count: Int) throws -> Double {
        let (listener, port) = try listen()
        defer { close(listener) }
        let sender = try connect(port: port)
        let receiver = accept(listener, nil, nil)
        defer { close(receiver); close(sender) }
        thread {
            frame.withUnsafeBytes { bytes in
                for _ in 0..<count {
                    guard writeAll(sender, bytes) else { break }
                }
            }
        }
        let seconds = try drain(receiver, total: frame.count * count, what: "the raw TCP pair")
        return Double(frame.count * count) / seconds
    }

    /// Round trips of `size`-byte messages through a TCP echo on loopback, in microseconds.
    static func tcpEcho(count: Int, size: Int = 64) throws -> [Double] {
        let (listener, port) = try listen()
        defer { close(listener) }
        let client = try connect(port: port)
        let server = accept(listener, nil, nil)
        noDelay(server)
        defer { close(client) }
        thread {
            var buffer = [UInt8](repeating: 0, count: size)
            while true {
                let count = buffer.withUnsafeMutableBytes { read(server, $0.baseAddress!, $0.count) }
                if count <= 0 { break }
                let ok = buffer.withUnsafeBytes { writeAll(server, UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
                if !ok { break }
            }
            close(server)
        }
        var message = [UInt8](repeating: 7, count: size)
        var samples: [Double] = []
        samples.reserveCapacity(count)
        for _ in 0..<count {
            let start = ContinuousClock.now
            _ = message.withUnsafeBytes { writeAll(client, $0) }
            var got = 0
            while got < size {
                let n = message.withUnsafeMutableBytes { read(client, $0.baseAddress! + got, size - got) }
                if n <= 0 { throw CommandFailure("TCP echo closed") }
                got += n
            }
            samples.append((ContinuousClock.now - start).microseconds)
        }
        return samples
    }

    // MARK: OpenSSL

    static let openssl = ["/usr/bin/openssl", "/usr/local/bin/openssl"].first { FileManager.default.isExecutableFile(atPath: $0) }

    /// `openssl s_client` sending `frame` `count` times to `openssl s_server` over TLS 1.3 with
    /// AES-128-GCM on loopback: bytes per second at the server's output.
    static func opensslPair(frame: [UInt8], count: Int, certificate: String, key: String, ca: String) throws -> Double {
        guard let openssl else { throw CommandFailure("openssl is not installed (apt-get install openssl)") }
        let (probe, port) = try listen()
        close(probe)
        let serverOut = Pipe()
        // The server's input held open for as long as it runs: at its end, s_server ends every session as
        // it opens.
        let serverIn = Pipe()
        let server = try ChildProcess.spawn(
            openssl,
            ["s_server", "-accept", "127.0.0.1:\(port)", "-cert", certificate, "-key", key, "-quiet", "-tls1_3", "-ciphersuites", "TLS_AES_128_GCM_SHA256"],
            stdin: .descriptor(serverIn.fileHandleForReading.fileDescriptor), stdout: .descriptor(serverOut.fileHandleForWriting.fileDescriptor), stderr: .null
        )
        try? serverOut.fileHandleForWriting.close()
        try? serverIn.fileHandleForReading.close()
        defer {
            server.reapBlocking(grace: .zero)
            try? serverIn.fileHandleForWriting.close()
        }
        // Wait for the server to listen (a probe connection it shrugs off).
        let deadline = ContinuousClock.now + .seconds(10)
        while (try? connect(port: port)).map({ close($0); return true }) == nil {
            guard ContinuousClock.now < deadline else { throw CommandFailure("openssl s_server did not listen on port \(port)") }
            usleep(20_000)
        }
        let clientIn = Pipe()
        let client = try ChildProcess.spawn(
            openssl, ["s_client", "-connect", "127.0.0.1:\(port)", "-quiet", "-CAfile", ca, "-tls1_3"],
            stdin: .descriptor(clientIn.fileHandleForReading.fileDescriptor), stdout: .null, stderr: .null
        )
        try? clientIn.fileHandleForReading.close()
        defer { client.reapBlocking(grace: .zero) }
        let input = clientIn.fileHandleForWriting.fileDescriptor
        thread {
            frame.withUnsafeBytes { bytes in
                for _ in 0..<count {
                    guard writeAll(input, bytes) else { break }
                }
            }
        }
        let seconds = try drain(serverOut.fileHandleForReading.fileDescriptor, total: frame.count * count, what: "the openssl s_server/s_client pair")
        return Double(frame.count * count) / seconds
    }

    /// AES-128-GCM sealing 16 KiB records (the TLS record size) on one core for about a second, with
    /// BoringSSL through swift-crypto (the implementation under swift-nio-ssl): bytes per second.
    static func aesGCMSpeed() -> Double {
        let key = SymmetricKey(size: .bits128)
        let record = [UInt8](repeating: 0x5A, count: 16 * 1024)
        var bytes = 0
        let start = ContinuousClock.now
        while ContinuousClock.now - start < .seconds(1) {
            for _ in 0..<64 {
                _ = try? AES.GCM.seal(record, using: key)
                bytes += record.count
            }
        }
        return Double(bytes) / (ContinuousClock.now - start).seconds
    }
}
