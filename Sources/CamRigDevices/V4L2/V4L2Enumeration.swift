import CLibV4L2
import CamRigDeviceModel

/// Reading what a V4L2 device offers: capabilities, formats × sizes × intervals, controls.
extension V4L2Handle {
    struct Capabilities {
        var driver: String
        var card: String
        var busInfo: String
        var deviceCaps: UInt32

        var isVideoCapture: Bool { deviceCaps & UInt32(V4L2_CAP_VIDEO_CAPTURE) != 0 }
        var canStream: Bool { deviceCaps & UInt32(V4L2_CAP_STREAMING) != 0 }
    }

    func capabilities() throws(DeviceError) -> Capabilities {
        var caps = v4l2_capability()
        try ioctl(CAMRIG_VIDIOC_QUERYCAP, &caps, "VIDIOC_QUERYCAP")
        let deviceCaps = caps.capabilities & UInt32(V4L2_CAP_DEVICE_CAPS) != 0 ? caps.device_caps : caps.capabilities
        return Capabilities(driver: cString(caps.driver), card: cString(caps.card), busInfo: cString(caps.bus_info), deviceCaps: deviceCaps)
    }

    /// Sizes CamRig offers for drivers that declare stepwise or continuous frame sizes: the common ones in
    /// range (and on the step grid), plus the largest.
    static let commonSizes: [(UInt32, UInt32)] = [
        (320, 240), (640, 480), (800, 600), (1024, 768), (1280, 720), (1280, 960), (1280, 1024), (1600, 1200), (1920, 1080),
        (2560, 1440), (3840, 2160),
    ]

    func formats() throws(DeviceError) -> [DeviceFormat] {
        var result: [DeviceFormat] = []
        var index: UInt32 = 0
        while true {
            var description = v4l2_fmtdesc()
            description.index = index
            description.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
            guard try enumerate(CAMRIG_VIDIOC_ENUM_FMT, &description, "VIDIOC_ENUM_FMT") else { break }
            index += 1
            // libv4lconvert adds formats it converts in software; a rig uses what the sensor delivers.
            if description.flags & UInt32(V4L2_FMT_FLAG_EMULATED) != 0 { continue }
            let pixelFormat = PixelFormat(rawValue: description.pixelformat)
            let compressed = description.flags & UInt32(V4L2_FMT_FLAG_COMPRESSED) != 0
            for size in try frameSizes(pixelFormat) where !result.contains(where: { $0.pixelFormat == pixelFormat && $0.dimensions == size }) {
                let ranges = try frameIntervals(pixelFormat, size)
                guard !ranges.isEmpty else { continue }
                result.append(
                    DeviceFormat(
                        pixelFormat: pixelFormat,
                        dimensions: size,
                        frameRateRanges: ranges,
                        bytesPerLine: compressed ? 0 : nil,
                        imageSize: compressed ? UInt32(size.pixelCount) : nil
                    )
                )
            }
        }
        return result
    }

    func frameSizes(_ format: PixelFormat) throws(DeviceError) -> [Dimensions] {
        var sizes: [Dimensions] = []
        var index: UInt32 = 0
        while true {
            var size = v4l2_frmsizeenum()
            size.index = index
            size.pixel_format = format.rawValue
            guard try enumerate(CAMRIG_VIDIOC_ENUM_FRAMESIZES, &size, "VIDIOC_ENUM_FRAMESIZES \(format)") else { break }
            index += 1
            if size.type == V4L2_FRMSIZE_TYPE_DISCRETE.rawValue {
                sizes.append(Dimensions(width: size.discrete.width, height: size.discrete.height))
                continue
            }
            // Stepwise or continuous: one entry describes the whole range.
            let range = size.stepwise
            let stepW = max(range.step_width, 1)
            let stepH = max(range.step_height, 1)
            for (width, height) in Self.commonSizes
            where width >= range.min_width && width <= range.max_width && height >= range.min_height && height <= range.max_height
                && (width - range.min_width) % stepW == 0 && (height - range.min_height) % stepH == 0
            {
                sizes.append(Dimensions(width: width, height: height))
            }
            let largest = Dimensions(width: range.max_width, height: range.max_height)
            if !sizes.contains(largest) { sizes.append(largest) }
            break
        }
        return sizes
    }

    func frameIntervals(_ format: PixelFormat, _ size: Dimensions) throws(DeviceError) -> [FrameRateRange] {
        var ranges: [FrameRateRange] = []
        var index: UInt32 = 0
        while true {
            var interval = v4l2_frmivalenum()
            interval.index = index
            interval.pixel_format = format.rawValue
            interval.width = size.width
            interval.height = size.height
            guard try enumerate(CAMRIG_VIDIOC_ENUM_FRAMEINTERVALS, &interval, "VIDIOC_ENUM_FRAMEINTERVALS \(format) \(size)") else { break }
            index += 1
            if interval.type == V4L2_FRMIVAL_TYPE_DISCRETE.rawValue {
                if let duration = FrameDuration(numerator: interval.discrete.numerator, denominator: interval.discrete.denominator) {
                    ranges.append(FrameRateRange(discrete: duration))
                }
                continue
            }
            let stepwise = interval.stepwise
            guard let min = FrameDuration(numerator: stepwise.min.numerator, denominator: stepwise.min.denominator),
                let max = FrameDuration(numerator: stepwise.max.numerator, denominator: stepwise.max.denominator)
            else { break }
            let kind: FrameRateRange.Kind
            if interval.type == V4L2_FRMIVAL_TYPE_STEPWISE.rawValue,
                let step = FrameDuration(numerator: stepwise.step.numerator, denominator: stepwise.step.denominator)
            {
                kind = .stepwise(step: step)
            } else {
                kind = .continuous
            }
            if let range = FrameRateRange(min: min, max: max, kind: kind) { ranges.append(range) }
            break
        }
        return ranges
    }

