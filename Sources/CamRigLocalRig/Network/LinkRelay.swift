import CamRigClockSocket
import CamRigClock
import CamRigDeviceModel
import CamRigWire
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// One direction of a network path.
public struct LinkProfile: Sendable, Equatable, CustomStringConvertible {
    /// Base one-way delay.
    public var delay: Duration
    /// Each packet's delay varies uniformly within ± this.
    public var jitter: Duration
    /// Probability that a packet is lost: a datagram is dropped; a TCP segment arrives only after
    /// `retransmissionDelay`, and everything behind it waits (TCP delivers in order).
    public var loss: Double
    /// What a lost TCP segment costs: the time until its retransmission arrives.
    public var retransmissionDelay: Duration

    /// A link with the given delay, jitter and loss.
    public init(delay: Duration = .zero, jitter: Duration = .zero, loss: Double = 0, retransmissionDelay: Duration = .milliseconds(10)) {
        self.delay = delay
        self.jitter = jitter
        self.loss = loss
        self.retransmissionDelay = retransmissionDelay
    }

    /// E.g. `0.500 ms ± 0.100 ms, 1.0% loss`.
    public var description: String {
        var text = String(format: "%.3f ms ± %.3f ms", delay.seconds * 1000, jitter.seconds * 1000)
        if loss > 0 { text += String(format: ", %.1f%% loss", loss * 100) }
        return text
    }
}

/// Both directions of the path between the coordinator and one host.
public struct PathConditions: Sendable, Equatable {
    /// From the coordinator to the host.
    public var toHost: LinkProfile
    /// From the host to the coordinator.
    public var fromHost: LinkProfile

    /// A path with the given directions (default: no delay, no loss).
    public init(toHost: LinkProfile = .init(), fromHost: LinkProfile = .init()) {
        self.toHost = toHost
        self.fromHost = fromHost
    }

    /// `delay` each way, longer by `asymmetry / 2` towards the host and shorter by as much back.
    public static func lan(delay: Duration, jitter: Duration, asymmetry: Duration = .zero, loss: Double = 0) -> PathConditions {
        PathConditions(
            toHost: LinkProfile(delay: delay + asymmetry / 2, jitter: jitter, loss: loss),
            fromHost: LinkProfile(delay: delay - asymmetry / 2, jitter: jitter, loss: loss)
        )
    }

    /// The same path seen from the host's side (for traffic the host starts, such as NTP to a server).
    public var reversed: PathConditions { PathConditions(toHost: fromHost, fromHost: toHost) }
}

/// A userspace relay that imposes `PathConditions` on TCP and UDP between clients and one target,
/// for kernels without `netem`.
///
/// It listens on one port for both TCP and UDP (as an agent does) and forwards to `target`. Every
/// packet (a TCP read, or a datagram) is held for its direction's delay plus uniform jitter, never
/// overtaking an earlier one (order is preserved, as on one link); losses drop datagrams and delay TCP
/// segments by a retransmission. Delays and losses are drawn from a seeded generator, so a run can be
/// repeated. Conditions can be changed while traffic flows.
///
/// The relay runs on its own event loop so that its timing does not depend on the work of the process
/// around it.
public final class LinkRelay: Sendable {
    /// Where the relay listens (TCP and UDP).
    public let address: SocketAddress
    /// Where it relays to.
    public let target: SocketAddress
    private let group: MultiThreadedEventLoopGroup
    private let ownsGroup: Bool
    private let state: NIOLockedValueBox<State>
    private let tcp: any Channel
    private let udp: DatagramRelay

    struct State {
        var conditions: PathConditions
        var random: SeededRandom
        var tcpChannels: [ObjectIdentifier: any Channel] = [:]
        var stopped = false

        /// One packet's delay in nanoseconds, and whether it is lost.
        mutating func draw(_ direction: KeyPath<PathConditions, LinkProfile>, stream: Bool, lossless: Bool = false) -> (delay: Int64, lost: Bool) {
            let profile = conditions[keyPath: direction]
            let jitter = profile.jitter.seconds * 1e9
            var delay = profile.delay.seconds * 1e9 + (jitter > 0 ? (random.nextDouble() * 2 - 1) * jitter : 0)
            let lost = !lossless && profile.loss > 0 && random.nextDouble() < profile.loss
            if lost && stream { delay += profile.retransmissionDelay.seconds * 1e9 }
            return (Int64(max(0, delay)), lost)
        }
    }

