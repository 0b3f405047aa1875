import CamRigDeviceModel
import CamRigDevices
import Foundation

/// What `camrig-agent --list-devices` prints: every device the agent would serve, its formats with
/// frame-rate ranges and its controls with ranges and current values.
struct DeviceListing: Encodable {
    struct Device: Encodable {
        var uniqueID: String
        var name: String
        var modelID: String
        var type: String
        var position: String
        var label: String
        var backend: String
        var formats: [Format]
        var controls: [Control]
        var typedControls: TypedControls

        enum CodingKeys: String, CodingKey {
            case name, type, position, label, backend, formats, controls
            case uniqueID = "unique_id", modelID = "model_id", typedControls = "typed_controls"
        }
    }

    struct Format: Encodable {
        var id: String
        var fourcc: String
        var width: UInt32
        var height: UInt32
        var frameRateRanges: [RateRange]

        enum CodingKeys: String, CodingKey {
            case id, fourcc, width, height
            case frameRateRanges = "frame_rate_ranges"
        }
    }

    struct RateRange: Encodable {
        var kind: String
        var minFrameDuration: String
        var maxFrameDuration: String
        var step: String?
        var maxFrameRate: Double
        var minFrameRate: Double

        enum CodingKeys: String, CodingKey {
            case kind, step
            case minFrameDuration = "min_frame_duration", maxFrameDuration = "max_frame_duration"
            case maxFrameRate = "max_frame_rate", minFrameRate = "min_frame_rate"
        }
    }

    struct Control: Encodable {
        var id: UInt32
        var name: String
        var type: String
        var minimum: Int64
        var maximum: Int64
        var step: UInt64
        var defaultValue: Int64
        var value: Int64?
        var flags: UInt32
        var menu: [MenuEntry]

        enum CodingKeys: String, CodingKey {
            case id, name, type, minimum, maximum, step, value, flags, menu
            case defaultValue = "default"
        }
    }

    struct MenuEntry: Encodable {
        var index: Int64
        var name: String?
        var value: Int64?
    }

    struct TypedControls: Encodable {
        var focusModes: [String]
        var lensPosition: Bool
        var exposureModes: [String]
        var whiteBalanceModes: [String]
        var zoom: Bool
        var torch: Bool

        enum CodingKeys: String, CodingKey {
            case zoom, torch
            case focusModes = "focus_modes", lensPosition = "lens_position", exposureModes = "exposure_modes"
            case whiteBalanceModes = "white_balance_modes"
        }
    }

    var devices: [Device]
    var skipped: [String: String]

    init(devices: [CaptureDevice], skipped: [String: String]) {
        self.skipped = skipped
        self.devices = devices.map { device in
            let values = (try? device.controlValues()) ?? [:]
            let support = device.typedControlSupport
            return Device(
                uniqueID: device.uniqueID,
                name: device.identity.localizedName,
                modelID: device.identity.modelID,
                type: device.identity.deviceType.rawValue,
                position: device.identity.position.rawValue,
                label: device.identity.label,
                backend: device.identity.backend,
                formats: device.formats.map { format in
                    Format(
                        id: format.id,
                        fourcc: format.pixelFormat.fourCC,
                        width: format.dimensions.width,
                        height: format.dimensions.height,
                        frameRateRanges: format.frameRateRanges.map(RateRange.init)
                    )
                },
                controls: device.controls.map { control in
                    Control(
                        id: control.id,
                        name: control.name,
                        type: control.type.rawValue,
                        minimum: control.minimum,
                        maximum: control.maximum,
                        step: control.step,
                        defaultValue: control.defaultValue,
                        value: values[control.id],
                        flags: control.flags,
                        menu: control.menu.map { MenuEntry(index: $0.index, name: $0.name, value: $0.value) }
                    )
                },
                typedControls: TypedControls(
                    focusModes: FocusMode.allCases.filter(support.focusModes.contains).map(\.rawValue),
                    lensPosition: support.lensPosition,
                    exposureModes: ExposureMode.allCases.filter(support.exposureModes.contains).map(\.rawValue),
                    whiteBalanceModes: WhiteBalanceMode.allCases.filter(support.whiteBalanceModes.contains).map(\.rawValue),
                    zoom: support.zoom,
                    torch: support.torch
                )
            )
        }
    }

