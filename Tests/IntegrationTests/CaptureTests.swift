import CamRigClock
import CamRigCoordinator
import CamRigDeviceModel
import CamRigDevices
import CamRigSecurity
import CamRigTestSupport
import CamRigWire
import Foundation
import NIOCore
import Testing

/// Photos, scheduled triggers and the result spool on real agent processes.
@Suite("Capture, triggers and the spool", .timeLimit(.minutes(3)))
struct CaptureTests {
    func capture(_ client: AgentClient, session: String = "s1") async throws -> WireTriggerFired {
        var capture = WireCapturePhoto()
        capture.deviceID = "synthetic:SYN0001"
        capture.sessionID = session
        guard case .triggerFired(let fired) = try await client.request(.capturePhoto(capture)).frame.envelope.body else {
            throw AgentClientError(.protocolViolation, agent: "?", "no trigger_fired")
        }
        return fired
    }

    func fetch(_ client: AgentClient, session: String = "s1") async throws -> [(WirePhotoResult, ByteBuffer)] {
        try await client.spooledResults(session: session)
    }

    @Test("kill -9 in the middle of a capture: after restart every result is offered again, and after acknowledgement never again")
    func crashAndRestart() async throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        let spool = NSTemporaryDirectory() + "camrig-spool-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: spool) }
        let arguments = ["--tls-dir", pki.path, "--synthetic", "1", "--spool-dir", spool]

        var agent = try await AgentProcess.start(arguments)
        var client = try await agent.connect(pki)
        var captured: [String] = []
        for _ in 0..<3 { captured += try await capture(client).resultIds }
        // A capture in flight when the agent dies: either stored whole or not at all.
        var inFlight = WireCapturePhoto()
        inFlight.deviceID = "synthetic:SYN0001"
        inFlight.sessionID = "s1"
        async let lost = try? client.request(.capturePhoto(inFlight))
        await agent.crash()
        _ = await lost
        #expect(captured.count == 3)

        agent = try await AgentProcess.start(arguments)
        client = try await agent.connect(pki)
        let offered = try await fetch(client)
        let ids = offered.map(\.0.resultID)
        #expect(Set(captured).isSubset(of: Set(ids)), "every acknowledged-later result survives the crash")
        #expect(ids.count <= 4)
        for (result, image) in offered {
            #expect(result.deviceID == "synthetic:SYN0001")
            #expect(image.readableBytes == 640 * 480 * 2)
            #expect(SyntheticFrameHeader.decode(image, format: .yuyv)?.sequence == result.sequence)
        }
        var acknowledge = WireAcknowledgeResults()
        acknowledge.resultIds = ids
        _ = try await client.request(.acknowledgeResults(acknowledge))
        #expect(try await fetch(client).isEmpty)
        await agent.stop()

