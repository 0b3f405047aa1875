import CamRigCoordinator
import CamRigDevices
import CamRigTestSupport
import CamRigWire
import Foundation
import NIOCore
import Testing

/// The photo output's responsive capture and deferred delivery, and photo stage events, on real agent processes.
@Suite("Responsive capture and deferred photos", .timeLimit(.minutes(3)))
struct DeferredCaptureTests {
    static let device = "synthetic:SYN0001"

    /// Configures the device's photo output under a lease (the lease ends with the connection; the
    /// configuration stays).
    func configurePhotoOutput(_ client: AgentClient, responsive: Bool, deferred: Bool) async throws {
        var lock = WireLock()
        lock.deviceID = Self.device
        guard case .lease(let lease) = try await client.request(.lock(lock)).frame.envelope.body else {
            throw AgentClientError(.protocolViolation, agent: "?", "no lease")
        }
        var configure = WireConfigure()
        configure.deviceID = Self.device
        configure.leaseID = lease.lease.leaseID
        configure.photoOutput.responsiveCapture = responsive
        configure.photoOutput.deferredDelivery = deferred
        guard case .deviceState(let state) = try await client.request(.configure(configure)).frame.envelope.body else {
            throw AgentClientError(.protocolViolation, agent: "?", "no device state")
        }
        #expect(state.photoOutput.responsiveCapture == responsive && state.photoOutput.deferredDelivery == deferred)
    }

    /// One quality photo with stage events: the events in arrival order and the firing.
    func capture(_ client: AgentClient, session: String) async throws -> (stages: [WirePhotoStageEvent], fired: WireTriggerFired) {
        var capture = WireCapturePhoto()
        capture.deviceID = Self.device
        capture.sessionID = session
        capture.settings.uniqueID = UInt64.random(in: 1...UInt64.max)
        capture.settings.qualityPrioritization = .quality
        capture.settings.stageEvents = true
        var stages: [WirePhotoStageEvent] = []
        for try await message in client.stream(.capturePhoto(capture)) {
            switch message.envelope.body {
            case .photoStage(let stage): stages.append(stage)
            case .triggerFired(let fired): return (stages, fired)
            case .error(let error): throw AgentClientError(.protocolViolation, agent: "?", "capture failed: \(error.message)")
            default: continue
            }
        }
        throw AgentClientError(.connectionClosed, agent: "?", "the capture ended without firing")
    }

    func fetch(_ client: AgentClient, session: String) async throws -> [(WirePhotoResult, ByteBuffer)] {
        try await client.spooledResults(session: session)
    }

    func acknowledge(_ client: AgentClient, _ ids: [String]) async throws {
        var acknowledge = WireAcknowledgeResults()
        acknowledge.resultIds = ids
        _ = try await client.request(.acknowledgeResults(acknowledge))
    }

    @Test("deferred delivery: the stages come in order, a half-size proxy is in the spool at once, and after kill -9 and a restart FinalizePhotos makes the merged final under the same photo id")
    func deferredSurvivesRestart() async throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        let spool = NSTemporaryDirectory() + "camrig-deferred-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: spool) }
        let arguments = ["--tls-dir", pki.path, "--synthetic", "1", "--spool-dir", spool]
        var agent = try await AgentProcess.start(arguments)
        var client = try await agent.connect(pki)
        try await configurePhotoOutput(client, responsive: true, deferred: true)

        let (stages, fired) = try await capture(client, session: "d1")
        #expect(stages.map(\.stage) == [.willBeginCapture, .willCapture, .didCapture, .didFinishCapture, .didFinishProcessing])
        let begin = try #require(stages.first)
        #expect(begin.resolved.qualityPrioritization == .quality && begin.resolved.framesMerged == 8)
        #expect(begin.resolved.dimensions.width == 640)
        let photoID = begin.photoID
        #expect(!photoID.isEmpty && stages.allSatisfy { $0.photoID == photoID })
        #expect(fired.resultIds == [photoID + ".proxy"], "the firing reports the proxy")
        // The agent dies at once, before it has been idle long enough to make the final itself.
        await agent.crash()
        await client.close()

