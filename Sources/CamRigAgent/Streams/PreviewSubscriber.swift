import CamRigCapture
import CamRigDeviceModel
import CamRigDevices
import CamRigImage
import CamRigWire
import Dispatch
import NIOConcurrencyHelpers
import NIOCore

/// A preview stream's watcher: small JPEG pictures made from a device's frames, for a console's live view.
///
/// Previews have a budget of their own so that watching never disturbs the device's other streams or a
/// recording: frames beyond `maxFramesPerSecond` are passed over; a preview is made on a low-priority
/// queue, one at a time per stream (a frame arriving while one is made is passed over too); and the
/// stream holds at most one preview waiting to be sent, dropping (and counting) the rest.
final class PreviewSubscriber: FrameSink {
    typealias Options = PreviewOptions

    /// Where previews are made: one low-priority queue for the agent, below the device and spool work.
    static let queue = DispatchQueue(label: "camrig.agent.previews", qos: .utility)

    let inner: StreamSubscriber
    private let options: Options
    private struct State {
        var lastAccepted: Int64?
        var making = false
    }
    private let state = NIOLockedValueBox(State())

    init(inner: StreamSubscriber, options: Options) {
        self.inner = inner
        self.options = options
    }

    var streamID: String { inner.streamID }
    func assign(streamID: String) { inner.assign(streamID: streamID) }
    var connection: UInt64 { inner.connection }
    func open(format: DeviceFormat) { inner.open(format: format) }
    func end(reason: WireStreamEndReason, message: String) { inner.end(reason: reason, message: message) }

    func deliver(_ frame: CapturedFrame) {
        let accepted = state.withLockedValue { state -> Bool in
            guard !state.making else { return false }
            if let last = state.lastAccepted, frame.timestamp - last < options.minimumInterval - options.minimumInterval / 10 { return false }
            state.lastAccepted = frame.timestamp
            state.making = true
            return true
        }
        guard accepted else { return }
        Self.queue.async {
            defer { self.state.withLockedValue { $0.making = false } }
            guard let preview = Self.preview(of: frame, options: self.options) else { return }
            self.inner.deliver(preview)
        }
    }

    /// The JPEG preview of `frame` at most `maxWidth` wide, or nil for a format that cannot be shown.
    static func preview(of frame: CapturedFrame, options: Options) -> CapturedFrame? {
        let layout = FrameLayout(pixelFormat: frame.format.pixelFormat, dimensions: frame.format.dimensions, bytesPerLine: Int(frame.format.bytesPerLine))
        let sourceWidth = Int(frame.format.dimensions.width) / (frame.format.pixelFormat == .bayerRGGB8 ? 2 : 1)
        let width = max(16, min(options.maxWidth, sourceWidth))
        let thumbnail = frame.bytes.withUnsafeReadableBytes { ContactSheet.thumbnail(of: $0, layout: layout, width: width, decodeJPEG: JPEGDecoding.rgb) }
        guard case .success(let picture) = thumbnail,
            let jpeg = try? PhotoEncoder.jpeg(rgb: picture.rgb, width: picture.width, height: picture.height, quality: options.quality)
        else { return nil }
        var preview = frame
        preview.format = DeviceFormat(
            pixelFormat: .jpeg, dimensions: Dimensions(width: UInt32(picture.width), height: UInt32(picture.height)),
            frameRateRanges: [], bytesPerLine: 0, imageSize: UInt32(jpeg.readableBytes))
        preview.bytes = jpeg
        preview.embeddedDataRows = 0
        return preview
    }
}

/// What a preview stream asks for (`StartStream.preview`), defaults filled in.
public struct PreviewOptions: Sendable, Equatable {
    public var maxWidth: Int
    public var minimumInterval: Int64
    public var quality: Int32

    static let defaultWidth = 320
    static let defaultFramesPerSecond = 5.0
    static let defaultQuality: Int32 = 70

    /// From the request, defaults filled in; nil with the reason when a value is out of range.
    static func from(_ wire: WirePreviewOptions) -> Result<PreviewOptions, Refusal> {
        // Every value is checked as it came, before any conversion that a hostile one could overflow.
        guard wire.maxWidth == 0 || (16...1920).contains(wire.maxWidth) else {
            return .failure(Refusal(description: "preview max_width \(wire.maxWidth) is outside 16…1920"))
        }
        guard wire.maxFramesPerSecond == 0 || (wire.maxFramesPerSecond.isFinite && wire.maxFramesPerSecond >= 0.1 && wire.maxFramesPerSecond <= 30) else {
            return .failure(Refusal(description: "preview max_frames_per_second \(wire.maxFramesPerSecond) is outside 0.1…30"))
        }
        guard wire.jpegQuality <= 100 else { return .failure(Refusal(description: "preview jpeg_quality \(wire.jpegQuality) is outside 1…100")) }
        let width = wire.maxWidth == 0 ? defaultWidth : Int(wire.maxWidth)
        let fps = wire.maxFramesPerSecond == 0 ? defaultFramesPerSecond : wire.maxFramesPerSecond
        let quality = wire.jpegQuality == 0 ? defaultQuality : Int32(wire.jpegQuality)
        return .success(PreviewOptions(maxWidth: width, minimumInterval: Int64(1e9 / fps), quality: quality))
    }

    struct Refusal: Error {
        var description: String
    }
}
