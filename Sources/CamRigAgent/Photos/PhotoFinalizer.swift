import CamRigClock
import CamRigDeviceModel
import CamRigDevices
import CamRigWire
import NIOPosix

/// Makes deferred photos' finals: from the frames `DeferredPhotoStore` kept, into the spool, on the
/// spool's thread (merging frames or an fsync held on a cooperative thread would stall every frame
/// delivery and request of the process behind it).
struct PhotoFinalizer: Sendable {
    let deferred: DeferredPhotoStore
    let spool: ResultSpool
    let spoolThread: NIOThreadPool
    let agentID: String

    /// A final made now: whose it is and how long its processing took, for the device's estimate.
    struct Made: Sendable {
        var deviceID: String
        var level: PhotoQualityPrioritization
        var duration: Int64
    }

    /// Makes a deferred photo's final now, unless it is made already (then `nil`).
    func makeFinal(_ photoID: String) async throws -> Made? {
        let deferred = self.deferred
        let spool = self.spool
        return try await spoolThread.runIfActive { () throws -> Made? in
            guard deferred.contains(photoID) else { return nil }
            if spool.contains(photoID) {
                // Made before a crash that came before its frames were deleted.
                deferred.remove(photoID)
                return nil
            }
            let job: DeferredPhotoStore.Job
            do {
                job = try deferred.load(photoID)
            } catch {
                deferred.setAside(photoID)
                let why = "the saved frames of deferred photo \(photoID) cannot be read (\(error)); set aside"
                // Its final is its proxy, when the spool still holds that: the capture gets a photo either way.
                if (try? Self.deliverProxyAsFinal(photoID, why: why, spool: spool)) == true { return nil }
                throw WireProtocolError(.internal, why + "; its proxy, fetched already, stays the photo")
            }
            let final = try PhotoProcessor.final(
                template: job.template, frames: job.frames, plan: job.plan, started: HostClock.monotonicNow())
            try spool.store(final.result, image: final.image)
            deferred.remove(photoID)
            return Made(
                deviceID: job.template.deviceID, level: job.plan.level,
                duration: final.result.resolved.processingDurationNs)
        }
    }

    /// Gives up on a photo whose final failed too often: its saved frames are set aside and its proxy
    /// becomes its final.
    func giveUp(_ photoID: String, error: any Error) async {
        let deferred = self.deferred
        let spool = self.spool
        _ = try? await spoolThread.runIfActive {
            deferred.setAside(photoID)
            _ = try Self.deliverProxyAsFinal(photoID, why: "its final could not be made (\(error))", spool: spool)
        }
    }

    /// Stores a deferred photo's proxy again as its final (under the photo id), saying why, when the final
    /// cannot be made; `false` when the spool no longer holds the proxy. On the spool's thread.
    static func deliverProxyAsFinal(_ photoID: String, why: String, spool: ResultSpool) throws -> Bool {
        guard let proxy = spool.pending(session: "").first(where: { $0.resultID == photoID + ".proxy" }) else {
            return false
        }
        let image = try spool.image(of: proxy)
        try spool.store(PhotoProcessor.proxyAsFinal(proxy, photoID: photoID, why: why), image: image)
        return true
    }

    /// `FinalizePhotos`: makes the named deferred photos' finals now (every deferred photo when none is
    /// named); `made` is told of each final made.
    func finalize(_ ids: [String], made: @Sendable (Made) -> Void) async -> WireEnvelope.OneOf_Body {
        let wanted = ids.isEmpty ? deferred.ids : ids
        var unknown: [String] = []
        for id in wanted {
            do {
                // Looked up on the spool's thread, after whatever the worker is doing with the photo there:
                // a final it is storing is found in the spool, never missed between the two.
                let (waiting, stored) = try await spoolThread.runIfActive { [deferred, spool] in
                    (deferred.contains(id), spool.contains(id))
                }
                guard waiting else {
                    if !stored { unknown.append(id) }
                    continue
                }
                if let final = try await makeFinal(id) { made(final) }
            } catch {
                return .error(WireError(.internal, agent: agentID, "cannot make deferred photo \(id): \(error)"))
            }
        }
        guard unknown.isEmpty else {
            let named = unknown.prefix(8).map { "'\($0)'" }.joined(separator: ", ")
            return .error(
                WireError(
                    .notFound, agent: agentID,
                    "agent \(agentID) defers no photo \(named) and holds no final of it (made and acknowledged already, or never taken here)"
                ))
        }
        return .ok(WireOk())
    }
}