    func controls() throws(DeviceError) -> [ControlDescriptor] {
        var result: [ControlDescriptor] = []
        var query = v4l2_query_ext_ctrl()
        query.id = CAMRIG_V4L2_CTRL_FLAG_NEXT_CTRL | CAMRIG_V4L2_CTRL_FLAG_NEXT_COMPOUND
        while try enumerate(CAMRIG_VIDIOC_QUERY_EXT_CTRL, &query, "VIDIOC_QUERY_EXT_CTRL") {
            defer { query.id |= CAMRIG_V4L2_CTRL_FLAG_NEXT_CTRL | CAMRIG_V4L2_CTRL_FLAG_NEXT_COMPOUND }
            guard let type = Self.controlType(query.type) else { continue }
            if query.flags & UInt32(V4L2_CTRL_FLAG_DISABLED) != 0 { continue }
            var menu: [MenuItem] = []
            if type == .menu || type == .integerMenu {
                var item = v4l2_querymenu()
                item.id = query.id
                var position = query.minimum
                while position <= query.maximum {
                    item.index = UInt32(position)
                    if try enumerate(CAMRIG_VIDIOC_QUERYMENU, &item, "VIDIOC_QUERYMENU") {
                        menu.append(
                            type == .menu
                                ? MenuItem(index: position, name: cString(item.name))
                                : MenuItem(index: position, value: item.value)
                        )
                    }
                    position += 1
                }
            }
            result.append(
                ControlDescriptor(
                    id: query.id,
                    name: cString(query.name),
                    type: type,
                    minimum: query.minimum,
                    maximum: query.maximum,
                    step: query.step,
                    defaultValue: query.default_value,
                    menu: menu,
                    flags: query.flags
                )
            )
        }
        return result
    }

    static func controlType(_ raw: UInt32) -> ControlType? {
        switch raw {
        case V4L2_CTRL_TYPE_INTEGER.rawValue: .integer
        case V4L2_CTRL_TYPE_BOOLEAN.rawValue: .boolean
        case V4L2_CTRL_TYPE_MENU.rawValue: .menu
        case V4L2_CTRL_TYPE_INTEGER_MENU.rawValue: .integerMenu
        case V4L2_CTRL_TYPE_BUTTON.rawValue: .button
        case V4L2_CTRL_TYPE_INTEGER64.rawValue: .integer64
        case V4L2_CTRL_TYPE_BITMASK.rawValue: .bitmask
        case V4L2_CTRL_TYPE_CTRL_CLASS.rawValue: .controlClass
        default: nil  // strings and compound controls are not offered
        }
    }

    func readControls(_ ids: [UInt32]) throws(DeviceError) -> [UInt32: Int64] {
        guard !ids.isEmpty else { return [:] }
        var controls = ids.map { id -> v4l2_ext_control in
            var control = v4l2_ext_control()
            control.id = id
            return control
        }
        let count = controls.count
        let result: Result<[UInt32: Int64], DeviceError> = controls.withUnsafeMutableBufferPointer { buffer in
            var request = v4l2_ext_controls()
            request.which = CAMRIG_V4L2_CTRL_WHICH_CUR_VAL
            request.count = UInt32(count)
            request.controls = buffer.baseAddress
            do throws(DeviceError) {
                try ioctl(CAMRIG_VIDIOC_G_EXT_CTRLS, &request, "VIDIOC_G_EXT_CTRLS")
            } catch {
                return .failure(error)
            }
            var values: [UInt32: Int64] = [:]
            for control in buffer { values[control.id] = control.value64 }
            return .success(values)
        }
        return try result.get()
    }

    func writeControls(_ values: [(id: UInt32, value: Int64)], types: [UInt32: ControlType]) throws(DeviceError) {
        guard !values.isEmpty else { return }
        var controls = values.map { entry -> v4l2_ext_control in
            var control = v4l2_ext_control()
            control.id = entry.id
            if types[entry.id] == .integer64 { control.value64 = entry.value } else { control.value = Int32(clamping: entry.value) }
            return control
        }
        let count = controls.count
        let failure: DeviceError? = controls.withUnsafeMutableBufferPointer { buffer in
            var request = v4l2_ext_controls()
            request.which = CAMRIG_V4L2_CTRL_WHICH_CUR_VAL
            request.count = UInt32(count)
            request.controls = buffer.baseAddress
            do throws(DeviceError) {
                try ioctl(CAMRIG_VIDIOC_S_EXT_CTRLS, &request, "VIDIOC_S_EXT_CTRLS")
                return nil
            } catch {
                let index = Int(request.error_idx)
                if index < count {
                    var named = error
                    named.message += " (control 0x\(String(buffer[index].id, radix: 16)))"
                    return named
                }
                return error
            }
        }
        if let failure { throw failure }
    }
}
