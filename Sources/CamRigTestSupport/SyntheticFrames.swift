import CamRigDeviceModel
import CamRigDevices

/// Reading synthetic frames back: which frame, from which device, exposed when.
public enum SyntheticFrames {
    /// What a synthetic frame says about itself, checked against what it arrived with.
    public struct Decoded: Hashable, Sendable {
        public var sequence: UInt64
        public var timestamp: Int64
        /// Whether the pixels were made by the device the frame claims to come from.
        public var fromClaimedDevice: Bool
    }

    /// Decodes the header in a frame's pixels (raw formats: the first 32 bytes; MJPEG: its comment segment).
    public static func decode(_ frame: CapturedFrame) -> Decoded? {
        guard let header = SyntheticFrameHeader.decode(frame.bytes, format: frame.format.pixelFormat) else { return nil }
        return Decoded(
            sequence: header.sequence,
            timestamp: header.timestamp,
            fromClaimedDevice: header.deviceHash == SyntheticFrameHeader.hash(frame.deviceID)
        )
    }
}
