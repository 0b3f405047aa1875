import ServiceLifecycle

/// Where the service's capture jobs run: a service of the `ServiceGroup`, each job a child task of its
/// discarding task group. On graceful shutdown the jobs under way are cancelled (a capture cancelled
/// fails, and says so) and awaited before the service ends, so nothing outlives the group.
public final class JobRunner: Service, Sendable {
    public typealias Work = @Sendable () async -> Void
    private let work: AsyncStream<Work>
    private let submissions: AsyncStream<Work>.Continuation

    public init() {
        (work, submissions) = AsyncStream.makeStream(of: Work.self)
    }

    /// Runs `job` as soon as the runner runs; false when the runner has ended.
    @discardableResult
    public func submit(_ job: @escaping Work) -> Bool {
        if case .enqueued = submissions.yield(job) { return true }
        return false
    }

    public func run() async throws {
        let work = self.work
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                for await job in work { group.addTask { await job() } }
            }
        }
        submissions.finish()
    }
}
