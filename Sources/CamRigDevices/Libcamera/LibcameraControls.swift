import CLibcamera
import CamRigDeviceModel

/// A control as libcamera lists it for one camera: numbers as doubles, a rectangle as x, y, width, height.
struct LibcameraControl: Sendable, Hashable {
    var id: UInt32
    var name: String
    var type: Int32
    var isArray: Bool
    var minimum: [Double]
    var maximum: [Double]
    var defaultValue: [Double]
    /// The values it takes, with libcamera's names for them, when it lists them.
    var enumerators: [Enumerator]

    struct Enumerator: Sendable, Hashable {
        var value: Int32
        var name: String
    }

    init(_ control: camrig_lc_control) {
        id = control.id
        name = withUnsafeBytes(of: control.name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        type = control.type
        isArray = control.is_array != 0
        minimum = withUnsafeBytes(of: control.minimum) { Array($0.bindMemory(to: Double.self)) }
        maximum = withUnsafeBytes(of: control.maximum) { Array($0.bindMemory(to: Double.self)) }
        defaultValue = withUnsafeBytes(of: control.default_value) { Array($0.bindMemory(to: Double.self)) }
        var enumerators: [Enumerator] = []
        withUnsafeBytes(of: control.enumerators) { values in
            withUnsafeBytes(of: control.enumerator_names) { names in
                let numbers = values.bindMemory(to: Int32.self)
                for index in 0..<Int(min(control.enumerator_count, 16)) {
                    let name = names[(32 * index)..<(32 * index + 32)].prefix { $0 != 0 }
                    enumerators.append(Enumerator(value: numbers[index], name: String(decoding: name, as: UTF8.self)))
                }
            }
        }
        self.enumerators = enumerators
    }

    /// Whether it holds one number, reachable as a raw control (arrays and rectangles are set through the
    /// typed settings: ColourGains, ScalerCrop, FrameDurationLimits).
    var isScalar: Bool {
        !isArray && [CAMRIG_LC_BOOL, CAMRIG_LC_BYTE, CAMRIG_LC_UINT16, CAMRIG_LC_UINT32, CAMRIG_LC_INT32, CAMRIG_LC_INT64, CAMRIG_LC_FLOAT].map(Int32.init).contains(type)
    }

    var isFloat: Bool { type == Int32(CAMRIG_LC_FLOAT) }

    /// Raw controls carry integers; a float control counts thousandths.
    static let floatScale = 1000.0

    /// The raw control CamRig lists for it (scalars only), with its range.
    var descriptor: ControlDescriptor? {
        guard isScalar else { return nil }
        func integer(_ values: [Double], _ fallback: Int64) -> Int64 {
            guard let first = values.first, first.isFinite else { return fallback }
            return Int64((first * (isFloat ? Self.floatScale : 1)).rounded())
        }
        if type == Int32(CAMRIG_LC_BOOL) {
            return ControlDescriptor(id: id, name: name, type: .boolean, minimum: 0, maximum: 1, defaultValue: integer(defaultValue, 0))
        }
        if !enumerators.isEmpty {
            let values = enumerators.map { Int64($0.value) }
            return ControlDescriptor(
                id: id, name: name, type: .menu, minimum: values.min()!, maximum: values.max()!,
                defaultValue: integer(defaultValue, values[0]),
                menu: enumerators.map { MenuItem(index: Int64($0.value), name: $0.name.isEmpty ? nil : $0.name) })
        }
        let low = integer(minimum, isFloat ? -1_000_000 : Int64(Int32.min))
        let high = max(low, integer(maximum, isFloat ? 1_000_000 : Int64(Int32.max)))
        return ControlDescriptor(
            id: id, name: isFloat ? "\(name) (thousandths)" : name, type: type == Int32(CAMRIG_LC_INT64) ? .integer64 : .integer,
            minimum: low, maximum: high, defaultValue: min(max(integer(defaultValue, low), low), high))
    }

    /// The value libcamera takes for raw `value`.
    func value(fromRaw value: Int64) -> camrig_lc_value {
        let number = isFloat ? Double(value) / Self.floatScale : Double(value)
        return camrig_lc_value(id: id, count: 1, values: (number, 0, 0, 0))
    }
}

/// The typed settings (AVFoundation's) onto libcamera's controls, by name: the controls a pipeline lists
/// decide what a camera supports, so upstream libcamera and Raspberry Pi's fork (which renamed some, as
/// `AeEnable` into `ExposureTimeMode` and `AnalogueGainMode` in 0.5) are both handled at run time.
struct LibcameraSettingsMapping: Sendable {
    let byName: [String: LibcameraControl]

