#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The one way CamRig reads a piece of a file that is being sent on (a recording's chunks to the coordinator,
/// an upload's parts to the object store): `pread` at an offset, so readers share a descriptor without a
/// file position, across short reads and interruptions. This blocks on the disk: call it on a thread pool.
public enum PositionalRead {
    /// Reads up to `target.count` bytes of `descriptor` from `offset` into `target`; returns how many were
    /// read, fewer only at the end of the file or on an error.
    public static func read(_ descriptor: Int32, into target: UnsafeMutableRawBufferPointer, at offset: UInt64) -> Int {
        guard let base = target.baseAddress else { return 0 }
        var done = 0
        while done < target.count {
            let n = pread(descriptor, base + done, target.count - done, off_t(offset) + off_t(done))
            if n < 0, errno == EINTR { continue }
            if n <= 0 { break }
            done += n
        }
        return done
    }
}