    /// The listing as text, in the spirit of `v4l2-ctl --list-formats-ext --list-ctrls-menus`.
    var text: String {
        var lines: [String] = []
        if devices.isEmpty { lines.append("no devices") }
        for device in devices {
            var where_ = device.backend == device.type ? [device.backend] : [device.backend, device.type]
            if device.position != "unspecified" { where_.append(device.position) }
            if !device.label.isEmpty { where_.append("label \(device.label)") }
            lines.append("\(device.uniqueID)  \(device.name)  (\(where_.joined(separator: ", ")))")
            lines.append("  formats:")
            for format in device.formats {
                lines.append("    \(format.fourcc) \(format.width)x\(format.height)")
                for range in format.frameRateRanges {
                    switch range.kind {
                    case "discrete":
                        lines.append("      interval: discrete \(range.minFrameDuration) s (\(fps(range.maxFrameRate)) fps)")
                    case "stepwise":
                        lines.append("      interval: stepwise \(range.minFrameDuration) s - \(range.maxFrameDuration) s with step \(range.step ?? "?") s (\(fps(range.minFrameRate))-\(fps(range.maxFrameRate)) fps)")
                    default:
                        lines.append("      interval: continuous \(range.minFrameDuration) s - \(range.maxFrameDuration) s (\(fps(range.minFrameRate))-\(fps(range.maxFrameRate)) fps)")
                    }
                }
            }
            lines.append("  controls:")
            for control in device.controls where control.type != "class" {
                var line = "    0x\(String(format: "%08x", control.id)) \(control.name) (\(control.type)): min=\(control.minimum) max=\(control.maximum)"
                if control.type == "integer" || control.type == "integer64" { line += " step=\(control.step)" }
                line += " default=\(control.defaultValue)"
                if let value = control.value { line += " value=\(value)" }
                if control.flags & ControlDescriptor.flagInactive != 0 { line += " flags=inactive" }
                if control.flags & ControlDescriptor.flagReadOnly != 0 { line += " flags=read-only" }
                lines.append(line)
                for entry in control.menu {
                    lines.append("        \(entry.index): \(entry.name ?? entry.value.map(String.init) ?? "")")
                }
            }
            let typed = device.typedControls
            var support: [String] = []
            if !typed.focusModes.isEmpty { support.append("focus \(typed.focusModes.joined(separator: "/"))") }
            if typed.lensPosition { support.append("lens position") }
            if !typed.exposureModes.isEmpty { support.append("exposure \(typed.exposureModes.joined(separator: "/"))") }
            if !typed.whiteBalanceModes.isEmpty { support.append("white balance \(typed.whiteBalanceModes.joined(separator: "/"))") }
            if typed.zoom { support.append("zoom") }
            if typed.torch { support.append("torch") }
            lines.append("  typed controls: \(support.isEmpty ? "none" : support.joined(separator: ", "))")
        }
        for (path, reason) in skipped.sorted(by: { $0.key < $1.key }) {
            lines.append("skipped \(path): \(reason)")
        }
        return lines.joined(separator: "\n")
    }

    private func fps(_ value: Double) -> String {
        value == value.rounded() ? String(Int(value)) : String(format: "%.3f", value)
    }
}

extension DeviceListing.RateRange {
    init(_ range: FrameRateRange) {
        func text(_ duration: FrameDuration) -> String { "\(duration.numerator)/\(duration.denominator)" }
        minFrameDuration = text(range.minFrameDuration)
        maxFrameDuration = text(range.maxFrameDuration)
        maxFrameRate = range.maxFrameRate
        minFrameRate = range.minFrameRate
        switch range.kind {
        case .discrete:
            kind = "discrete"
        case .stepwise(let step):
            kind = "stepwise"
            self.step = text(step)
        case .continuous:
            kind = "continuous"
        }
    }
}
