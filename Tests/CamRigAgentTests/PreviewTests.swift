import CamRigCapture
import CamRigDeviceModel
import CamRigDevices
import CamRigImage
import CamRigWire
import Testing

@testable import CamRigAgent

@Suite("Preview streams", .timeLimit(.minutes(1)))
struct PreviewTests {
    func core() -> AgentRequestCore {
        AgentRequestCore(
            configuration: .init(agentID: "cam-host-1", devices: true, capture: true, clockChannel: true),
            client: .init(role: .viewer, name: "wall-screen"))
    }

    @Test("a preview stream takes defaults (320 px, 5 per second, quality 70), holds one preview at most, and refuses values out of range naming the camera")
    func options() {
        var start = WireStartStream()
        start.deviceID = "synthetic:SYN0001"
        start.preview = WirePreviewOptions()
        let expected = PreviewOptions(maxWidth: 320, minimumInterval: 200_000_000, quality: 70)
        #expect(core().request(.startStream(start)) == .startStream(deviceID: "synthetic:SYN0001", maxQueued: 1, preview: expected))
        for (change, field): ((inout WirePreviewOptions) -> Void, String) in [
            ({ $0.maxWidth = 4000 }, "max_width"), ({ $0.maxFramesPerSecond = 60 }, "max_frames_per_second"),
            ({ $0.maxFramesPerSecond = -1 }, "max_frames_per_second"), ({ $0.jpegQuality = 101 }, "jpeg_quality"),
            // Values that would overflow a conversion are refused, never trapped on.
            ({ $0.jpegQuality = .max }, "jpeg_quality"), ({ $0.maxFramesPerSecond = 1e-300 }, "max_frames_per_second"),
            ({ $0.maxFramesPerSecond = .nan }, "max_frames_per_second"), ({ $0.maxWidth = .max }, "max_width"),
        ] {
            var bad = start
            change(&bad.preview)
            guard case .reply(.error(let error)) = core().request(.startStream(bad)) else {
                Issue.record("\(field): accepted")
                continue
            }
            #expect(error.code == .invalidArgument && error.message.contains(field) && error.deviceID == "synthetic:SYN0001", "\(error.message)")
        }
    }

    @Test("a preview is a JPEG of the frame at most max_width wide, its aspect kept, with the frame's sequence and timestamp")
    func jpegOfFrame() async throws {
        let device = try CaptureDevice(backend: SyntheticCamera(SyntheticCameraConfiguration(serial: "P1")))
        var frames = try device.frames(bufferLimit: 2).makeAsyncIterator()
        let frame = try #require(try await frames.next())
        #expect(frame.format.dimensions == Dimensions(width: 640, height: 480))
        let preview = try #require(PreviewSubscriber.preview(of: frame, options: PreviewOptions(maxWidth: 160, minimumInterval: 0, quality: 80)))
        #expect(preview.format.pixelFormat == .jpeg && preview.format.dimensions == Dimensions(width: 160, height: 120))
        #expect(preview.sequence == frame.sequence && preview.timestamp == frame.timestamp)
        #expect(preview.bytes.readableBytes < frame.bytes.readableBytes / 20, "a preview is small: \(preview.bytes.readableBytes) bytes")
        let decoded = preview.bytes.withUnsafeReadableBytes {
            ContactSheet.thumbnail(of: $0, layout: FrameLayout(pixelFormat: .jpeg, dimensions: preview.format.dimensions, bytesPerLine: 0), width: 160, decodeJPEG: JPEGDecoding.rgb)
        }
        guard case .success(let picture) = decoded else {
            Issue.record("the preview does not decode as JPEG")
            return
        }
        #expect(picture.width == 160 && picture.height == 120)
        // Not a blank picture: the synthetic scene has contrast.
        #expect(Set(picture.rgb).count > 20)
    }
}