        agent = try await AgentProcess.start(arguments)
        client = try await agent.connect(pki)
        var finalize = WireFinalizePhotos()
        finalize.photoIds = [photoID]
        guard case .ok = try await client.request(.finalizePhotos(finalize), timeout: .seconds(60)).frame.envelope.body else {
            Issue.record("FinalizePhotos was not answered with Ok")
            return
        }
        let results = try await fetch(client, session: "d1")
        let proxy = try #require(results.first { $0.0.resultID == photoID + ".proxy" }?.0, "the proxy survives the crash")
        #expect(proxy.resolved.deferredProxy && proxy.photoID == photoID)
        #expect(proxy.dimensions.width == 320 && proxy.dimensions.height == 240, "the proxy is binned to half size")
        #expect(proxy.resolved.framesMerged == 1 && proxy.resolved.note.contains("deferred"))
        let (final, image) = try #require(results.first { $0.0.resultID == photoID }, "the final is made after the restart")
        #expect(!final.resolved.deferredProxy && final.photoID == photoID)
        #expect(final.resolved.qualityPrioritization == .quality && final.resolved.framesMerged == 8)
        #expect(final.dimensions.width == 640 && final.dimensions.height == 480 && image.readableBytes == 640 * 480 * 2)
        #expect(final.resolved.processingDurationNs > 0)
        #expect(final.sequence == proxy.sequence, "proxy and final are of the same reference frame")

        // A finalized photo asked for again is Ok (its final is held); a photo never taken is NOT_FOUND.
        guard case .ok = try await client.request(.finalizePhotos(finalize)).frame.envelope.body else {
            Issue.record("finalizing a photo whose final is held was not Ok")
            return
        }
        finalize.photoIds = ["agent-nobody-0"]
        let unknown = await #expect(throws: AgentClientError.self) { try await client.request(.finalizePhotos(finalize)) }
        #expect(unknown?.code == .notFound)
        try await acknowledge(client, results.map(\.0.resultID))
        await client.close()
        await agent.stop()
    }

    @Test("a deferred photo whose saved frames are damaged is set aside, and its proxy is delivered as its final, saying why; the agent keeps serving")
    func damagedDeferredPhoto() async throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        let spool = NSTemporaryDirectory() + "camrig-deferred-bad-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: spool) }
        let arguments = ["--tls-dir", pki.path, "--synthetic", "1", "--spool-dir", spool]
        var agent = try await AgentProcess.start(arguments)
        var client = try await agent.connect(pki)
        try await configurePhotoOutput(client, responsive: false, deferred: true)
        let (stages, _) = try await capture(client, session: "bad")
        let photoID = try #require(stages.first?.photoID)
        await agent.crash()
        await client.close()
        // Half of the saved file is lost.
        let saved = URL(fileURLWithPath: spool + "/deferred/\(photoID).photo")
        let bytes = try Data(contentsOf: saved)
        try bytes.prefix(bytes.count / 2).write(to: saved)

        agent = try await AgentProcess.start(arguments)
        client = try await agent.connect(pki)
        var finalize = WireFinalizePhotos()
        finalize.photoIds = [photoID]
        guard case .ok = try await client.request(.finalizePhotos(finalize)).frame.envelope.body else {
            Issue.record("FinalizePhotos was not answered with Ok")
            return
        }
        #expect(FileManager.default.fileExists(atPath: saved.path + ".unreadable"), "the damaged file is set aside")
        let results = try await fetch(client, session: "bad")
        #expect(Set(results.map(\.0.resultID)) == [photoID + ".proxy", photoID])
        // Its final is its proxy, saying why: the capture still gets a photo, once.
        let final = try #require(results.first { $0.0.resultID == photoID })
        #expect(!final.0.resolved.deferredProxy && final.0.dimensions.width == 320)
        #expect(final.0.resolved.note.contains("cannot be read") && final.0.resolved.note.contains("delivered as its proxy"), "\(final.0.resolved.note)")
        _ = try await capture(client, session: "after")
        await client.close()
        await agent.stop()
    }

    @Test("capture readiness events: not ready while a capture stage runs, then, without responsive capture, while the photo is processed; ready after")
    func captureReadiness() async throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        let agent = try await AgentProcess.start(["--tls-dir", pki.path, "--synthetic", "1"])
        defer { agent.terminate() }
        let client = try await agent.connect(pki)
        let watcher = try await agent.connect(pki)
        var subscribe = WireSubscribe()
        subscribe.kinds = [.captureReadiness]
        let events = watcher.stream(.subscribe(subscribe))
        var iterator = events.makeAsyncIterator()
        _ = try await iterator.next()  // Ok
        for responsive in [false, true] {
            try await configurePhotoOutput(client, responsive: responsive, deferred: false)
            _ = try await capture(client, session: "readiness-\(responsive)")
            var seen: [WireCaptureReadiness] = []
            while seen.last != .ready, let message = try await iterator.next() {
                if case .event(let event) = message.envelope.body, event.kind == .captureReadiness {
                    #expect(event.deviceID == Self.device)
                    seen.append(event.captureReadiness)
                }
            }
            #expect(
                seen == (responsive ? [.notReadyWaitingForCapture, .ready] : [.notReadyWaitingForCapture, .notReadyWaitingForProcessing, .ready]),
                "responsive \(responsive): \(seen)")
        }
        await watcher.close()
        await client.close()
    }

    @Test("deferred finals are made on their own once the agent is idle")
    func finalWhenIdle() async throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        let agent = try await AgentProcess.start(["--tls-dir", pki.path, "--synthetic", "1"])
        defer { agent.terminate() }
        let client = try await agent.connect(pki)
        try await configurePhotoOutput(client, responsive: false, deferred: true)
        let (stages, fired) = try await capture(client, session: "idle")
        let photoID = try #require(stages.first?.photoID)
        #expect(fired.resultIds == [photoID + ".proxy"])
        var final: WirePhotoResult?
        _ = try await eventually(timeout: .seconds(20), pollingEvery: .milliseconds(250)) {
            final = try await fetch(client, session: "idle").first { $0.0.resultID == photoID }?.0
            return final != nil
        }
        let made = try #require(final, "the agent made the final within 20 s of idling")
        #expect(made.resolved.framesMerged == 8 && !made.resolved.deferredProxy)
        await client.close()
    }

    @Test("responsive capture: a second photo begins while the first is still processed; without it, only once the first is in the spool")
    func responsiveCapture() async throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        let agent = try await AgentProcess.start(["--tls-dir", pki.path, "--synthetic", "1"])
        defer { agent.terminate() }
        let client = try await agent.connect(pki)
        for responsive in [false, true] {
            try await configurePhotoOutput(client, responsive: responsive, deferred: false)
            async let first = capture(client, session: "r-\(responsive)-1")
            try await Task.sleep(for: .milliseconds(30))
            async let second = capture(client, session: "r-\(responsive)-2")
            let (a, b) = try await (first, second)
            let firstProcessed = try #require(a.stages.first { $0.stage == .didFinishProcessing }?.timeNs)
            let firstCaptured = try #require(a.stages.first { $0.stage == .didFinishCapture }?.timeNs)
            let secondBegan = try #require(b.stages.first { $0.stage == .willCapture }?.timeNs)
            #expect(secondBegan >= firstCaptured, "one capture stage at a time")
            if responsive {
                #expect(secondBegan < firstProcessed, "with responsive capture the second photo began while the first was processed")
            } else {
                #expect(secondBegan >= firstProcessed, "without responsive capture the second photo waited for the first to be processed")
            }
        }
        await client.close()
    }
}

