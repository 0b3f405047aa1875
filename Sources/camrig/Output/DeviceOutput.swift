import CamRigCoordinator
import CamRigWire
import CamRigWireModel

/// One device as `camrig devices` shows it.
struct DeviceOutput: Encodable {
    var name: String
    var agent: String
    var device: String
    var localizedName: String
    var model: String
    var type: String
    var position: String
    var label: String
    var connected: Bool
    var activeFormat: String
    var activeFps: Double?
    var leaseHolder: String?
    var formats: [String]

    init(_ device: RigDevice) {
        let description = device.description
        name = device.name
        agent = device.agentID
        self.device = device.deviceID
        localizedName = description.localizedName
        model = description.modelID
        type = description.deviceType.deviceType?.rawValue ?? "unspecified"
        position = description.position.position.rawValue
        label = description.label
        connected = description.connected
        activeFormat = description.state.activeFormatID
        activeFps = description.state.activeMinFrameDuration.duration.map(\.frameRate)
        leaseHolder = description.hasLease ? description.lease.holder : nil
        formats = description.formats.map { format in
            "\(format.id) " + format.rateRanges.map(\.description).joined(separator: ", ")
        }
    }
}

/// One control as `camrig device get` shows it.
struct ControlOutput: Encodable {
    var id: UInt32
    var name: String
    var value: Int64
    var minimum: Int64
    var maximum: Int64
    var defaultValue: Int64
}

/// What `camrig device get --json` prints.
struct DeviceGetOutput: Encodable {
    var device: DeviceOutput
    var state: [String: String]
    var controls: [ControlOutput]
}
