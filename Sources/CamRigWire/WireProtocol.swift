/// Constants of the CamRig wire protocol (see `proto/PROTOCOL.md`).
public enum WireProtocol {
    /// The protocol version this build speaks best.
    public static let currentVersion: UInt32 = 1
    /// Every protocol version this build can speak.
    public static let supportedVersions: ClosedRange<UInt32> = 1...1

    /// Size of the big-endian length prefix that starts every wire frame.
    public static let lengthPrefixSize = 4
    /// Size of the big-endian envelope-length field that follows the prefix.
    public static let envelopeLengthSize = 4
    /// The smallest valid length prefix: a frame must at least hold the envelope-length field.
    public static let minimumFrameLength: UInt32 = 4

    /// Largest envelope (protobuf part of a frame) any peer accepts: 1 MiB.
    public static let maxEnvelopeLength: UInt32 = 1 << 20
    /// Largest frame a peer accepts unless it announces otherwise: 64 MiB, room for an uncompressed
    /// 4K RGB image as a payload.
    public static let defaultMaxFrameLength: UInt32 = 64 << 20
    /// The least a peer may announce as its maximum: an envelope of the maximum size fits.
    public static let minimumMaxFrameLength: UInt32 = maxEnvelopeLength + 4

    /// The TCP port agents listen on unless configured otherwise.
    public static let defaultPort = 7450

    /// Capabilities this build's agent serves (announced in `Welcome.capabilities`).
    public enum Capability {
        public static let ping = "ping"
        public static let clockProbe = "clock-probe"
        /// `open_clock_channel`: clock probes over authenticated UDP (PROTOCOL.md, "UDP clock channel").
        public static let clockUDP = "clock-udp"
        /// `list_devices`, `discovery_query`, `describe_device`.
        public static let devices = "devices"
        /// `lock`, `renew_lease`, `unlock`, `configure`.
        public static let leases = "leases"
        /// `start_stream`, `stop_stream`, with `video_frame` and `stream_ended` messages.
        public static let streaming = "streaming"
        /// `capture_photo`, `schedule_trigger`, `fetch_results`, `acknowledge_results`.
        public static let capture = "capture"
        /// `subscribe`, with `event` messages.
        public static let events = "events"
        /// Events of what a client would otherwise poll for: `DEVICE_CHANGED`, `SPOOL_STATUS` and
        /// `PHASE_STATUS` (PROTOCOL.md, "Events").
        public static let stateEvents = "state-events"
        /// `fetch_results` with `upload_to`, and `upload_recording_file`: the agent puts its results in
        /// an S3-compatible object store itself.
        public static let objectStore = "object-store"
    }

    /// Picks the version two peers speak: the highest version in both ranges, or `nil` if they share none.
    public static func negotiate(
        clientMinimum: UInt32,
        clientMaximum: UInt32,
        supported: ClosedRange<UInt32> = supportedVersions
    ) -> UInt32? {
        guard clientMinimum <= clientMaximum else { return nil }
        let highest = min(clientMaximum, supported.upperBound)
        let lowest = max(clientMinimum, supported.lowerBound)
        return highest >= lowest ? highest : nil
    }

    /// The maximum frame length a peer announced, with 0 meaning the default and values below the
    /// protocol's minimum raised to it.
    public static func effectiveMaxFrameLength(announced: UInt32) -> UInt32 {
        if announced == 0 { return defaultMaxFrameLength }
        return max(announced, minimumMaxFrameLength)
    }
}