/// `camrig capture --deferred` and `camrig captures finalize` through the command line.
@Suite("Deferred photos from the command line", .timeLimit(.minutes(4)))
struct DeferredCommandTests {
    @Test("camrig capture --deferred stores proxies and says finals are to come; camrig captures finalize replaces them with the merged finals, keeping the proxies beside them")
    func captureAndFinalize() async throws {
        let rig = try await CommandLineRig(cameras: 2)
        defer { rig.remove() }
        let captured = try await rig.camrig(["capture", "--photo", "--quality", "quality", "--deferred", "--json"])
        try #require(captured.status == 0, "camrig capture: \(captured.stderr)")
        let output = try SessionTests.object(captured.stdout)
        #expect(output["awaiting_finals"] as? Int == 2)
        let id = try #require(output["id"] as? String)
        let directory = try #require(output["directory"] as? String)
        func frames() async throws -> [[String: Any]] { try CommandLineRig.frames(in: directory) }
        let proxies = try await frames()
        #expect(proxies.count == 2)
        for frame in proxies {
            let photo = try #require(frame["photo"] as? [String: Any])
            #expect(photo["proxy"] as? Bool == true)
            #expect((frame["file"] as? String)?.contains("-proxy") == true)
        }

        let before = try await Executables.run("camrig", ["captures", "list", "--out", rig.captures, "--json"], timeout: 30)
        let pending = try #require(try SessionTests.object(before.stdout)["captures"] as? [[String: Any]]).first { $0["id"] as? String == id }
        #expect(pending?["missing"] as? Int == 2, "the catalog counts finals still held by agents")

        let finalized = try await rig.camrig(["captures", "finalize", id, "--json"])
        try #require(finalized.status == 0, "camrig captures finalize: \(finalized.stderr)")
        let finals = try await frames()
        #expect(finals.count == 2)
        for frame in finals {
            let photo = try #require(frame["photo"] as? [String: Any])
            #expect(photo["proxy"] == nil, "the final replaced the proxy")
            #expect(photo["frames_merged"] as? Int == 8)
            let file = try #require(frame["file"] as? String)
            let proxyFile = try #require(photo["proxy_file"] as? String)
            #expect(!file.contains("-proxy") && proxyFile.contains("-proxy"))
            #expect(FileManager.default.fileExists(atPath: directory + "/" + file))
            #expect(FileManager.default.fileExists(atPath: directory + "/" + proxyFile))
        }
        let listed = try await Executables.run("camrig", ["captures", "list", "--out", rig.captures, "--json"], timeout: 30)
        try #require(listed.status == 0)
        let entries = try #require(try SessionTests.object(listed.stdout)["captures"] as? [[String: Any]])
        let entry = try #require(entries.first { $0["id"] as? String == id })
        #expect(entry["missing"] as? Int == 0, "the catalog no longer counts the finals as held by agents")
    }
}