    init(_ controls: [LibcameraControl]) {
        byName = Dictionary(controls.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
    }

    /// LensPosition's range in dioptres, when the camera has the control.
    var lensRange: (low: Double, high: Double)? {
        guard let lens = byName["LensPosition"] else { return nil }
        let low = lens.minimum.first.flatMap { $0.isFinite ? $0 : nil } ?? 0
        let high = lens.maximum.first.flatMap { $0.isFinite ? $0 : nil } ?? 10
        return high > low ? (low, high) : nil
    }

    /// The model's lens position (0 nearest … 1 farthest) of a LensPosition in dioptres.
    func lensPosition(dioptres: Double) -> Double? {
        guard let range = lensRange else { return nil }
        return min(max((range.high - dioptres) / (range.high - range.low), 0), 1)
    }

    var support: TypedControlSupport {
        var support = TypedControlSupport()
        if byName["AeEnable"] != nil || byName["ExposureTimeMode"] != nil { support.exposureModes.formUnion([.continuous, .auto]) }
        if byName["ExposureTime"] != nil { support.exposureModes.formUnion([.custom, .locked]) }
        support.exposureTargetBias = byName["ExposureValue"] != nil
        if byName["AwbEnable"] != nil { support.whiteBalanceModes.formUnion([.continuous, .auto]) }
        if byName["ColourTemperature"] != nil || byName["ColourGains"] != nil { support.whiteBalanceModes.insert(.locked) }
        if let af = byName["AfMode"] {
            let modes = Set(af.enumerators.map(\.value))
            if modes.contains(2) { support.focusModes.insert(.continuous) }
            if modes.contains(1) { support.focusModes.insert(.auto) }
            if modes.contains(0) { support.focusModes.insert(.locked) }
        }
        if byName["LensPosition"] != nil {
            support.focusModes.insert(.locked)
            support.lensPosition = true
        }
        support.zoom = byName["ScalerCrop"] != nil
        return support
    }

    /// The control values that put `settings` into effect, for the controls this camera lists.
    /// `fullCrop` is the sensor area ScalerCrop is relative to (x, y, width, height).
    func values(for settings: CameraSettings, fullCrop: [Double]?) -> [camrig_lc_value] {
        var values: [camrig_lc_value] = []
        func set(_ name: String, _ numbers: [Double]) {
            guard let control = byName[name] else { return }
            var clamped = numbers
            if !control.isArray, control.type != Int32(CAMRIG_LC_RECTANGLE) {
                let low = control.minimum.first ?? -.infinity
                let high = control.maximum.first ?? .infinity
                if low.isFinite, high.isFinite, low <= high { clamped = [min(max(numbers[0], low), high)] }
            }
            var value = camrig_lc_value(id: control.id, count: UInt32(clamped.count), values: (0, 0, 0, 0))
            withUnsafeMutableBytes(of: &value.values) { raw in
                let slots = raw.bindMemory(to: Double.self)
                for (index, number) in clamped.prefix(4).enumerated() { slots[index] = number }
            }
            values.append(value)
        }
        let manualExposure = settings.exposureMode == .custom || settings.exposureMode == .locked
        if byName["AeEnable"] != nil {
            set("AeEnable", [manualExposure ? 0 : 1])
        } else {
            // libcamera 0.5 and later: exposure time and gain each have their own mode (0 auto, 1 manual).
            set("ExposureTimeMode", [manualExposure ? 1 : 0])
            set("AnalogueGainMode", [manualExposure ? 1 : 0])
        }
        if manualExposure {
            set("ExposureTime", [(settings.exposureDuration.seconds * 1_000_000).rounded()])
            set("AnalogueGain", [Double(settings.iso) / 100])
        } else if byName["ExposureValue"] != nil {
            set("ExposureValue", [Double(settings.exposureTargetBias)])
        }
        switch settings.whiteBalanceMode {
        case .continuous, .auto:
            set("AwbEnable", [1])
        case .locked:
            set("AwbEnable", [0])
            if byName["ColourTemperature"] != nil {
                set("ColourTemperature", [Double(settings.whiteBalanceTemperature).rounded()])
            } else {
                set("ColourGains", [Double(settings.whiteBalanceRedGain), Double(settings.whiteBalanceBlueGain)])
            }
        }
        if let af = byName["AfMode"] {
            let wanted: Int32 = settings.focusMode == .continuous ? 2 : settings.focusMode == .auto ? 1 : 0
            if af.enumerators.isEmpty || af.enumerators.contains(where: { $0.value == wanted }) { set("AfMode", [Double(wanted)]) }
        }
        if settings.focusMode == .locked, let range = lensRange {
            // libcamera counts dioptres (0 is infinity); the model's 0 is the nearest focus, 1 the farthest.
            set("LensPosition", [range.high - (range.high - range.low) * Double(settings.lensPosition)])
        }
        if let crop = fullCrop, crop.count == 4, byName["ScalerCrop"] != nil, settings.zoomFactor >= 1 {
            let width = (crop[2] / settings.zoomFactor).rounded()
            let height = (crop[3] / settings.zoomFactor).rounded()
            set("ScalerCrop", [crop[0] + ((crop[2] - width) / 2).rounded(), crop[1] + ((crop[3] - height) / 2).rounded(), width, height])
        }
        return values
    }
}
