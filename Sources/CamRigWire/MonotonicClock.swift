#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The host's `CLOCK_MONOTONIC`, the clock V4L2 stamps buffers with and every agent time on the wire is on.
public enum MonotonicClock {
    /// Nanoseconds since an unspecified start (boot on Linux).
    @inline(__always)
    public static func now() -> Int64 {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return Int64(spec.tv_sec) * 1_000_000_000 + Int64(spec.tv_nsec)
    }
}

/// Version of this CamRig build, reported in hello/welcome.
public enum CamRigVersion {
    public static let string = "0.1.0"
}
