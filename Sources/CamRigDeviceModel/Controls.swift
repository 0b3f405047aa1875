/// V4L2 control ids CamRig maps onto typed camera controls. Ids, not names: kernel 5.16 renamed
/// `exposure_absolute` to `exposure_time_absolute` and `focus_auto` to `focus_automatic_continuous`.
public enum V4L2ControlID {
    static let user: UInt32 = 0x0098_0900
    static let camera: UInt32 = 0x009A_0900
    static let flash: UInt32 = 0x009C_0900
    static let imageSource: UInt32 = 0x009E_0900
    static let imageProcessing: UInt32 = 0x009F_0900

    public static let brightness = user + 0
    public static let contrast = user + 1
    public static let saturation = user + 2
    public static let hue = user + 3
    public static let autoWhiteBalance = user + 12
    public static let redBalance = user + 14
    public static let blueBalance = user + 15
    public static let gain = user + 19
    public static let powerLineFrequency = user + 24
    public static let whiteBalanceTemperature = user + 26
    public static let exposureAuto = camera + 1
    public static let exposureAbsolute = camera + 2
    public static let focusAbsolute = camera + 10
    public static let focusAuto = camera + 12
    public static let zoomAbsolute = camera + 13
    public static let autoExposureBias = camera + 19
    public static let isoSensitivity = camera + 23
    public static let flashLEDMode = flash + 1
    public static let torchIntensity = flash + 8
    /// `V4L2_CID_VBLANK`: lines of vertical blanking; with the active height, a raw sensor's frame length.
    public static let verticalBlanking = imageSource + 1
    /// `V4L2_CID_HBLANK`: pixels of horizontal blanking; with the active width, the line length.
    public static let horizontalBlanking = imageSource + 2
    public static let analogueGain = imageSource + 3
    /// `V4L2_CID_PIXEL_RATE`: pixels per second, which with the line length gives the line duration.
    public static let pixelRate = imageProcessing + 2
    public static let testPattern = imageProcessing + 3

    /// `V4L2_EXPOSURE_*` menu values of `exposureAuto`.
    public enum ExposureAutoValue {
        public static let auto: Int64 = 0
        public static let manual: Int64 = 1
        public static let shutterPriority: Int64 = 2
        public static let aperturePriority: Int64 = 3
    }
}

/// The kind of a raw control (`V4L2_CTRL_TYPE_*`).
public enum ControlType: String, Hashable, Sendable {
    case integer, boolean, menu, integerMenu = "integer-menu", button, integer64, string, bitmask
    case controlClass = "class"
}

/// One entry of a menu control.
public struct MenuItem: Hashable, Sendable {
    public var index: Int64
    /// For menus.
    public var name: String?
    /// For integer menus.
    public var value: Int64?

    public init(index: Int64, name: String? = nil, value: Int64? = nil) {
        self.index = index
        self.name = name
        self.value = value
    }
}

/// A device control as the driver describes it, addressed by its V4L2 id.
public struct ControlDescriptor: Hashable, Sendable, Identifiable {
    public var id: UInt32
    public var name: String
    public var type: ControlType
    public var minimum: Int64
    public var maximum: Int64
    public var step: UInt64
    public var defaultValue: Int64
    public var menu: [MenuItem]
    /// `V4L2_CTRL_FLAG_*`.
    public var flags: UInt32

    public static let flagDisabled: UInt32 = 0x0001
    public static let flagReadOnly: UInt32 = 0x0004
    public static let flagInactive: UInt32 = 0x0010
    public static let flagWriteOnly: UInt32 = 0x0040

    public init(
        id: UInt32,
        name: String,
        type: ControlType,
        minimum: Int64,
        maximum: Int64,
        step: UInt64 = 1,
        defaultValue: Int64,
        menu: [MenuItem] = [],
        flags: UInt32 = 0
    ) {
        self.id = id
        self.name = name
        self.type = type
        self.minimum = minimum
        self.maximum = maximum
        self.step = step
        self.defaultValue = defaultValue
        self.menu = menu
        self.flags = flags
    }

    public var isReadOnly: Bool { flags & Self.flagReadOnly != 0 }

    /// Why `value` is not allowed, or `nil` if it is.
    public func rejection(of value: Int64) -> String? {
        if isReadOnly { return "control '\(name)' (0x\(String(id, radix: 16))) is read-only" }
        guard value >= minimum && value <= maximum else {
            return "control '\(name)' (0x\(String(id, radix: 16))) must be within \(minimum)…\(maximum), got \(value)"
        }
        switch type {
        case .menu, .integerMenu:
            guard menu.contains(where: { $0.index == value }) else {
                let valid = menu.map { "\($0.index)" + ($0.name.map { "=\($0)" } ?? "") }.joined(separator: ", ")
                return "control '\(name)' takes one of \(valid), got \(value)"
            }
        case .integer, .integer64:
            if step > 1 && (value - minimum) % Int64(step) != 0 {
                return "control '\(name)' moves in steps of \(step) from \(minimum), got \(value)"
            }
        default:
            break
        }
        return nil
    }
}

public enum FocusMode: String, Hashable, Sendable, CaseIterable {
    /// Lens position fixed at `lensPosition`.
    case locked
    /// Focus once, then lock.
    case auto
    /// Refocus continuously.
    case continuous
}

public enum ExposureMode: String, Hashable, Sendable, CaseIterable {
    case locked, auto, continuous
    /// `exposureDuration` and gain/ISO as set.
    case custom
}

public enum WhiteBalanceMode: String, Hashable, Sendable, CaseIterable {
    case locked, auto, continuous
}

public enum TorchMode: String, Hashable, Sendable, CaseIterable {
    case off, on, auto
}

/// What the typed controls are set to (the parts of `AVCaptureDevice` that configure the sensor).
public struct CameraSettings: Hashable, Sendable {
    public var focusMode: FocusMode = .continuous
    /// 0 (nearest) … 1 (farthest).
    public var lensPosition: Float = 0.5
    public var exposureMode: ExposureMode = .continuous
    public var exposureDuration: FrameDuration = FrameDuration(numerator: 1, denominator: 60)!
    public var iso: Float = 100
    public var exposureTargetBias: Float = 0
    public var whiteBalanceMode: WhiteBalanceMode = .continuous
    public var whiteBalanceTemperature: Float = 5000
    /// Red and blue gains relative to green (1 = neutral), used when white balance is locked.
    public var whiteBalanceRedGain: Float = 1
    public var whiteBalanceBlueGain: Float = 1
    public var zoomFactor: Double = 1
    public var torchMode: TorchMode = .off
    public var torchLevel: Float = 0

    public init() {}
}

/// A change to typed controls: `nil` leaves a setting as it is.
public struct CameraSettingsChange: Hashable, Sendable {
    public var focusMode: FocusMode?
    public var lensPosition: Float?
    public var exposureMode: ExposureMode?
    public var exposureDuration: FrameDuration?
    public var iso: Float?
    public var exposureTargetBias: Float?
    public var whiteBalanceMode: WhiteBalanceMode?
    public var whiteBalanceTemperature: Float?
    public var whiteBalanceRedGain: Float?
    public var whiteBalanceBlueGain: Float?
    public var zoomFactor: Double?
    /// Zoom factor doublings per second towards `zoomFactor`; `nil` or 0 sets it at once.
    public var zoomRampRate: Double?
    public var torchMode: TorchMode?
    public var torchLevel: Float?

    public init() {}
}