/// Exposure brackets on a real agent and from the command line.
@Suite("Exposure brackets", .timeLimit(.minutes(3)))
struct BracketTests {
    /// The mean luma of a YUYV image below its embedded data rows.
    static func meanLuma(_ image: ByteBuffer, width: Int) -> Double {
        let skip = SyntheticScene.embeddedDataRows * width * 2
        return image.withUnsafeReadableBytes { bytes in
            var sum = 0
            var count = 0
            for index in stride(from: skip, to: bytes.count, by: 2) {
                sum += Int(bytes[index])
                count += 1
            }
            return Double(sum) / Double(max(count, 1))
        }
    }

    @Test("a bracket of -1, 0 and +1 EV makes three images, each its own result, darker to brighter, and leaves the camera's exposure as it was")
    func bracketOnAgent() async throws {
        let pki = try TestPKI()
        defer { pki.remove() }
        let agent = try await AgentProcess.start(["--tls-dir", pki.path, "--synthetic", "1"])
        defer { agent.terminate() }
        let client = try await agent.connect(pki)
        var capture = WireCapturePhoto()
        capture.deviceID = DeferredCaptureTests.device
        capture.sessionID = "bracket"
        capture.settings.uniqueID = 7
        capture.settings.qualityPrioritization = .quality
        capture.settings.bracketExposureBiases = [-1, 0, 1]
        guard case .triggerFired(let fired) = try await client.request(.capturePhoto(capture)).frame.envelope.body else {
            Issue.record("the bracket was not fired")
            return
        }
        #expect(fired.resultIds.count == 3)
        let results = try await DeferredCaptureTests().fetch(client, session: "bracket").sorted { $0.0.resolved.bracketIndex < $1.0.resolved.bracketIndex }
        try #require(results.count == 3)
        #expect(results.map(\.0.resolved.bracketIndex) == [1, 2, 3])
        #expect(results.map(\.0.resolved.exposureBias) == [-1, 0, 1])
        #expect(results.allSatisfy { $0.0.resolved.qualityPrioritization == .balanced && $0.0.resolved.note.contains("bracket") })
        #expect(Set(results.map(\.0.sequence)).count == 3, "one frame per bias")
        let luma = results.map { Self.meanLuma($0.1, width: 640) }
        #expect(luma[0] + 10 < luma[1] && luma[1] + 10 < luma[2], "darker to brighter: \(luma)")

        // The camera's own exposure is as before: a photo now matches the middle image's brightness.
        capture.settings.bracketExposureBiases = []
        capture.sessionID = "after"
        _ = try await client.request(.capturePhoto(capture))
        let after = try #require(try await DeferredCaptureTests().fetch(client, session: "after").first)
        #expect(abs(Self.meanLuma(after.1, width: 640) - luma[1]) < 10)
        await client.close()
    }