    /// Listens on `listenHost`:`listenPort` for TCP and UDP (port 0: one the system chooses, the same
    /// for both) and relays to `target`.
    public init(listenHost: String = "127.0.0.1", listenPort: Int = 0, target: SocketAddress, conditions: PathConditions, seed: UInt64, group: MultiThreadedEventLoopGroup? = nil) throws {
        self.target = target
        self.group = group ?? MultiThreadedEventLoopGroup(numberOfThreads: 1)
        ownsGroup = group == nil
        state = NIOLockedValueBox(State(conditions: conditions, random: SeededRandom(seed: seed)))
        let loop = self.group.next()
        var attempt = 0
        while true {
            attempt += 1
            let tcp = try Self.listenTCP(host: listenHost, port: listenPort, loop: loop, state: state, target: target)
            let port = tcp.localAddress!.port!
            do {
                udp = try DatagramRelay(host: listenHost, port: port, target: target, state: state)
                self.tcp = tcp
                address = tcp.localAddress!
                return
            } catch where attempt < 8 && listenPort == 0 {
                try? tcp.close().wait()  // the UDP port was taken: try another pair
            }
        }
    }

    /// Changes the conditions for packets from now on.
    public var conditions: PathConditions {
        get { state.withLockedValue { $0.conditions } }
        set { state.withLockedValue { $0.conditions = newValue } }
    }

    /// Closes everything; safe to call more than once.
    public func shutdown() {
        let channels = state.withLockedValue { state -> [any Channel]? in
            guard !state.stopped else { return nil }
            state.stopped = true
            defer { state.tcpChannels = [:] }
            return Array(state.tcpChannels.values)
        }
        guard let channels else { return }
        for channel in channels { channel.close(promise: nil) }
        try? tcp.close().wait()
        udp.stop()
        if ownsGroup { try? group.syncShutdownGracefully() }
    }

    // MARK: TCP

    private static func listenTCP(host: String, port: Int, loop: any EventLoop, state: NIOLockedValueBox<State>, target: SocketAddress) throws -> any Channel {
        try ServerBootstrap(group: loop)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
            .childChannelOption(.autoRead, value: false)
            .childChannelInitializer { inbound in
                // Connect onwards first; only then start reading the client.
                ClientBootstrap(group: inbound.eventLoop)
                    .channelOption(.tcpOption(.tcp_nodelay), value: 1)
                    .channelOption(.autoRead, value: false)
                    .connect(to: target)
                    .flatMap { outbound in
                        let toHost = DelayLine<TCPItem>(loop: inbound.eventLoop, state: state, direction: \.toHost)
                        let fromHost = DelayLine<TCPItem>(loop: inbound.eventLoop, state: state, direction: \.fromHost)
                        state.withLockedValue {
                            $0.tcpChannels[ObjectIdentifier(inbound)] = inbound
                            $0.tcpChannels[ObjectIdentifier(outbound)] = outbound
                        }
                        let forget: @Sendable (any Channel) -> Void = { channel in _ = state.withLockedValue { $0.tcpChannels.removeValue(forKey: ObjectIdentifier(channel)) } }
                        inbound.closeFuture.whenComplete { _ in forget(inbound) }
                        outbound.closeFuture.whenComplete { _ in forget(outbound) }
                        return inbound.pipeline.addHandler(RelayHandler(line: toHost, peer: outbound)).flatMap {
                            outbound.pipeline.addHandler(RelayHandler(line: fromHost, peer: inbound))
                        }
                    }
            }
            .bind(host: host, port: port)
            .wait()
    }

    enum TCPItem {
        case bytes(ByteBuffer)
        case close
    }

    /// Reads one side of a relayed connection into a delay line that writes to the other side; reading
    /// pauses while more than `highWater` bytes wait in the line.
    final class RelayHandler: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = ByteBuffer
        static let highWater = 8 << 20
        let line: DelayLine<TCPItem>
        let peer: any Channel

        init(line: DelayLine<TCPItem>, peer: any Channel) {
            self.line = line
            self.peer = peer
        }

        func handlerAdded(context: ChannelHandlerContext) {
            let source = context.channel
            let peer = self.peer
            line.deliver = { items in
                for item in items {
                    switch item {
                    case .bytes(let bytes): peer.write(bytes, promise: nil)
                    case .close:
                        peer.flush()
                        peer.close(mode: .output, promise: nil)
                        peer.close(promise: nil)
                        return
                    }
                }
                peer.flush()
            }
            line.drained = { source.read() }
            // Reads start once the channel is active (the client's side registers after this handler is added).
            if context.channel.isActive { context.read() }
        }

        func channelActive(context: ChannelHandlerContext) {
            context.read()
            context.fireChannelActive()
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let bytes = unwrapInboundIn(data)
            line.push(.bytes(bytes), size: bytes.readableBytes)
        }

        func channelReadComplete(context: ChannelHandlerContext) {
            if line.queuedBytes < Self.highWater { context.read() } else { line.waitingForDrain = true }
        }

        func channelInactive(context: ChannelHandlerContext) {
            line.push(.close, size: 0, lossless: true)
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            context.close(promise: nil)
        }
    }
}

