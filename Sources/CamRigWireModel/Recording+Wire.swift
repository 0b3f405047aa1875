import CamRigWire

extension WireRecordingCodec {
    /// How manifests, sidecars and the command line name the codec.
    public var name: String {
        switch self {
        case .copy: "copy"
        case .mjpeg: "mjpeg"
        case .ffv1: "ffv1"
        case .h264: "h264"
        case .raw: "raw"
        case .unspecified, .UNRECOGNIZED: "unspecified"
        }
    }
}

extension WireRecordingState {
    /// How manifests and summaries name a track's state.
    public var name: String {
        switch self {
        case .recording: "recording"
        case .complete: "complete"
        case .cutShort: "cut_short"
        case .failed: "failed"
        case .unspecified, .UNRECOGNIZED: "unknown"
        }
    }
}
