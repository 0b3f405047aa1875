import CamRigCapture
import CamRigCoordinator
import CamRigDeviceModel
import CamRigDevices
import Testing

/// Manifests built from what a capture observed, without agents or files.
@Suite("Manifest builder", .timeLimit(.minutes(1)))
struct ManifestBuilderTests {
    static func camera(_ index: Int) -> CaptureManifest.Camera {
        CaptureManifest.Camera(
            index: index, name: "agent-\(index)/cam", agent: "agent-\(index)", device: "cam", model: "synthetic",
            format: "YUYV-640x480", pixelFormat: "YUYV", width: 640, height: 480,
            clock: CaptureManifest.ClockStatistics(
                offsetNs: 0, driftPpm: 0, errorBoundNs: 20_000, minimumRoundTripNs: 90_000, samples: 64),
            framesDelivered: 0, framesDropped: 0, framesUnmatched: 0
        )
    }

    static func builder(_ kind: CaptureKind, cameras: Int) -> ManifestBuilder {
        ManifestBuilder(
            id: "capture-1", kind: kind, created: "2026-01-01T00:00:00.000Z", sessionID: "s-1",
            cameras: (0..<cameras).map(camera))
    }

    static func frame(_ camera: Int, sequence: UInt64 = 1, at timestamp: Int64, lateness: Int64? = nil) -> SyncFrame<
        StoredFrame
    > {
        SyncFrame(
            camera: camera, sequence: sequence, timestamp: timestamp, uncertainty: 30_000,
            payload: StoredFrame(
                file: "cam\(camera)-x/\(sequence).png", agentTimestamp: timestamp + 7, marks: "start_of_exposure",
                lateness: lateness)
        )
    }

    @Test("a photo's set is referenced to T, spans its frames, and names each missing camera with why")
    func photo() throws {
        let fireAt: Int64 = 10_000_000_000
        let manifest = Self.builder(.photo, cameras: 4).photo(
            [
                Self.frame(0, at: fireAt + 40_000, lateness: 12), nil, Self.frame(2, at: fireAt - 10_000, lateness: 3),
                nil,
            ],
            fireAt: fireAt,
            failures: [1: "trigger failed: agent gone"]
        )
        #expect(manifest.kind == "photo")
        #expect(manifest.id == "capture-1" && manifest.sessionId == "s-1")
        let set = try #require(manifest.sets.first)
        #expect(manifest.sets.count == 1)
        #expect(!set.complete)
        #expect(set.referenceTimeNs == fireAt)
        #expect(set.skewNs == 50_000)
        #expect(set.missingCameras == [1, 3])
        #expect(set.frames.map(\.camera) == [0, 2])
        #expect(set.frames[0].latenessNs == 12 && set.frames[0].agentTimestampNs == fireAt + 40_007)
        #expect(set.frames[1].file == "cam2-x/1.png")
        #expect(manifest.cameras.map(\.framesDelivered) == [1, 0, 1, 0])
        #expect(manifest.cameras[1].error == "trigger failed: agent gone")
        #expect(manifest.cameras[3].error == "no photo in the agent's results")
        #expect(manifest.cameras[0].error == nil)
        #expect(manifest.summary.framesDelivered == 2 && manifest.summary.incompleteSets == 1)
    }

    @Test("a photo from every camera is one complete set")
    func completePhoto() throws {
        let manifest = Self.builder(.photo, cameras: 2).photo(
            [Self.frame(0, at: 100), Self.frame(1, at: 130)], fireAt: 90, failures: [:])
        let set = try #require(manifest.sets.first)
        #expect(set.complete && set.missingCameras.isEmpty && set.skewNs == 30)
        #expect(manifest.summary.completeSets == 1)
    }

