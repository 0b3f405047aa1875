import CamRigDevices
import CamRigWire
import CamRigWireModel
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore

/// Photos, scheduled triggers and the result spool.
///
/// A trigger fires at an agent time T: its thread sleeps until just before T on `CLOCK_MONOTONIC`
/// (absolute, so nothing accumulates), then spins to T. It records when it actually fired; each device
/// then contributes its first frame exposed at or after T, stored in the spool before it is reported.
public final class AgentCapture: Sendable {
    let streams: AgentStreams
    public let spool: ResultSpool
    let agentID: String
    var clock: HostClock { streams.devices.clock }
    let maxPendingTriggers: Int
    /// How long before T the thread stops sleeping and starts spinning.
    /// How long before a photo trigger its cameras are started.
    static let prepareNanoseconds: Int64 = 100_000_000
    static let spinNanoseconds: Int64 = 300_000
    private let pending = NIOLockedValueBox(0)
    /// Captures between firing and being stored.
    private let inFlight = NIOLockedValueBox(0)
    private let logger: Logger

    init(streams: AgentStreams, spool: ResultSpool, agentID: String, maxPendingTriggers: Int = 64, logger: Logger) {
        self.streams = streams
        self.spool = spool
        self.agentID = agentID
        self.maxPendingTriggers = maxPendingTriggers
        self.logger = logger
    }

    /// Answers capture, trigger and spool requests; `reply` may be called several times for streams.
    func handle(
        _ body: WireEnvelope.OneOf_Body,
        requestID: UInt64,
        connection: AgentRequestRouter.Connection,
        reply: @escaping @Sendable (WireEnvelope.OneOf_Body, ByteBuffer?) -> Void
    ) {
        switch body {
        case .capturePhoto(let capture):
            let now = clock.now()
            Task {
                reply(await self.fire(triggerID: "photo-\(requestID)", frames: self.prepare([capture.deviceID], notBefore: now), session: capture.sessionID, settings: capture.settings, fireAt: now, firedAt: now), nil)
            }

        case .scheduleTrigger(let trigger):
            schedule(trigger, requestID: requestID, connection: connection, reply: { reply($0, nil) })

        case .fetchResults(let fetch):
            var results = spool.pending(session: fetch.sessionID)
            let total = results.count
            if fetch.maxResults > 0 { results = Array(results.prefix(Int(fetch.maxResults))) }
            var sent: UInt32 = 0
            for result in results {
                guard let image = try? spool.image(of: result) else { continue }
                reply(.photoResult(result), image)
                sent += 1
            }
            var end = WireResultsEnd()
            end.count = sent
            end.remaining = UInt32(total) - sent
            reply(.resultsEnd(end), nil)

        case .acknowledgeResults(let acknowledge):
            spool.acknowledge(acknowledge.resultIds)
            reply(.ok(WireOk()), nil)

        default:
            break
        }
    }

    private func schedule(
        _ trigger: WireScheduleTrigger,
        requestID: UInt64,
        connection: AgentRequestRouter.Connection,
        reply: @escaping @Sendable (WireEnvelope.OneOf_Body) -> Void
    ) {
        let now = clock.now()
        guard trigger.action == .capturePhoto || trigger.action == .startStream else {
            reply(.error(error(.invalidArgument, "trigger \(trigger.triggerID) has no action; use CAPTURE_PHOTO or START_STREAM")))
            return
        }
        if trigger.action == .startStream && trigger.deviceIds.count != 1 {
            reply(.error(error(.invalidArgument, "a START_STREAM trigger names exactly one device (one trigger per device); got \(trigger.deviceIds.count)")))
            return
        }
        guard !trigger.deviceIds.isEmpty else {
            reply(.error(error(.invalidArgument, "trigger \(trigger.triggerID) names no devices")))
            return
        }
        guard trigger.fireAtNs > now else {
            let late = Double(now - trigger.fireAtNs) / 1e6
            logger.notice("refused late trigger", metadata: ["trigger": "\(trigger.triggerID)", "late_ms": "\(late)"])
            streams.devices.events.publish(.triggerLate, message: "trigger \(trigger.triggerID) arrived \(String(format: "%.3f", late)) ms after its time") {
                $0.triggerID = trigger.triggerID
            }
            reply(.error(error(.triggerLate, "trigger \(trigger.triggerID) was due \(String(format: "%.3f", late)) ms ago (agent time \(trigger.fireAtNs) ns, now \(now) ns); schedule with more lead time")))
            return
        }
        let accepted = pending.withLockedValue { count -> Bool in
            guard count < maxPendingTriggers else { return false }
            count += 1
            return true
        }
        guard accepted else {
            reply(.error(error(.queueFull, "agent \(agentID) already has \(maxPendingTriggers) pending triggers")))
            return
        }
        var scheduled = WireTriggerScheduled()
        scheduled.triggerID = trigger.triggerID
        scheduled.fireAtNs = trigger.fireAtNs
        reply(.triggerScheduled(scheduled))
        let thread = Thread { [self] in
            let fireAt = trigger.fireAtNs
            let clock = self.clock
            // Cameras that can start exposing on a grid start on T, on every agent alike. The anchor reads T or
            // later on this host's clock, so the frame exposed at T passes the "from T on" filter.
            let anchor = clock.monotonic(atReading: fireAt)
            for deviceID in trigger.deviceIds {
                self.streams.devices.discovery.device(uniqueID: deviceID)?.alignNextStream(toMonotonic: anchor)
            }
            // The cameras start before T, so a photo is the frame exposed from T on, and a stream's first
            // frame is exposed at T, rather than whatever a camera manages after a late start (prepared
            // capture). For a stream, waiting for that first frame only keeps the camera running until the
            // stream's own subscriber has joined at T.
            HostClock.sleep(untilMonotonic: clock.monotonic(atReading: fireAt - Self.prepareNanoseconds))
            let frames = self.prepare(trigger.deviceIds, notBefore: fireAt)
            HostClock.sleep(untilMonotonic: clock.monotonic(atReading: fireAt - Self.spinNanoseconds))
            var firedAt = clock.now()
            while firedAt < fireAt { firedAt = clock.now() }
            self.pending.withLockedValue { $0 -= 1 }
            if trigger.action == .startStream {
                self.startStream(trigger, requestID: requestID, connection: connection, fireAt: fireAt, firedAt: firedAt, reply: reply)
                return
            }
            Task {
                reply(await self.fire(triggerID: trigger.triggerID, frames: frames, session: trigger.sessionID, settings: trigger.photoSettings, fireAt: fireAt, firedAt: firedAt))
            }
        }
        thread.name = "camrig-trigger"
        thread.qualityOfService = .userInteractive
        thread.start()
    }

