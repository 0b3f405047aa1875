import CamRigClock
import CamRigSecurity
import CamRigDevices
import CamRigWire
import NIOCore

/// Everything `AgentServer` needs to run.
public struct AgentConfiguration: Sendable {
    /// How clients are authenticated.
    public enum Security: Sendable {
        /// TLS 1.3 with client certificates from the rig's CA (the default).
        case tls(MutualTLS)
        /// Plaintext, no authentication: every client is treated as a coordinator. For development only.
        case insecure
    }

    /// Address to listen on; port 0 picks a free port (reported by `AgentServer.localAddress`).
    public var host: String
    public var port: Int
    public var security: Security
    /// Stable id announced in `Welcome` (by default the certificate's common name).
    public var agentID: String
    /// A client must complete TLS and send hello within this time; until it has, its connection counts
    /// against the unauthenticated budget.
    public var handshakeTimeout: TimeAmount
    /// A ready connection with nothing received for this long is closed (clients ping meanwhile).
    public var idleTimeout: TimeAmount
    /// Authenticated clients served at once; `reservedForCoordinators` of them only for the coordinator role.
    public var maxConnections: Int
    /// Connections still in TLS or `Hello` at once; a new one beyond this replaces the oldest.
    public var maxUnauthenticated: Int
    /// Connections still in TLS or `Hello` from one address; more are refused.
    public var maxUnauthenticatedPerAddress: Int
    /// Client places only a coordinator may take.
    public var reservedForCoordinators: Int
    /// The devices served; `nil` serves none (device requests answer `UNIMPLEMENTED`).
    public var devices: AgentDevices?
    /// Where captured results wait for the coordinator; `nil` disables capture.
    public var spool: ResultSpool?
    /// The most on-host recordings (in the spool's `recordings` folder) may take on disk; `nil`: the
    /// disk's free space less a reserve.
    public var recordingSpaceBytes: UInt64?
    /// Largest frame accepted from a client. Clients send only control messages, so the default is the
    /// protocol's minimum (1 MiB + 4): a client can make the agent buffer at most that much.
    public var maxFrameLength: UInt32
    /// The host clock: `CLOCK_MONOTONIC`, or a simulated host's skewed clock (it must be the one the
    /// devices stamp frames with). Clock probes, triggers, leases and events are all on it.
    public var clock: HostClock
    /// Whether the trigger thread asks for real-time priority and a 1 ns timer slack
    /// (`RealtimeScheduling`); it logs what it was granted.
    public var realtimeTriggers: Bool

    public init(
        host: String = "0.0.0.0",
        port: Int = WireProtocol.defaultPort,
        security: Security,
        agentID: String,
        handshakeTimeout: TimeAmount = .seconds(5),
        idleTimeout: TimeAmount = .seconds(120),
        maxConnections: Int = 64,
        maxUnauthenticated: Int = 32,
        maxUnauthenticatedPerAddress: Int = 4,
        reservedForCoordinators: Int = 8,
        maxFrameLength: UInt32 = WireProtocol.minimumMaxFrameLength,
        devices: AgentDevices? = nil,
        spool: ResultSpool? = nil,
        recordingSpaceBytes: UInt64? = nil,
        clock: HostClock? = nil,
        realtimeTriggers: Bool = false
    ) {
        self.realtimeTriggers = realtimeTriggers
        self.clock = clock ?? devices?.clock ?? .system
        self.devices = devices
        self.spool = spool
        self.recordingSpaceBytes = recordingSpaceBytes
        self.host = host
        self.port = port
        self.security = security
        self.agentID = agentID
        self.handshakeTimeout = handshakeTimeout
        self.idleTimeout = idleTimeout
        self.maxConnections = maxConnections
        self.maxUnauthenticated = maxUnauthenticated
        self.maxUnauthenticatedPerAddress = maxUnauthenticatedPerAddress
        self.reservedForCoordinators = reservedForCoordinators
        self.maxFrameLength = maxFrameLength
    }

    /// The handshake deadline in whole seconds (at least one).
    var handshakeTimeoutSeconds: Int { max(1, Int(handshakeTimeout.nanoseconds / 1_000_000_000)) }

    /// The connection budgets' limits.
    var connectionLimits: ConnectionBudget.Limits {
        ConnectionBudget.Limits(
            pendingLimit: maxUnauthenticated, pendingPerAddress: maxUnauthenticatedPerAddress,
            clientLimit: maxConnections, reservedForCoordinators: min(reservedForCoordinators, maxConnections))
    }

    /// What the connection state machine announces.
    var handshake: ServerConnectionStateMachine.Configuration {
        var capabilities = [WireProtocol.Capability.ping, WireProtocol.Capability.clockProbe, WireProtocol.Capability.clockUDP]
        if devices != nil {
            capabilities += [WireProtocol.Capability.devices, WireProtocol.Capability.leases, WireProtocol.Capability.streaming]
            if spool != nil { capabilities += [WireProtocol.Capability.capture, WireProtocol.Capability.objectStore] }
            capabilities += [WireProtocol.Capability.events, WireProtocol.Capability.stateEvents]
        }
        return ServerConnectionStateMachine.Configuration(
            agentID: agentID,
            agentSoftware: "camrig-agent \(CamRigVersion.string)",
            capabilities: capabilities,
            maxFrameLength: maxFrameLength
        )
    }
}
