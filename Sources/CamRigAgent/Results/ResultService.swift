import CamRigDeviceModel
import CamRigObjectStore
import CamRigWire
import CamRigWireModel
import NIOCore
import NIOPosix

/// Hands spooled results to the coordinator, with the spool's file work off the event loops.
///
/// Reading a result's image, deleting acknowledged results and flushing the spool's directory run on a
/// thread pool. Fetched results are sent one after another as the connection takes them: the next file
/// is read only once the previous result has been written to the socket, so a slow reader holds at most
/// one result in memory, however many are spooled.
public struct ResultService: Sendable {
    public let spool: ResultSpool
    private let threadPool: NIOThreadPool
    private let agentID: String

    /// - Parameter threadPool: where blocking file work runs (the agent gives it a thread of its own).
    public init(spool: ResultSpool, agentID: String, threadPool: NIOThreadPool) {
        self.spool = spool
        self.agentID = agentID
        self.threadPool = threadPool
    }

    /// Sends the results of `session` (all when empty), at most `limit` (0: all), then `ResultsEnd`.
    ///
    /// With `upload`, each result is first put in the object store it names, and sent with what the
    /// store holds (`stored`) and a thumbnail instead of its image; one the store did not take is sent
    /// with `upload_error`. Either way it stays in the spool until acknowledged.
    func fetch(session: String, limit: Int, upload: ResultUpload? = nil, requestID: UInt64, connection: AgentRequestRouter.Connection) async {
        guard let upload else {
            await send(session: session, limit: limit, upload: nil, requestID: requestID, connection: connection)
            return
        }
        do {
            // The client's connections are closed before the fetch is over.
            try await S3Client.with(upload.location) { client in
                await send(session: session, limit: limit, upload: (upload, client), requestID: requestID, connection: connection)
            }
        } catch {
            // Only the client's set-up throws: `send` answers every failure of its own.
            try? await connection.send(WireFrame(requestID: requestID, .error(WireError(.invalidArgument, agent: agentID, "\(error)"))))
        }
    }

    private func send(
        session: String, limit: Int, upload: (ResultUpload, S3Client)?, requestID: UInt64, connection: AgentRequestRouter.Connection
    ) async {
        let results = spool.pending(session: session).filter { upload?.0.takes($0) ?? true }
        let page = limit > 0 ? Array(results.prefix(limit)) : results
        var sent: UInt32 = 0
        for result in page {
            guard let image = try? await threadPool.runIfActive({ try spool.image(of: result) }) else { continue }
            var frame = WireFrame(requestID: requestID, .photoResult(result), payload: image)
            if let (upload, client) = upload {
                var described = result
                do {
                    let (stored, thumbnail) = try await upload.store(
                        result, image: image, client: client, stateFile: spool.uploadState(of: result), threadPool: threadPool)
                    described.stored = stored
                    if let thumbnail { described.thumbnail = WireDimensions(Dimensions(width: UInt32(thumbnail.width), height: UInt32(thumbnail.height))) }
                    frame = WireFrame(requestID: requestID, .photoResult(described), payload: thumbnail.map { ByteBuffer(bytes: $0.rgb) })
                } catch {
                    described.uploadError = "agent \(agentID) could not store \(result.resultID) in \(upload.location): \(error)"
                    frame = WireFrame(requestID: requestID, .photoResult(described))
                }
            }
            do {
                try await connection.send(frame)
            } catch {
                // The connection is gone: the results stay spooled for the next fetch.
                return
            }
            sent += 1
        }
        var end = WireResultsEnd()
        end.count = sent
        end.remaining = UInt32(results.count) - sent
        try? await connection.send(WireFrame(requestID: requestID, .resultsEnd(end)))
    }

    /// Deletes acknowledged results from the spool, then answers `Ok`, or `NOT_FOUND` naming the ids that
    /// were never in it (the others are deleted all the same).
    func acknowledge(_ ids: [String], requestID: UInt64, connection: AgentRequestRouter.Connection) async {
        let unknown = (try? await threadPool.runIfActive { spool.acknowledging(ids).unknown }) ?? []
        guard unknown.isEmpty else {
            let named = unknown.prefix(8).map { "'\($0)'" }.joined(separator: ", ") + (unknown.count > 8 ? " and \(unknown.count - 8) more" : "")
            let error = WireError(
                .notFound, agent: agentID,
                "no result \(named) in agent \(agentID)'s spool (never stored here, or acknowledged before the agent restarted); the other \(ids.count - unknown.count) were deleted")
            try? await connection.send(WireFrame(requestID: requestID, .error(error)))
            return
        }
        try? await connection.send(WireFrame(requestID: requestID, .ok(WireOk())))
    }
}