    @Test("a recording lists its sets in order, its unmatched frames with why, and each camera's counts")
    func recording() throws {
        let period: Int64 = 33_333_333
        let sets = (0..<3).map { number in
            let time = Int64(number) * period
            return SyncSet(
                index: number,
                frames: [
                    Self.frame(0, sequence: UInt64(number), at: time),
                    number == 1 ? nil : Self.frame(1, sequence: UInt64(number), at: time + 100),
                ],
                isComplete: number != 1,
                missingCameras: number == 1 ? [1] : [],
                referenceTime: time + 50,
                skew: number == 1 ? 0 : 100
            )
        }
        let stray = Self.frame(1, sequence: 9, at: 5 * period)
        let manifest = Self.builder(.recording, cameras: 2).recording(
            frameDuration: FrameDuration(framesPerSecond: 30)!,
            sets: sets,
            unmatched: [(frame: stray, reason: "no partner")],
            streams: [
                .init(delivered: 3, dropped: 0, afterEnd: 1),
                .init(delivered: 3, dropped: 2, afterEnd: 0, missing: 4, failure: "stream ended early"),
            ]
        )
        #expect(manifest.kind == "recording")
        #expect(manifest.framesPerSecond == 30)
        #expect(manifest.frameDuration == .init(numerator: 1, denominator: 30))
        #expect(manifest.sets.map(\.index) == [0, 1, 2])
        #expect(manifest.sets.map(\.complete) == [true, false, true])
        #expect(manifest.sets[1].missingCameras == [1])
        #expect(manifest.sets[2].referenceTimeNs == 2 * period + 50)
        #expect(manifest.unmatched.count == 1)
        #expect(manifest.unmatched[0].reason == "no partner" && manifest.unmatched[0].sequence == 9)
        #expect(manifest.cameras.map(\.framesDelivered) == [3, 3])
        #expect(manifest.cameras.map(\.framesDropped) == [0, 2])
        #expect(manifest.cameras.map(\.framesUnmatched) == [0, 1])
        #expect(manifest.cameras.map(\.framesAfterEnd) == [1, 0])
        #expect(manifest.cameras.map(\.framesLost) == [nil, 4])
        #expect(manifest.cameras[1].error == "stream ended early" && manifest.cameras[0].error == nil)
        #expect(manifest.summary.framesDelivered == 6)
        #expect(manifest.summary.droppedFrames == 2)
        #expect(manifest.summary.unmatchedFrames == 1)
        #expect(manifest.summary.completeSets == 2 && manifest.summary.incompleteSets == 1)
    }
}

@Suite("One camera's results combined in a photo's set", .timeLimit(.minutes(1)))
struct FrameCombiningTests {
    func frame(_ file: String, photo: CaptureManifest.Photo?) -> CaptureManifest.Frame {
        CaptureManifest.Frame(
            camera: 0, sequence: 1, file: file, timestampNs: 1, agentTimestampNs: 1, marks: "start_of_exposure", uncertaintyNs: 1, photo: photo)
    }

    func photo(id: String, proxy: Bool? = nil, bracket: Int? = nil, bias: Float? = nil) -> CaptureManifest.Photo {
        CaptureManifest.Photo(
            quality: "quality", framesMerged: proxy == true ? 1 : 8, captureDurationNs: 0, processingDurationNs: 0, note: nil, photoId: id,
            proxy: proxy, bracketIndex: bracket, exposureBias: bias)
    }

    @Test("a deferred photo's final replaces its proxy, whichever arrives first, and keeps the proxy's file")
    func finalReplacesProxy() {
        let proxy = frame("cam0-proxy.png", photo: photo(id: "a-1", proxy: true))
        let final = frame("cam0.png", photo: photo(id: "a-1"))
        for combined in [proxy.combining(final), final.combining(proxy)] {
            #expect(combined.file == "cam0.png" && combined.photo?.proxy == nil && combined.photo?.proxyFile == "cam0-proxy.png")
        }
        // Another photo's final does not replace it.
        #expect(proxy.combining(frame("cam0.png", photo: photo(id: "a-2"))) == proxy)
    }

    @Test("a bracket's images join its first, in order, whichever arrives first")
    func bracketJoins() {
        let images = [(1, Float(-2)), (2, 0), (3, 2)].map { index, bias in
            frame(index == 1 ? "cam0.png" : "cam0-b\(index).png", photo: photo(id: "a-1-\(index)", bracket: index, bias: bias))
        }
        for order in [[0, 1, 2], [2, 0, 1], [1, 2, 0]] {
            let combined = order.dropFirst().reduce(images[order[0]]) { $0.combining(images[$1]) }
            #expect(combined.file == "cam0.png" && combined.photo?.bracketIndex == 1)
            #expect(combined.photo?.brackets?.map(\.index) == [2, 3] && combined.photo?.brackets?.map(\.file) == ["cam0-b2.png", "cam0-b3.png"])
        }
    }
}
