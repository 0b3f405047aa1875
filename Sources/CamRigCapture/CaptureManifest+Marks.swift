import CamRigDeviceModel

extension CaptureManifest.Frame {
    /// What the agent's stamp marks, read in either spelling a manifest may hold: `start_of_exposure` as
    /// manifests write it, or `start-of-exposure` as host recordings' manifests once did. `nil` for a name
    /// this version does not know.
    public var timestampMarks: TimestampMarks? { TimestampMarks(name: marks) }
}
