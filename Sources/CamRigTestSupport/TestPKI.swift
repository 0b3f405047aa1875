import CamRigLocalRig

/// The tests' throwaway rig CA: `ScratchPKI` (a CA, `coordinator`, `agent-1` and `viewer-1` by default).
public typealias TestPKI = ScratchPKI
