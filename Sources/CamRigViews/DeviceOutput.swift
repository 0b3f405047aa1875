import CamRigCoordinator
import CamRigWire
import CamRigDeviceModel
import CamRigWireModel

/// One device as `camrig devices` shows it.
public struct DeviceOutput: Codable, Sendable {
    public var name: String
    public var agent: String
    public var device: String
    public var localizedName: String
    public var model: String
    public var type: String
    public var position: String
    public var label: String
    public var connected: Bool
    public var activeFormat: String
    public var activeFps: Double?
    public var leaseHolder: String?
    public var formats: [String]

    public init(_ device: RigDevice) {
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
public struct ControlOutput: Codable, Sendable {
    public var id: UInt32
    public var name: String
    public var value: Int64
    public var minimum: Int64
    public var maximum: Int64
    public var defaultValue: Int64
}

/// What `camrig device get --json` prints.
public struct DeviceGetOutput: Codable, Sendable {
    public var device: DeviceOutput
    public var state: [String: String]
    public var controls: [ControlOutput]
}

extension DeviceGetOutput {
    /// A camera's description, its settings by `camrig device set` key, and its raw controls.
    public init(_ found: RigDevice) {
        let state = found.description.state
        var settings: [String: String] = [
            "format": state.activeFormatID,
            "fps": state.activeMinFrameDuration.duration.map { String(format: "%.3f", $0.frameRate) } ?? "-",
            "focus": "\(state.focus.mode)",
            "exposure": "\(state.exposure.mode)",
            "white-balance": "\(state.whiteBalance.mode)",
            "zoom": "\(state.zoom.factor)",
            "torch": "\(state.torch.mode)",
            "responsive": state.photoOutput.responsiveCapture ? "on" : "off",
            "deferred": state.photoOutput.deferredDelivery ? "on" : "off",
            "max-quality": state.photoOutput.maxQualityPrioritization == .unspecified
                ? "quality" : PhotoQualityPrioritization(state.photoOutput.maxQualityPrioritization).description,
            "max-photo-size": "\(state.photoOutput.maxPhotoDimensions.width)x\(state.photoOutput.maxPhotoDimensions.height)",
        ]
        if let duration = state.exposure.duration.duration {
            settings["exposure-duration"] = "\(duration.numerator)/\(duration.denominator)"
        }
        if state.exposure.iso > 0 { settings["iso"] = String(format: "%g", state.exposure.iso) }
        settings["bias"] = String(format: "%g", state.exposure.targetBias)
        if state.whiteBalance.temperatureKelvin > 0 { settings["temperature"] = String(format: "%g", state.whiteBalance.temperatureKelvin) }
        if state.focus.lensPosition > 0 { settings["lens"] = String(format: "%g", state.focus.lensPosition) }
        self.init(
            device: DeviceOutput(found), state: settings,
            controls: found.description.controls.map { control in
                ControlOutput(
                    id: control.id, name: control.name, value: control.current.integer, minimum: control.minimum, maximum: control.maximum,
                    defaultValue: control.defaultValue)
            })
    }
}