        agent = try await AgentProcess.start(arguments)
        client = try await agent.connect(pki)
        #expect(try await fetch(client).isEmpty, "acknowledged results are gone for good")
        await client.close()
        await agent.stop()
    }

    @Test("a trigger fires at its time, its photo was exposed after it, and a late one is refused")
    func triggers() async throws {
        let (pki, agent) = try await AgentProcess.secured(["--synthetic", "1"])
        defer {
            agent.terminate()
            pki.remove()
        }
        let client = try await agent.connect(pki)
        #expect(client.welcome.capabilities.contains("capture"))

        var trigger = WireScheduleTrigger()
        trigger.triggerID = "t1"
        trigger.action = .capturePhoto
        trigger.deviceIds = ["synthetic:SYN0001"]
        trigger.sessionID = "s2"
        // Agent and test share this machine's CLOCK_MONOTONIC.
        trigger.fireAtNs = HostClock.monotonicNow() + 100_000_000
        var messages: [WireFrame] = []
        for try await message in client.stream(.scheduleTrigger(trigger)) { messages.append(message) }
        guard messages.count == 2, case .triggerScheduled = messages[0].envelope.body, case .triggerFired(let fired) = messages[1].envelope.body else {
            Issue.record("expected trigger_scheduled then trigger_fired, got \(messages.map(\.envelope.messageName))")
            return
        }
        #expect(fired.latenessNs >= 0)
        #expect(fired.firedAt.nanoseconds - fired.latenessNs == trigger.fireAtNs)
        #expect(fired.firedAt.marks == .triggerFire)
        let results = try await fetch(client, session: "s2")
        #expect(results.map(\.0.resultID) == fired.resultIds)
        #expect(results.first.map { $0.0.captureTime.nanoseconds >= trigger.fireAtNs } == true)

        trigger.triggerID = "late"
        trigger.fireAtNs = HostClock.monotonicNow() - 1_000_000
        let late = await #expect(throws: AgentClientError.self) { try await client.request(.scheduleTrigger(trigger)) }
        #expect(late?.code == .triggerLate)
        #expect(late?.message.contains("was due") == true)
        await client.close()
    }

    @Test("a START_STREAM trigger starts the stream at T: only frames exposed from T on are sent")
    func streamAtT() async throws {
        let (pki, agent) = try await AgentProcess.secured(["--synthetic", "1"])
        defer {
            agent.terminate()
            pki.remove()
        }
        let client = try await agent.connect(pki)
        // Someone already watches the device, so it streams before T.
        let early = client.stream(.startStream({ var start = WireStartStream(); start.deviceID = "synthetic:SYN0001"; return start }()))
        var iterator = early.makeAsyncIterator()
        _ = try await iterator.next()

        var trigger = WireScheduleTrigger()
        trigger.triggerID = "rec"
        trigger.action = .startStream
        trigger.deviceIds = ["synthetic:SYN0001"]
        trigger.fireAtNs = HostClock.monotonicNow() + 150_000_000
        var kinds: [String] = []
        var stamps: [Int64] = []
        var streamID = ""
        for try await message in client.stream(.scheduleTrigger(trigger)) {
            kinds.append(message.envelope.messageName)
            switch message.envelope.body {
            case .streamStarted(let started):
                streamID = started.streamID
            case .videoFrame(let frame):
                stamps.append(frame.timestamp.nanoseconds)
                if stamps.count == 10 {
                    var stop = WireStopStream()
                    stop.streamID = streamID
                    _ = try await client.request(.stopStream(stop))
                }
            default:
                break
            }
        }
        #expect(Array(kinds.prefix(3)) == ["trigger_scheduled", "trigger_fired", "stream_started"])
        #expect(kinds.last == "stream_ended")
        #expect(stamps.count >= 10)
        #expect(stamps.allSatisfy { $0 >= trigger.fireAtNs }, "no frame from before T")

        trigger.triggerID = "two"
        trigger.deviceIds = ["synthetic:SYN0001", "synthetic:SYN0001"]
        trigger.fireAtNs = HostClock.monotonicNow() + 150_000_000
        let refused = await #expect(throws: AgentClientError.self) { try await client.request(.scheduleTrigger(trigger)) }
        #expect(refused?.code == .invalidArgument)

        // A stream started by a trigger takes no turn in the camera's photo pipeline: a photo right after
        // it is made at once (the camera's photos wait only for the camera's photos).
        let started = ContinuousClock.now
        var photo = WireCapturePhoto()
        photo.deviceID = "synthetic:SYN0001"
        photo.sessionID = "after-stream"
        guard case .triggerFired(let fired) = try await client.request(.capturePhoto(photo)).frame.envelope.body else {
            Issue.record("the photo after the stream was not fired")
            return
        }
        #expect(fired.resultIds.count == 1)
        #expect(ContinuousClock.now - started < .seconds(10))
        await client.close()
    }

    @Test("a full spool refuses new captures and keeps the old ones")
    func spoolFull() async throws {
        let (pki, agent) = try await AgentProcess.secured(["--synthetic", "1", "--spool-size-mb", "1"])
        defer {
            agent.terminate()
            pki.remove()
        }
        let client = try await agent.connect(pki)
        let first = try await capture(client)
        let full = await #expect(throws: AgentClientError.self) { try await capture(client) }
        #expect(full?.code == .spoolFull)
        #expect(full?.message.contains("acknowledge") == true)
        #expect(try await fetch(client).map(\.0.resultID) == first.resultIds)
        await client.close()
    }
    @Test("photo quality prioritization: each photo says how it was made, and a quality photo is at least 6 dB cleaner than a speed photo")
    func qualityLevels() async throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        let agent = try await AgentProcess.start(["--tls-dir", pki.path, "--synthetic", "1"])
        defer { agent.terminate() }
        let client = try await agent.connect(pki)
        // The agent's camera as it draws the scene (seed 1), for the noise-free truth.
        let camera = SyntheticCamera(SyntheticCameraConfiguration(serial: "SYN0001", seed: 1))
        let format = try #require(try camera.formats().first { $0.id == "YUYV-640x480" })
        var psnr: [WireQualityPrioritization: Double] = [:]
        for level in [WireQualityPrioritization.speed, .balanced, .quality] {
            var capture = WireCapturePhoto()
            capture.deviceID = "synthetic:SYN0001"
            capture.sessionID = "quality-\(level.rawValue)"
            capture.settings.uniqueID = UInt64(level.rawValue)
            capture.settings.qualityPrioritization = level
            let reply = try await client.request(.capturePhoto(capture)).frame.envelope.body
            guard case .triggerFired(let fired) = reply else {
                Issue.record("a \(level) photo was answered with \(reply)")
                continue
            }
            let results = try await fetch(client, session: capture.sessionID)
            try #require(results.count == 1)
            let (result, image) = results[0]
            #expect(fired.resultIds == [result.resultID])
            #expect(result.resolved.qualityPrioritization == level)
            #expect(result.resolved.framesMerged == (level == .quality ? 8 : 1))
            #expect(result.resolved.note.isEmpty)
            #expect(result.resolved.dimensions.width == 640 && result.resolved.dimensions.height == 480)
            if level == .quality {
                // Eight frames from the instant on: the capture stage lasted until the last was taken, at least
                // seven frame periods after the first.
                #expect(result.resolved.captureDurationNs >= 7 * 1_000_000_000 / 60)
            }
            let header = try #require(SyntheticFrameHeader.decode(image, format: .yuyv))
            #expect(header.sequence == result.sequence)
            let truth = camera.noiseFreeFrame(format: format, header: header, trueTime: header.timestamp)
            psnr[level] = PhotoProcessing.psnr(image, against: truth, from: SyntheticScene.embeddedDataRows * 1280, stride: 2)
        }
        let speed = try #require(psnr[.speed])
        let quality = try #require(psnr[.quality])
        #expect(quality >= speed + 6, "quality \(quality) dB against speed \(speed) dB")
        await client.close()
    }

    @Test("photo outputs: a JPEG made on the agent arrives as JPEG; RAW asked of a YUYV camera arrives as the frame, saying why")
    func outputTypes() async throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        let agent = try await AgentProcess.start(["--tls-dir", pki.path, "--synthetic", "1"])
        defer { agent.terminate() }
        let client = try await agent.connect(pki)
        for output in [WirePhotoOutputType.jpeg, .dng] {
            var capture = WireCapturePhoto()
            capture.deviceID = "synthetic:SYN0001"
            capture.sessionID = "output-\(output.rawValue)"
            capture.settings.outputType = output
            _ = try await client.request(.capturePhoto(capture))
            let results = try await fetch(client, session: capture.sessionID)
            try #require(results.count == 1)
            let (result, image) = results[0]
            if output == .jpeg {
                #expect(result.resolved.outputType == .jpeg && result.resolved.note.isEmpty)
                #expect(PixelFormat(rawValue: result.pixelFormat) == .jpeg)
                #expect(image.getBytes(at: image.readerIndex, length: 2) == [0xFF, 0xD8], "a JPEG starts with SOI")
            } else {
                #expect(result.resolved.outputType == .frame)
                #expect(result.resolved.note.contains("Bayer"), "the note says why: \(result.resolved.note)")
                #expect(PixelFormat(rawValue: result.pixelFormat) == .yuyv)
                #expect(image.readableBytes == 640 * 480 * 2)
            }
        }
        await client.close()
    }

    @Test("camrig capture --photo --quality quality --jpeg: the photo is a JPEG file and the manifest says how each agent made it")
    func captureCommandQuality() async throws {
        let rig = try await CommandLineRig(cameras: 1)
        defer { rig.remove() }
        let result = try await rig.camrig(["capture", "--photo", "--quality", "quality", "--jpeg", "--json"])
        try #require(result.status == 0, "camrig capture: \(result.stderr)")
        let directory = try #require(try SessionTests.object(result.stdout)["directory"] as? String)
        let manifest = try CommandLineRig.manifest(in: directory)
        let frame = try #require(try CommandLineRig.frames(in: directory).first)
        let file = try #require(frame["file"] as? String)
        #expect(file.hasSuffix(".jpg"))
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: directory + "/" + file)))
        #expect(bytes.starts(with: [0xFF, 0xD8]))
        let photo = try #require(frame["photo"] as? [String: Any], "the manifest records how the photo was made")
        #expect(photo["quality"] as? String == "quality")
        #expect(photo["frames_merged"] as? Int == 8)
        // The set's contact sheet: a PNG of one labelled 320-pixel tile (the camera's JPEG decoded).
        let sheet = try #require(manifest["contact_sheet"] as? String)
        let png = try [UInt8](Data(contentsOf: URL(fileURLWithPath: directory + "/" + sheet)))
        #expect(png.starts(with: [0x89, 0x50, 0x4E, 0x47]))
        let width = png[16..<20].reduce(0) { $0 << 8 | Int($1) }
        let height = png[20..<24].reduce(0) { $0 << 8 | Int($1) }
        #expect(width == 8 + 320 + 8 && height == 20 + 20 + 240 + 8 + 8, "one tile of 320×240 under its label: \(width)×\(height)")
    }

    @Test("prepared photo settings: the camera keeps streaming, matching captures say they were prepared, speed takes the frame nearest the request, and releasing frees the camera")
    func preparedSettings() async throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        let agent = try await AgentProcess.start(["--tls-dir", pki.path, "--synthetic", "1"])
        defer { agent.terminate() }
        let client = try await agent.connect(pki)
        let device = "synthetic:SYN0001"
        var speed = WirePhotoSettings()
        speed.qualityPrioritization = .speed
        var prepare = WirePreparePhotoSettings()
        prepare.deviceID = device
        prepare.settings = [speed]
        let prepared = try await client.request(.preparePhotoSettings(prepare)).frame.envelope.body
        guard case .ok = prepared else {
            Issue.record("PreparePhotoSettings was answered with \(prepared)")
            return
        }
        // While prepared the camera streams: its format cannot change.
        var lock = WireLock()
        lock.deviceID = device
        guard case .lease(let lease) = try await client.request(.lock(lock)).frame.envelope.body else {
            Issue.record("no lease")
            return
        }
        var configure = WireConfigure()
        configure.deviceID = device
        configure.leaseID = lease.lease.leaseID
        configure.formatID = "YUYV-1280x720"
        let busy = await #expect(throws: AgentClientError.self, "a prepared camera's format cannot change") {
            try await client.request(.configure(configure))
        }
        #expect(busy?.code == .deviceBusy)

        try await Task.sleep(for: .milliseconds(200))
        for (index, settings) in [speed, WirePhotoSettings()].enumerated() {
            var capture = WireCapturePhoto()
            capture.deviceID = device
            capture.sessionID = "prepared-\(index)"
            capture.settings = settings
            capture.settings.uniqueID = UInt64(index + 1)
            let reply = try await client.request(.capturePhoto(capture)).frame.envelope.body
            guard case .triggerFired(let fired) = reply else {
                Issue.record("a photo was answered with \(reply)")
                continue
            }
            let results = try await fetch(client, session: capture.sessionID)
            try #require(results.count == 1)
            let resolved = results[0].0.resolved
            if index == 0 {
                #expect(resolved.prepared, "speed matches the prepared settings")
                // The camera was already streaming: the photo is its newest frame, exposed before the request
                // (within two frame periods), not one exposed after it; its capture stage still lasted zero or more.
                let before = fired.firedAt.nanoseconds - results[0].0.exposureStart.nanoseconds
                #expect(before > 0 && before <= 2 * 1_000_000_000 / 60, "exposed \(before) ns before the request")
                #expect(resolved.captureDurationNs >= 0, "\(resolved.captureDurationNs) ns")
            } else {
                #expect(!resolved.prepared, "balanced was not prepared, and works all the same")
                #expect(resolved.qualityPrioritization == .balanced)
            }
        }

        prepare.settings = []
        guard case .ok = try await client.request(.preparePhotoSettings(prepare)).frame.envelope.body else {
            Issue.record("releasing was not answered Ok")
            return
        }
        let configured = try await client.request(.configure(configure)).frame.envelope.body
        guard case .deviceState = configured else {
            Issue.record("once released, the format change was answered with \(configured)")
            return
        }
        prepare.deviceID = "synthetic:NOPE"
        prepare.settings = [speed]
        let missing = await #expect(throws: AgentClientError.self, "an unknown device cannot be prepared") {
            try await client.request(.preparePhotoSettings(prepare))
        }
        #expect(missing?.code == .deviceNotFound)
        await client.close()
    }

    @Test("fast capture prioritization: quality photos requested in quick succession step down to balanced and say so; without it they stay quality")
    func fastCapturePrioritization() async throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        let agent = try await AgentProcess.start(["--tls-dir", pki.path, "--synthetic", "1"])
        defer { agent.terminate() }
        let client = try await agent.connect(pki)
        for fast in [true, false] {
            let session = "fast-\(fast)"
            try await withThrowingTaskGroup(of: Void.self) { group in
                for shot in 0..<3 {
                    var capture = WireCapturePhoto()
                    capture.deviceID = "synthetic:SYN0001"
                    capture.sessionID = session
                    capture.settings.uniqueID = UInt64(shot + 1)
                    capture.settings.qualityPrioritization = .quality
                    capture.settings.fastCapturePrioritization = fast
                    group.addTask { _ = try await client.request(.capturePhoto(capture)) }
                }
                try await group.waitForAll()
            }
            let resolved = try await fetch(client, session: session).map(\.0.resolved)
            try #require(resolved.count == 3)
            let stepped = resolved.filter { $0.qualityPrioritization == .balanced }
            if fast {
                #expect(stepped.count == 2, "the two photos after the first are made as balanced")
                #expect(stepped.allSatisfy { $0.note.contains("fast capture prioritization") && $0.framesMerged == 1 })
                #expect(resolved.filter { $0.qualityPrioritization == .quality }.count == 1)
            } else {
                #expect(stepped.isEmpty, "without fast capture prioritization every photo is made at quality")
            }
        }
        await client.close()
    }
}