/// One direction of a TCP connection: reads released at their due time, never before an earlier
/// one; a lost segment delays itself and what follows. Lives on one event loop.
final class DelayLine<Item>: @unchecked Sendable {
    let loop: any EventLoop
    let state: NIOLockedValueBox<LinkRelay.State>
    let direction: KeyPath<PathConditions, LinkProfile>
    var deliver: ([Item]) -> Void = { _ in }
    var drained: () -> Void = {}
    var waitingForDrain = false
    private(set) var queuedBytes = 0
    private var queue = CircularBuffer<(due: NIODeadline, item: Item, size: Int)>()
    private var lastDue = NIODeadline.uptimeNanoseconds(0)
    private var timer: Scheduled<Void>?

    init(loop: any EventLoop, state: NIOLockedValueBox<LinkRelay.State>, direction: KeyPath<PathConditions, LinkProfile>) {
        self.loop = loop
        self.state = state
        self.direction = direction
    }

    func push(_ item: Item, size: Int, lossless: Bool = false) {
        let now = NIODeadline.now()
        let delay = state.withLockedValue { $0.draw(direction, stream: true, lossless: lossless).delay }
        let due = max(now + .nanoseconds(delay), lastDue)
        lastDue = due
        queue.append((due, item, size))
        queuedBytes += size
        arm()
    }

    private func arm() {
        guard timer == nil, let first = queue.first else { return }
        timer = loop.scheduleTask(deadline: first.due) { [self] in
            timer = nil
            release()
        }
    }

    private func release() {
        let now = NIODeadline.now()
        var items: [Item] = []
        while let first = queue.first, first.due <= now {
            items.append(first.item)
            queuedBytes -= first.size
            queue.removeFirst()
        }
        if !items.isEmpty { deliver(items) }
        if waitingForDrain && queuedBytes < LinkRelay.RelayHandler.highWater / 2 {
            waitingForDrain = false
            drained()
        }
        arm()
    }
}

/// The relay's UDP side. Each datagram's delay counts from its kernel receive timestamp, not from when
/// the relay got round to reading it, and each direction waits on a timer before sending: so the
/// relay's own wake-up latency is the same both ways and adds no asymmetry to the path (which clock
/// synchronization would read as an offset). One thread reads the clients; one per client reads the
/// target's answers.
final class DatagramRelay: @unchecked Sendable {
    let listener: TimestampingUDPSocket
    let target: (address: sockaddr_storage, length: socklen_t)
    let state: NIOLockedValueBox<LinkRelay.State>
    private let running = NIOLockedValueBox(true)
    private var sessions: [[UInt8]: TimestampingUDPSocket] = [:]

    init(host: String, port: Int, target: SocketAddress, state: NIOLockedValueBox<LinkRelay.State>) throws {
        listener = try TimestampingUDPSocket(host: host, port: port)
        var storage = sockaddr_storage()
        let length = target.withSockAddr { pointer, size in
            withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: UnsafeRawBufferPointer(start: pointer, count: size)) }
            return size
        }
        self.target = (storage, socklen_t(length))
        self.state = state
        let thread = Thread { [self] in forward() }
        thread.name = "camrig-relay-udp"
        thread.start()
    }

    func stop() { running.withLockedValue { $0 = false } }

    private var isRunning: Bool { running.withLockedValue { $0 } }

    /// Sleeps until `received + delay` (never before the previous datagram of the direction); false if lost.
    private func hold(_ datagram: TimestampingUDPSocket.Datagram, _ direction: KeyPath<PathConditions, LinkProfile>, after last: inout Int64) -> Bool {
        let (delay, lost) = state.withLockedValue { $0.draw(direction, stream: false) }
        if lost { return false }
        let due = max(datagram.receivedAt + delay, last)
        last = due
        HostClock.sleep(untilMonotonic: due)
        return true
    }

    private func forward() {
        var last: Int64 = 0
        while isRunning {
            guard let datagram = listener.receive(capacity: 65_536) else { continue }
            let key = withUnsafeBytes(of: datagram.sender) { Array($0.prefix(Int(datagram.senderLength))) }
            let upstream: TimestampingUDPSocket
            if let known = sessions[key] {
                upstream = known
            } else {
                guard let made = try? TimestampingUDPSocket(host: target.address.ss_family == sa_family_t(AF_INET6) ? "::" : "0.0.0.0", port: 0) else { continue }
                sessions[key] = made
                upstream = made
                let client = (datagram.sender, datagram.senderLength)
                let thread = Thread { [self] in backward(from: made, to: client) }
                thread.name = "camrig-relay-udp-back"
                thread.start()
            }
            guard hold(datagram, \.toHost, after: &last) else { continue }
            _ = upstream.send(datagram.bytes, to: target.address, length: target.length)
        }
    }

    private func backward(from upstream: TimestampingUDPSocket, to client: (sockaddr_storage, socklen_t)) {
        var last: Int64 = 0
        while isRunning {
            guard let datagram = upstream.receive(capacity: 65_536) else { continue }
            guard hold(datagram, \.fromHost, after: &last) else { continue }
            _ = listener.send(datagram.bytes, to: client.0, length: client.1)
        }
    }
}
