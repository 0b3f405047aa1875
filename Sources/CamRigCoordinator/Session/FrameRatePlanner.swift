import CamRigDeviceModel

/// Chooses one frame rate for every camera of a session: AVFoundation's "highest frame rate" example
/// (pick the format with the fastest range, set min = max frame duration), done rig-wide.
///
/// Pure: it sees formats, never devices, so every rule is tested without a camera.
public enum FrameRatePlanner {
    /// What one device offers.
    public struct Device: Sendable {
        /// How errors name it: `agent/device`.
        public var name: String
        public var formats: [DeviceFormat]

        public init(name: String, formats: [DeviceFormat]) {
            self.name = name
            self.formats = formats
        }
    }

    /// What the session asks for.
    public struct Request: Sendable {
        public var dimensions: Dimensions
        /// `nil`: any pixel format; uncompressed ones first when several allow the same rate.
        public var pixelFormat: PixelFormat?
        /// `nil`: the highest rate every device supports.
        public var frameDuration: FrameDuration?

        public init(dimensions: Dimensions, pixelFormat: PixelFormat? = nil, frameDuration: FrameDuration? = nil) {
            self.dimensions = dimensions
            self.pixelFormat = pixelFormat
            self.frameDuration = frameDuration
        }
    }

    /// The outcome: one format per device (in input order) and the duration all of them run at.
    public struct Plan: Sendable, Equatable {
        public var frameDuration: FrameDuration
        public var formats: [DeviceFormat]
    }

    public struct PlanError: Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    /// Plans the session, or explains, device by device, why it cannot run as asked. Nothing changes
    /// on any device before this succeeds.
    public static func plan(_ request: Request, devices: [Device]) throws(PlanError) -> Plan {
        guard !devices.isEmpty else { throw PlanError(description: "the session has no cameras") }
        let candidates = devices.map { device in
            device.formats.filter { format in
                format.dimensions == request.dimensions
                    && (request.pixelFormat.map { format.pixelFormat == $0 } ?? true)
            }
        }
        let wanted = "\(request.dimensions)" + (request.pixelFormat.map { " \($0.fourCC)" } ?? "")
        let lacking = devices.indices.filter { candidates[$0].isEmpty }
        if !lacking.isEmpty {
            let lines = lacking.map { index in
                let sizes = Set(devices[index].formats.map { "\($0.pixelFormat.fourCC) \($0.dimensions)" }).sorted()
                return "  \(devices[index].name): offers \(sizes.joined(separator: ", "))"
            }
            throw PlanError(description: "no format \(wanted) on \(lacking.count) of \(devices.count) cameras:\n" + lines.joined(separator: "\n"))
        }

        let durations: [FrameDuration]
        if let requested = request.frameDuration {
            durations = [requested]
        } else {
            // Every bound any device declares, fastest first: the slowest device's fastest duration is among them.
            let bounds = candidates.flatMap { $0.flatMap { $0.frameRateRanges.flatMap { [$0.minFrameDuration, $0.maxFrameDuration] } } }
            durations = Set(bounds).sorted()
        }
        for duration in durations {
            let chosen = candidates.map { formats in choose(from: formats, supporting: duration) }
            if chosen.allSatisfy({ $0 != nil }) {
                return Plan(frameDuration: duration, formats: chosen.map { $0! })
            }
        }

        let lines = devices.indices.map { index in
            let ranges = candidates[index].map { format in
                "\(format.pixelFormat.fourCC) " + format.frameRateRanges.map(\.description).joined(separator: ", ")
            }
            return "  \(devices[index].name): \(ranges.joined(separator: "; "))"
        }
        if let requested = request.frameDuration {
            throw PlanError(description: "not every camera supports \(rateText(requested)) at \(wanted); supported:\n" + lines.joined(separator: "\n"))
        }
        throw PlanError(description: "no frame rate is common to all cameras at \(wanted); supported:\n" + lines.joined(separator: "\n"))
    }

    /// The format that allows `duration`, preferring uncompressed ones.
    private static func choose(from formats: [DeviceFormat], supporting duration: FrameDuration) -> DeviceFormat? {
        let fitting = formats.filter { $0.supports(duration) }
        return fitting.first { !$0.pixelFormat.isCompressed } ?? fitting.first
    }

    /// "30 fps" or "29.97 fps (1001/30000 s)".
    public static func rateText(_ duration: FrameDuration) -> String {
        let rate = duration.frameRate
        if rate == rate.rounded() { return "\(Int(rate)) fps" }
        return "\((rate * 100).rounded() / 100) fps (\(duration.numerator)/\(duration.denominator) s)"
    }
}
