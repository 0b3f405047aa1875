import CamRigWire
import Testing

@testable import CamRigAgent

@Suite("Agent request core", .timeLimit(.minutes(1)))
struct AgentRequestCoreTests {
    let full = AgentRequestCore.Configuration(agentID: "cam-host-1", devices: true, capture: true, clockChannel: true)

    func core(_ role: WirePeerRole, configuration: AgentRequestCore.Configuration? = nil) -> AgentRequestCore {
        AgentRequestCore(configuration: configuration ?? full, client: .init(role: role, name: "\(role)-1"))
    }

    func error(_ action: AgentRequestCore.Action) -> WireError? {
        if case .reply(.error(let error)) = action { return error }
        return nil
    }

    @Test("a viewer may look and watch but not lock, configure, trigger or fetch; the refusal names the certificate")
    func viewerRules() {
        let viewer = core(.viewer)
        #expect(viewer.request(.listDevices(WireListDevices())) == .devices(.listDevices(WireListDevices())))
        var start = WireStartStream()
        start.deviceID = "synthetic:SYN0001"
        #expect(viewer.request(.startStream(start)) == .startStream(deviceID: "synthetic:SYN0001", maxQueued: AgentRequestCore.defaultQueuedFrames))
        for request: WireEnvelope.OneOf_Body in [.lock(WireLock()), .configure(WireConfigure()), .scheduleTrigger(WireScheduleTrigger()), .fetchResults(WireFetchResults())] {
            let refusal = error(viewer.request(request))
            #expect(refusal?.code == .permissionDenied, "\(request.messageName)")
            #expect(refusal?.message.contains("viewer certificate") == true)
            #expect(refusal?.agentID == "cam-host-1")
        }
    }

    @Test("an agent certificate may send nothing")
    func agentRole() {
        #expect(error(core(.agent).request(.listDevices(WireListDevices())))?.code == .permissionDenied)
    }

    @Test("what the agent does not serve is UNIMPLEMENTED, naming the request")
    func unimplemented() {
        let bare = core(.coordinator, configuration: .init(agentID: "bare", devices: false, capture: false, clockChannel: false))
        let refusal = error(bare.request(.describeDevice(WireDescribeDevice())))
        #expect(refusal?.code == .unimplemented)
        #expect(refusal?.message.contains("describe_device") == true)
        #expect(error(bare.request(.fetchResults(WireFetchResults())))?.code == .unimplemented)
        #expect(error(bare.request(.openClockChannel(WireOpenClockChannel())))?.code == .unsupported)
    }

    @Test("a stream's queue is 4 frames unless asked")
    func streamDepth() {
        var start = WireStartStream()
        start.deviceID = "d"
        #expect(core(.coordinator).request(.startStream(start)) == .startStream(deviceID: "d", maxQueued: 4))
        start.maxQueuedFrames = 2
        #expect(core(.coordinator).request(.startStream(start)) == .startStream(deviceID: "d", maxQueued: 2))
    }

    @Test("a trigger needs an action and devices, and a stream trigger exactly one device")
    func triggerValidation() {
        var trigger = WireScheduleTrigger()
        trigger.triggerID = "t1"
        trigger.deviceIds = ["a"]
        #expect(error(core(.coordinator).request(.scheduleTrigger(trigger)))?.message.contains("no action") == true)
        trigger.action = .capturePhoto
        trigger.deviceIds = []
        #expect(error(core(.coordinator).request(.scheduleTrigger(trigger)))?.message.contains("names no devices") == true)
        trigger.action = .startStream
        trigger.deviceIds = ["a", "b"]
        #expect(error(core(.coordinator).request(.scheduleTrigger(trigger)))?.code == .invalidArgument)
        trigger.deviceIds = ["a"]
        #expect(core(.coordinator).request(.scheduleTrigger(trigger)) == .scheduleTrigger(trigger))
    }

    @Test("a fetch pages through the spool as asked (0: everything)")
    func fetchPaging() {
        var fetch = WireFetchResults()
        fetch.sessionID = "s"
        #expect(core(.coordinator).request(.fetchResults(fetch)) == .fetchResults(session: "s", limit: 0, upload: nil))
        fetch.maxResults = 5
        #expect(core(.coordinator).request(.fetchResults(fetch)) == .fetchResults(session: "s", limit: 5, upload: nil))
    }

    @Test("a fetch that asks for uploads names a whole store target and file names inside the capture, or is refused")
    func fetchWithUpload() throws {
        var fetch = WireFetchResults()
        fetch.sessionID = "s"
        fetch.triggerID = "t1"
        fetch.uploadTo.endpoint = "http://127.0.0.1:9000"
        fetch.uploadTo.bucket = "rig"
        fetch.uploadTo.prefix = "captures/20261126-053000-photo"
        fetch.uploadTo.accessKeyID = "AKID"
        fetch.uploadTo.secretAccessKey = "secret"
        var name = WireUploadName()
        name.deviceID = "synthetic:0"
        name.stem = "cam0-a_synthetic_0"
        fetch.names = [name]
        let upload = try #require(Self.upload(of: core(.coordinator).request(.fetchResults(fetch))), "a valid upload was not taken")
        #expect(upload.location.key("cam0.png") == "captures/20261126-053000-photo/cam0.png" && upload.triggerID == "t1")
        for stem in ["../other/cam0", ".hidden", "a//b", ""] {
            var bad = fetch
            bad.names[0].stem = stem
            #expect(isInvalidArgument(core(.coordinator).request(.fetchResults(bad))), "stem \(stem.debugDescription) was taken")
        }
        var noPrefix = fetch
        noPrefix.uploadTo.prefix = ""
        #expect(isInvalidArgument(core(.coordinator).request(.fetchResults(noPrefix))))
        var noNames = fetch
        noNames.names = []
        #expect(isInvalidArgument(core(.coordinator).request(.fetchResults(noNames))))
    }

    private static func upload(of action: AgentRequestCore.Action) -> ResultUpload? {
        if case .fetchResults(_, _, let upload) = action { return upload }
        return nil
    }

    private func isInvalidArgument(_ action: AgentRequestCore.Action) -> Bool {
        if case .reply(.error(let error)) = action { return error.code == .invalidArgument }
        return false
    }

    @Test("a stream queue deeper than the agent's limit of 64 frames is refused, naming the limit; up to it is granted as asked")
    func queueDepthLimit() {
        let coordinator = core(.coordinator)
        var start = WireStartStream()
        start.deviceID = "synthetic:SYN0001"
        start.maxQueuedFrames = 1000
        let refusal = error(coordinator.request(.startStream(start)))
        #expect(refusal?.code == .invalidArgument)
        #expect(refusal?.message.contains("64") == true)
        start.maxQueuedFrames = 64
        #expect(coordinator.request(.startStream(start)) == .startStream(deviceID: "synthetic:SYN0001", maxQueued: 64))
    }
}
