import CamRigWire

/// An agent's reply, with when the request left and the reply arrived, both taken on the connection's
/// event loop (the coordinator's `CLOCK_MONOTONIC`), as close to the socket as the client gets.
public struct AgentReply: Sendable {
    public var frame: WireFrame
    /// When the request was written (t1 of a clock probe).
    public var sentAt: Int64
    /// When the reply was read (t4 of a clock probe).
    public var receivedAt: Int64

    /// The round trip as the wire saw it, without the time tasks take to wake up.
    public var roundTrip: Duration { .nanoseconds(receivedAt - sentAt) }
}
