import CamRigDeviceModel
import CamRigWire
import CamRigWireModel

/// After the capture stage: each device's photo processed and stored in the spool, then the firing answered.
extension AgentCapture {
    /// Stores the photo each device's capture stage delivers (or, deferred, its proxy), and reports the
    /// firing. Every device's photo is stored (and its processing stage closed) before the trigger is
    /// answered; a failure answers with the first one, and the photos stored stay in the spool.
    func store(
        triggerID: String, frames: [PendingPhoto], session: String, settings: WirePhotoSettings, fireAt: Int64,
        firedAt: Int64,
        reply: @escaping @Sendable (WireEnvelope.OneOf_Body) -> Void
    ) async -> WireEnvelope.OneOf_Body {
        var fired = WireTriggerFired(triggerID: triggerID, fireAt: fireAt, firedAt: firedAt)
        var failure: WireError?
        for pending in frames {
            let stages = StageReporter(
                enabled: settings.stageEvents, triggerID: triggerID, deviceID: pending.deviceID,
                settingsID: settings.uniqueID,
                photoID: pending.photoID, clock: clock, reply: reply)
            do {
                let stored = try await store(
                    pending, session: session, triggerID: triggerID, settingsID: settings.uniqueID, stages: stages)
                fired.resultIds += stored
            } catch {
                if failure == nil {
                    let code = (error as? WireProtocolError)?.code ?? .internal
                    let message = (error as? WireProtocolError)?.message ?? "\(error)"
                    failure = WireError(
                        code, agent: agentID, device: pending.deviceID,
                        "trigger \(triggerID) on \(pending.deviceID): \(message)")
                }
            }
        }
        if let failure { return .error(failure) }
        return .triggerFired(fired)
    }

    /// One device's photo: its capture stage's frames processed and written on the spool's thread (the
    /// agent's processing stage, one photo at a time), its processing stage closed whatever happened.
    /// Returns the ids of the results stored.
    private func store(
        _ pending: PendingPhoto, session: String, triggerID: String, settingsID: UInt64, stages: StageReporter
    ) async throws -> [String] {
        // A capture stage that failed closed itself: no processing stage follows.
        let captured = try await pending.frames.value
        let input = PhotoProcessor.Input(
            template: PhotoProcessor.template(
                reference: captured.frames[0], photoID: pending.photoID, session: session, triggerID: triggerID,
                settingsID: settingsID, prepared: pending.prepared, waited: captured.waited,
                captureDuration: captured.duration),
            frames: captured.frames, plan: pending.plan, bracket: pending.bracket,
            bracketMethod: captured.bracketMethod,
            deferred: pending.deferred)
        let spool = self.spool
        let deferred = self.deferred
        let stored: (results: [WirePhotoResult], processingDuration: Int64)
        do {
            stored = try await spoolThread.runIfActive {
                let output = try PhotoProcessor.process(input)
                // A deferred photo's frames are kept before its proxy is delivered: a crash from here on still makes its final.
                if case .deferred(_, let job) = output { try deferred.save(job) }
                for made in output.made { try spool.store(made.result, image: made.image) }
                return (output.made.map(\.result), output.processingDuration)
            }
        } catch {
            if !pending.deferred { pending.pipeline.endProcessing(level: pending.plan.level, duration: nil) }
            throw error
        }
        for result in stored.results { stages.send(.didFinishProcessing) { $0.resultID = result.resultID } }
        if !pending.deferred {
            pending.pipeline.endProcessing(level: pending.plan.level, duration: stored.processingDuration)
        }
        touch()
        reportIfSpoolNearlyFull()
        return stored.results.map(\.resultID)
    }

    /// Publishes `spoolNearFull` while the spool is 90 % full or more.
    private func reportIfSpoolNearlyFull() {
        let used = spool.usedBytes
        let capacity = spool.capacityBytes
        guard used * 10 >= capacity * 9 else { return }
        let count = spool.count
        streams.devices.events.publish(
            .spoolNearFull, message: "result spool is \(used * 100 / max(capacity, 1))% full"
        ) {
            $0.spool.usedBytes = used
            $0.spool.capacityBytes = capacity
            $0.spool.results = UInt32(count)
        }
    }
}
