/// A stream watcher that records a camera's frames by grid index: while one watches a phase-locked
/// camera, the lock outlives its coordinator's lease (`PhaseLockTenure`), since the recording goes on
/// without the coordinator and a camera released from the grid would drift off it.
protocol KeepsPhaseLock: FrameSink {}

/// An on-host recording's track: its frames belong to grid instants.
extension TrackRecorder: KeepsPhaseLock {}
