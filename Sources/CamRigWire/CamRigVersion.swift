/// Version of this CamRig build, reported in hello/welcome.
public enum CamRigVersion {
    public static let string = "0.1.0"
}
