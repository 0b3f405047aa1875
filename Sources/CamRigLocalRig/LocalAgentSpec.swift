import CamRigClock
import CamRigSecurity
import Foundation

/// How one simulated camera host is set up: its synthetic cameras, the clock error injected into it,
/// and any further `camrig-agent` flags.
public struct LocalAgentSpec: Sendable {
    /// Synthetic cameras (`--synthetic N`); 0 leaves the flag out, so the agent serves V4L2 devices.
    public var cameras: Int
    /// Injected clock error: the offset at the rig's epoch, in microseconds…
    public var clockOffsetMicroseconds: Double
    /// …and the drift from then on, in parts per million.
    public var clockDriftPPM: Double
    /// TLS with a certificate of its own (`--tls-dir`, `--identity`), or `--insecure` when false.
    public var secure: Bool
    /// More `camrig-agent` flags, after the ones the spec implies (a later flag wins).
    public var extraArguments: [String]

    /// An agent with `cameras` synthetic cameras, the given clock error, TLS unless `secure` is false,
    /// and `extraArguments`.
    public init(
        cameras: Int = 1, clockOffsetMicroseconds: Double = 0, clockDriftPPM: Double = 0, secure: Bool = true,
        extraArguments: [String] = []
    ) {
        self.cameras = cameras
        self.clockOffsetMicroseconds = clockOffsetMicroseconds
        self.clockDriftPPM = clockDriftPPM
        self.secure = secure
        self.extraArguments = extraArguments
    }

    /// `count` agents with `cameras` synthetic cameras each; with `clockErrors`, agent `i` gets
    /// `HostClock.simulatedError(host: i)` (milliseconds of offset, tens of ppm of drift).
    public static func simulated(count: Int, cameras: Int = 1, clockErrors: Bool = true) -> [LocalAgentSpec] {
        (0..<count).map { index in
            let error = clockErrors ? HostClock.simulatedError(host: index) : (offsetMicroseconds: 0, driftPPM: 0)
            return LocalAgentSpec(cameras: cameras, clockOffsetMicroseconds: error.offsetMicroseconds, clockDriftPPM: error.driftPPM)
        }
    }

    /// Whether a clock error is injected.
    public var simulatesClock: Bool { clockOffsetMicroseconds != 0 || clockDriftPPM != 0 }

    /// The host clock this agent stamps frames with: the truth its estimates are judged by.
    public func clock(epoch: Int64) -> HostClock {
        HostClock(offsetNanoseconds: Int64((clockOffsetMicroseconds * 1000).rounded()), driftPPM: clockDriftPPM, epoch: epoch)
    }

    /// The agent's command line (without the executable) for the `index`th agent of a rig, named `name`.
    func arguments(
        name: String, index: Int, listen: String, tls: TLSDirectory?, work: URL, epoch: Int64, logLevel: String
    ) -> [String] {
        var arguments = ["--listen", listen]
        if secure, let tls {
            arguments += ["--tls-dir", tls.path, "--identity", name]
        } else {
            arguments += ["--insecure", "--agent-id", name]
        }
        if cameras > 0 {
            arguments += ["--synthetic", "\(cameras)", "--synthetic-seed", "\(index * 16 + 1)"]
        }
        if simulatesClock {
            arguments += [
                "--simulate-clock-offset-us=\(clockOffsetMicroseconds)",
                "--simulate-clock-drift-ppm=\(clockDriftPPM)",
                "--simulate-clock-epoch-ns", "\(epoch)",
            ]
        }
        arguments += ["--spool-dir", work.appendingPathComponent("spool-\(name)").path, "--log-level", logLevel]
        return arguments + extraArguments
    }
}
