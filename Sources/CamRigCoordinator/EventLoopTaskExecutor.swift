import NIOCore

/// An event loop as a Swift task executor.
///
/// A request made from a task on Swift's global executor crosses threads twice: to the connection's
/// event loop to be written, and back when its reply arrives. On a small host each crossing is a thread
/// wake-up of tens of microseconds, as much as the rest of a round trip on a LAN. A task that prefers
/// this executor (`withTaskExecutorPreference(client.executor) { … }`) runs on the event loop's own
/// thread: its requests are written where it runs and its replies resume it there.
///
/// Work run this way holds up every connection on that event loop while it runs, so it must not block
/// and should be short between its awaits: sequences of requests, not computation.
public final class EventLoopTaskExecutor: TaskExecutor, Sendable {
    public let eventLoop: any EventLoop

    public init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute {
            job.runSynchronously(on: self.asUnownedTaskExecutor())
        }
    }
}