    @Test("camrig capture --bracket -2,0,2: the set holds each camera's first image and lists the others under it")
    func bracketCommand() async throws {
        let rig = try await CommandLineRig(cameras: 2)
        defer { rig.remove() }
        let refused = try await rig.camrig(["capture", "--photo", "--bracket", "-2,x"], timeout: 30)
        #expect(refused.status != 0 && refused.stderr.contains("--bracket"))

        let captured = try await rig.camrig(["capture", "--photo", "--bracket", "-2,0,2", "--json"])
        try #require(captured.status == 0, "camrig capture: \(captured.stderr)")
        let directory = try #require(try SessionTests.object(captured.stdout)["directory"] as? String)
        #expect(try CommandLineRig.manifest(in: directory)["state"] as? String == "complete")
        let frames = try CommandLineRig.frames(in: directory)
        #expect(frames.count == 2)
        for frame in frames {
            let photo = try #require(frame["photo"] as? [String: Any])
            #expect(photo["bracket_index"] as? Int == 1)
            #expect(photo["exposure_bias"] as? Double == -2)
            let brackets = try #require(photo["brackets"] as? [[String: Any]])
            #expect(brackets.map { $0["index"] as? Int } == [2, 3])
            #expect(brackets.map { $0["exposure_bias"] as? Double } == [0, 2])
            let files = [frame["file"] as? String] + brackets.map { $0["file"] as? String }
            #expect(Set(files).count == 3, "each image has a file of its own: \(files)")
            for file in files {
                let file = try #require(file)
                #expect(FileManager.default.fileExists(atPath: directory + "/" + file), "\(file) is in the capture")
            }
        }
    }
}

/// A camera's photo output configured from the command line.
@Suite("Photo output from the command line", .timeLimit(.minutes(3)))
struct PhotoOutputCommandTests {
    @Test("camrig device set changes one photo output setting and keeps the others; a capture follows it, and --no-deferred turns deferral off")
    func deviceSetPhotoOutput() async throws {
        let rig = try await CommandLineRig(cameras: 1)
        defer { rig.remove() }
        let camera = "agent-1/synthetic:SYN0001"
        func state() async throws -> [String: Any] {
            let got = try await rig.camrig(["device", "get", camera, "--json"], timeout: 60)
            try #require(got.status == 0, "camrig device get: \(got.stderr)")
            return try #require(try SessionTests.object(got.stdout)["state"] as? [String: Any])
        }
        #expect(try await state()["deferred"] as? String == "off")
        let set = try await rig.camrig(["device", "set", camera, "deferred=on", "responsive=on"], timeout: 60)
        try #require(set.status == 0, "camrig device set: \(set.stderr)")
        let limited = try await rig.camrig(["device", "set", camera, "max-quality=balanced"], timeout: 60)
        try #require(limited.status == 0, "camrig device set: \(limited.stderr)")
        let now = try await state()
        #expect(now["deferred"] as? String == "on" && now["responsive"] as? String == "on", "one key changed, the others kept: \(now)")
        #expect(now["max-quality"] as? String == "balanced")
        let wrong = try await rig.camrig(["device", "set", camera, "deferred=maybe"], timeout: 60)
        #expect(wrong.status != 0 && wrong.stderr.contains("deferred=maybe"))

        // At most balanced: a quality request is made as balanced, says so, and so is not deferred.
        let limitedCapture = try await rig.camrig(["capture", "--photo", "--quality", "quality", "--json"])
        try #require(limitedCapture.status == 0, "camrig capture: \(limitedCapture.stderr)")
        let limitedDirectory = try #require(try SessionTests.object(limitedCapture.stdout)["directory"] as? String)
        let limitedPhoto = try #require(try CommandLineRig.frames(in: limitedDirectory).first?["photo"] as? [String: Any])
        #expect(limitedPhoto["quality"] as? String == "balanced" && (limitedPhoto["note"] as? String)?.contains("at most balanced") == true)
        #expect(limitedPhoto["proxy"] == nil)

        _ = try await rig.camrig(["device", "set", camera, "max-quality=quality"], timeout: 60)
        let deferred = try await rig.camrig(["capture", "--photo", "--quality", "quality", "--json"])
        try #require(deferred.status == 0, "camrig capture: \(deferred.stderr)")
        #expect(try SessionTests.object(deferred.stdout)["awaiting_finals"] as? Int == 1, "the camera's own setting defers the photo")
        let immediate = try await rig.camrig(["capture", "--photo", "--quality", "quality", "--no-deferred", "--json"])
        try #require(immediate.status == 0, "camrig capture: \(immediate.stderr)")
        #expect(try SessionTests.object(immediate.stdout)["awaiting_finals"] as? Int == 0)
        #expect(try await state()["deferred"] as? String == "off", "--no-deferred set the camera's photo output")
    }
}
