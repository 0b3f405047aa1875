import CLinux

#if canImport(Glibc)
import Glibc
#endif

/// What a trigger thread asks of the kernel so that it wakes on time with other work on the host: the
/// real-time FIFO policy (it runs before every ordinary thread as soon as it is runnable), a timer slack
/// of 1 ns (the kernel may otherwise end its timed sleeps up to 50 µs late to batch wake-ups), and, for
/// the process, memory locked (a page of its code or stack never has to be read back in at the instant).
///
/// Each is granted only where permitted: SCHED_FIFO needs `CAP_SYS_NICE` or an `RLIMIT_RTPRIO` of at
/// least the priority (systemd: `LimitRTPRIO=` or `AmbientCapabilities=CAP_SYS_NICE`); locking memory
/// needs `CAP_IPC_LOCK` or an unlimited `RLIMIT_MEMLOCK` (`LimitMEMLOCK=infinity`). `Outcome` says what
/// was granted and, for what was not, why.
public enum RealtimeScheduling {
    /// The SCHED_FIFO priority of trigger threads: above interrupt threads' default of 50 would starve
    /// the network; below it keeps them first.
    public static let triggerPriority: Int32 = 40

    public struct Outcome: Sendable, Equatable {
        /// The SCHED_FIFO priority granted, or why none was.
        public var priority: Result<Int32, Refusal>
        /// The thread's timer slack after asking for 1 ns.
        public var timerSlackNanoseconds: Int

        public struct Refusal: Error, Sendable, Equatable, CustomStringConvertible {
            public var description: String
        }
    }

    /// Asks for SCHED_FIFO at `priority` and a 1 ns timer slack for the calling thread.
    public static func promoteCurrentThread(priority: Int32 = triggerPriority) -> Outcome {
        _ = camrig_set_timer_slack(1)
        let slack = camrig_timer_slack()
        var parameters = sched_param(sched_priority: priority)
        let status = pthread_setschedparam(pthread_self(), SCHED_FIFO, &parameters)
        let granted: Result<Int32, Outcome.Refusal>
        if status == 0 {
            granted = .success(priority)
        } else {
            var limit = rlimit()
            getrlimit(__rlimit_resource_t(UInt32(camrig_rlimit_rtprio)), &limit)
            granted = .failure(Outcome.Refusal(description: "SCHED_FIFO refused (\(String(cString: strerror(status))); RLIMIT_RTPRIO is \(limit.rlim_cur)): grant CAP_SYS_NICE or LimitRTPRIO=\(priority) in the agent's unit"))
        }
        return Outcome(priority: granted, timerSlackNanoseconds: slack)
    }

    /// Whether the calling thread runs under SCHED_FIFO or SCHED_RR.
    public static var currentThreadIsRealtime: Bool {
        var policy: Int32 = 0
        var parameters = sched_param()
        return pthread_getschedparam(pthread_self(), &policy, &parameters) == 0 && (policy == SCHED_FIFO || policy == SCHED_RR)
    }

    /// Locks the process's pages as they are touched (now and later); `nil` when done, else why not.
    public static func lockMemory() -> String? {
        guard mlockall(camrig_mlockall_on_fault) != 0 else { return nil }
        let reason = String(cString: strerror(errno))
        var limit = rlimit()
        getrlimit(__rlimit_resource_t(UInt32(camrig_rlimit_memlock)), &limit)
        let shown = limit.rlim_cur == rlim_t.max ? "unlimited" : "\(limit.rlim_cur) bytes"
        return "mlockall refused (\(reason); RLIMIT_MEMLOCK is \(shown)): grant CAP_IPC_LOCK or LimitMEMLOCK=infinity in the agent's unit"
    }
}
