import CamRigDeviceModel
import CamRigWire
import CamRigWireModel

/// `key=value` settings into a `Configure` change.
public enum DeviceSettingsParser {
    /// `photoOutput` is the device's photo output now: photo output keys change it, keeping the rest.
    public static func parse(_ settings: [String], photoOutput: WirePhotoOutputSettings = WirePhotoOutputSettings()) throws -> WireConfigure {
        var change = WireConfigure()
        guard !settings.isEmpty else { throw DeviceSettingsError("give at least one key=value setting") }
        for setting in settings {
            let parts = setting.split(separator: "=", maxSplits: 1).map(String.init)
            guard parts.count == 2, !parts[1].isEmpty else { throw DeviceSettingsError("'\(setting)' is not key=value") }
            let (key, value) = (parts[0], parts[1])
            func number() throws -> Double {
                guard Self.isDecimal(value), let number = Double(value) else { throw DeviceSettingsError("\(key)=\(value): not a number (e.g. 200, -0.5)") }
                return number
            }
            func mode<T>(_ modes: [String: T]) throws -> T {
                guard let mode = modes[value] else { throw DeviceSettingsError("\(key)=\(value): use one of \(modes.keys.sorted().joined(separator: ", "))") }
                return mode
            }
            switch key {
            case "format": change.formatID = value
            case "fps":
                guard let duration = duration(ofRate: value) else { throw DeviceSettingsError("fps=\(value): give a rate like 30 or 30000/1001") }
                change.minFrameDuration = WireRational(duration)
                change.maxFrameDuration = WireRational(duration)
            case "focus": change.focus.mode = try mode(["locked": .locked, "auto": .auto, "continuous": .continuous])
            case "lens": change.focus.lensPosition = Float(try number())
            case "exposure": change.exposure.mode = try mode(["locked": .locked, "auto": .auto, "continuous": .continuous])
            case "exposure-duration":
                guard let duration = durationText(value) else { throw DeviceSettingsError("exposure-duration=\(value): give seconds as a fraction like 1/250") }
                change.exposure.mode = .custom
                change.exposure.duration = WireRational(duration)
            case "iso": change.exposure.iso = Float(try number())
            case "bias": change.exposure.targetBias = Float(try number())
            case "white-balance": change.whiteBalance.mode = try mode(["locked": .locked, "auto": .auto, "continuous": .continuous])
            case "temperature": change.whiteBalance.temperatureKelvin = Float(try number())
            case "zoom": change.zoom.factor = try number()
            case "torch": change.torch.mode = try mode(["on": .on, "off": .off, "auto": .auto])
            case "responsive", "deferred", "max-quality", "max-photo-size":
                if !change.hasPhotoOutput { change.photoOutput = photoOutput }
                switch key {
                case "responsive": change.photoOutput.responsiveCapture = try mode(["on": true, "off": false])
                case "deferred": change.photoOutput.deferredDelivery = try mode(["on": true, "off": false])
                case "max-quality": change.photoOutput.maxQualityPrioritization = try mode(["speed": .speed, "balanced": .balanced, "quality": .quality])
                default:
                    let size = value.lowercased().split(separator: "x", omittingEmptySubsequences: false)
                    guard size.count == 2, let width = Self.count(size[0]), let height = Self.count(size[1]) else {
                        throw DeviceSettingsError("max-photo-size=\(value): give WxH, e.g. 1920x1080 (0x0: no limit)")
                    }
                    change.photoOutput.maxPhotoDimensions.width = width
                    change.photoOutput.maxPhotoDimensions.height = height
                }
            default:
                // 0xID (1 to 8 hex digits) = an integer of at most 18 digits, as openapi.yaml says.
                let hex = key.dropFirst(2)
                let digits = value.first == "-" || value.first == "+" ? value.dropFirst() : Substring(value)
                guard key.hasPrefix("0x"), (1...8).contains(hex.count), hex.allSatisfy(\.isHexDigit), let id = UInt32(hex, radix: 16),
                    (1...18).contains(digits.count), digits.allSatisfy(\.isASCIIDigit), let raw = Int64(value)
                else {
                    throw DeviceSettingsError("unknown setting '\(key)'; see `camrig device set --help`")
                }
                var control = WireControlValue()
                control.id = id
                control.integer = raw
                change.rawControls.append(control)
            }
        }
        return change
    }

    /// "30" → 1/30 s; "30000/1001" → 1001/30000 s.
    public static func duration(ofRate text: String) -> FrameDuration? {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        if parts.count == 2, let numerator = positive(parts[0]), let denominator = positive(parts[1]) {
            return FrameDuration(numerator: denominator, denominator: numerator)
        }
        guard let rate = positive(Substring(text)) else { return nil }
        return FrameDuration(framesPerSecond: rate)
    }

    /// "1/250" → 1/250 s.
    public static func durationText(_ text: String) -> FrameDuration? {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, let numerator = positive(parts[0]), let denominator = positive(parts[1]) else { return nil }
        return FrameDuration(numerator: numerator, denominator: denominator)
    }

    /// A whole number above 0 written with 1 to 9 digits and no leading zero (`^[1-9][0-9]{0,8}$`).
    public static func positive(_ text: Substring) -> UInt32? {
        guard let first = text.first, first != "0" else { return nil }
        return count(text)
    }

    /// A whole number written with 1 to 9 digits (`^[0-9]{1,9}$`).
    public static func count(_ text: Substring) -> UInt32? {
        guard (1...9).contains(text.count), text.allSatisfy(\.isASCIIDigit) else { return nil }
        return UInt32(text)
    }

    /// A decimal number as openapi.yaml's settings take it (`^-?[0-9]+(\.[0-9]+)?$`): no exponent, no
    /// `nan` or `inf`, no hexadecimal.
    static func isDecimal(_ text: String) -> Bool {
        let unsigned = text.hasPrefix("-") ? text.dropFirst() : Substring(text)
        let parts = unsigned.split(separator: ".", omittingEmptySubsequences: false)
        return (1...2).contains(parts.count) && parts.allSatisfy { !$0.isEmpty && $0.allSatisfy(\.isASCIIDigit) }
    }
}

/// A `key=value` device setting that cannot be applied as written; the message says what to write.
public struct DeviceSettingsError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

extension Character {
    /// 0 through 9 (not other scripts' digits).
    var isASCIIDigit: Bool { isASCII && isWholeNumber }
}