    /// Starts waiting for each device's first frame exposed at or after `notBefore` (starting its stream).
    private func prepare(_ devices: [String], notBefore: Int64) -> [(String, Task<CapturedFrame, any Error>)] {
        devices.map { deviceID in
            (deviceID, Task { try await self.streams.nextFrame(deviceID: deviceID, notBefore: notBefore) })
        }
    }

    /// Stores the photo each device's frame task delivers, and reports the firing.
    private func fire(triggerID: String, frames: [(String, Task<CapturedFrame, any Error>)], session: String, settings: WirePhotoSettings, fireAt: Int64, firedAt: Int64) async -> WireEnvelope.OneOf_Body {
        inFlight.withLockedValue { $0 += 1 }
        defer { inFlight.withLockedValue { $0 -= 1 } }
        var fired = Self.fired(triggerID, fireAt: fireAt, firedAt: firedAt)
        for (deviceID, frameTask) in frames {
            do {
                let frame = try await frameTask.value
                var result = WirePhotoResult()
                result.resultID = "\(agentID)-\(UUID().uuidString.lowercased())"
                result.sessionID = session
                result.triggerID = triggerID
                result.deviceID = deviceID
                result.captureTime.nanoseconds = frame.timestamp
                result.captureTime.clock = .agentMonotonic
                result.captureTime.marks = frame.timestampMarks.wire
                result.pixelFormat = frame.format.pixelFormat.rawValue
                result.dimensions = WireDimensions(frame.format.dimensions)
                result.bytesPerLine = frame.format.bytesPerLine
                result.photoSettingsID = settings.uniqueID
                result.metadata = WireCaptureMetadata(frame.metadata)
                result.sequence = frame.sequence
                try spool.store(result, image: frame.bytes)
                fired.resultIds.append(result.resultID)
                let used = spool.usedBytes
                if used * 10 >= spool.capacityBytes * 9 {
                    streams.devices.events.publish(.spoolNearFull, message: "result spool is \(used * 100 / max(spool.capacityBytes, 1))% full") {
                        $0.spool.usedBytes = used
                        $0.spool.capacityBytes = self.spool.capacityBytes
                        $0.spool.results = UInt32(self.spool.count)
                    }
                }
            } catch let failure as WireProtocolError {
                return .error(error(failure.code, "trigger \(triggerID) on \(deviceID): \(failure.message)", device: deviceID))
            } catch {
                return .error(self.error(.internal, "trigger \(triggerID) on \(deviceID): \(error)", device: deviceID))
            }
        }
        return .triggerFired(fired)
    }

    /// At T: reports the firing, then streams the device's frames exposed from T on, on the trigger's
    /// request id (`StreamStarted`, `VideoFrame`…, `StreamEnded`).
    private func startStream(
        _ trigger: WireScheduleTrigger,
        requestID: UInt64,
        connection: AgentRequestRouter.Connection,
        fireAt: Int64,
        firedAt: Int64,
        reply: @escaping @Sendable (WireEnvelope.OneOf_Body) -> Void
    ) {
        reply(.triggerFired(Self.fired(trigger.triggerID, fireAt: fireAt, firedAt: firedAt)))
        let subscriber = StreamSubscriber(
            requestID: requestID,
            connection: connection.id,
            maxQueued: 8,
            notBefore: fireAt,
            eventLoop: connection.eventLoop,
            write: connection.write
        )
        streams.devices.queue.async {
            switch self.streams.start(deviceID: trigger.deviceIds[0], subscriber: subscriber) {
            case .started(_, let format): subscriber.open(format: format)
            case .failed(let failure): reply(.error(failure))
            }
        }
    }

    /// The report of a firing: when (agent clock, marking the trigger) and how late.
    static func fired(_ triggerID: String, fireAt: Int64, firedAt: Int64) -> WireTriggerFired {
        var fired = WireTriggerFired()
        fired.triggerID = triggerID
        fired.firedAt.nanoseconds = firedAt
        fired.firedAt.clock = .agentMonotonic
        fired.firedAt.marks = .triggerFire
        fired.latenessNs = firedAt - fireAt
        return fired
    }

    /// Waits (up to `timeout`) for captures already fired to be stored: a shutdown loses none of them.
    func drain(timeout: Duration = .seconds(10)) async {
        let deadline = ContinuousClock.now + timeout
        while inFlight.withLockedValue({ $0 }) > 0 && ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(10))
        }
    }

    private func error(_ code: WireErrorCode, _ message: String, device: String = "") -> WireError {
        var error = WireError()
        error.code = code
        error.agentID = agentID
        error.deviceID = device
        error.message = message
        return error
    }
}
