import CamRigClock
import CamRigDeviceModel
import NIOConcurrencyHelpers

/// A source of devices: what is plugged in right now.
public protocol DeviceProvider: Sendable {
    /// Backends for the devices present now. Called on every scan; may return the same instances.
    func scan() -> [any CameraBackend]
}

/// A device appeared or went away.
public enum DeviceEvent: Sendable {
    case connected(CaptureDevice)
    case disconnected(DeviceIdentity)
}

/// Finds devices and notices when they come and go (AVFoundation's `DiscoverySession` and the
/// connected/disconnected notifications).
public final class DeviceDiscovery: Sendable {
    private let providers: [any DeviceProvider]

    struct State {
        var devices: [CaptureDevice] = []
        var subscribers: [Int: AsyncStream<DeviceEvent>.Continuation] = [:]
        var nextSubscriber = 0
        var problems: [String] = []
    }

    private let state = NIOLockedValueBox(State())

    /// Creates a discovery over `providers` and scans once.
    public init(providers: [any DeviceProvider]) {
        self.providers = providers
        _ = rescan()
    }

    /// The connected devices, in the order their providers list them.
    public var devices: [CaptureDevice] { state.withLockedValue { $0.devices } }

    /// Devices that failed to open on the last scan, explained.
    public var problems: [String] { state.withLockedValue { $0.problems } }

    /// Devices of any of `types` (all types when empty) at `position` (any when `.unspecified`) whose label
    /// starts with `labelPrefix`, ordered by the order of `types`, then by discovery order.
    public func devices(types: [DeviceType], position: DevicePosition = .unspecified, labelPrefix: String = "") -> [CaptureDevice] {
        let matching = devices.filter { device in
            (position == .unspecified || device.identity.position == position)
                && (labelPrefix.isEmpty || device.identity.label.hasPrefix(labelPrefix))
        }
        guard !types.isEmpty else { return matching }
        return types.flatMap { type in matching.filter { $0.identity.deviceType == type } }
    }

    /// The first device of `type` at `position` (`default(_:for:position:)`).
    public func defaultDevice(_ type: DeviceType, position: DevicePosition = .unspecified) -> CaptureDevice? {
        devices(types: [type], position: position).first
    }

    /// The device with this unique id.
    public func device(uniqueID: String) -> CaptureDevice? {
        devices.first { $0.uniqueID == uniqueID }
    }

    /// Connected and disconnected events from now on.
    public func events() -> AsyncStream<DeviceEvent> {
        let (stream, continuation) = AsyncStream.makeStream(of: DeviceEvent.self, bufferingPolicy: .bufferingNewest(256))
        let id = state.withLockedValue { state in
            defer { state.nextSubscriber += 1 }
            state.subscribers[state.nextSubscriber] = continuation
            return state.nextSubscriber
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLockedValue { $0.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    /// Asks every provider what is present, updates the device list and publishes what changed.
    @discardableResult
    public func rescan() -> [DeviceEvent] {
        let present = providers.flatMap { $0.scan() }
        let known = Dictionary(devices.map { ($0.uniqueID, $0) }, uniquingKeysWith: { first, _ in first })
        var next: [CaptureDevice] = []
        var events: [DeviceEvent] = []
        var problems: [String] = []
        var seen = Set<String>()
        for backend in present {
            let id = backend.identity.uniqueID
            guard seen.insert(id).inserted else { continue }
            if let device = known[id], device.backend === backend, device.isConnected {
                next.append(device)
                continue
            }
            do {
                let device = try CaptureDevice(backend: backend)
                next.append(device)
                events.append(.connected(device))
            } catch {
                problems.append("\(error)")
            }
        }
        for (id, device) in known where !next.contains(where: { $0.uniqueID == id }) || next.first(where: { $0.uniqueID == id }) !== device {
            device.markDisconnected()
            if !next.contains(where: { $0.uniqueID == id }) { events.append(.disconnected(device.identity)) }
        }
        let subscribers = state.withLockedValue { state in
            state.devices = next
            state.problems = problems
            return Array(state.subscribers.values)
        }
        for event in events {
            for subscriber in subscribers { subscriber.yield(event) }
        }
        return events
    }

    /// Rescans every `interval` until the task is cancelled.
    public func monitor(every interval: Duration = .seconds(1)) async {
        while !Task.isCancelled {
            try? await Task.sleep(for: interval)
            rescan()
        }
    }
}

/// Synthetic cameras, which tests and demos can plug and unplug.
public final class SyntheticDeviceProvider: DeviceProvider {
    private let cameras: NIOLockedValueBox<[SyntheticCamera]>

    public init(_ configurations: [SyntheticCameraConfiguration]) {
        cameras = NIOLockedValueBox(configurations.map(SyntheticCamera.init))
    }

    /// `count` cameras with serials SYN0001…, seeded from `seed`, on a host with `clock`.
    public convenience init(count: Int, seed: UInt64 = 1, clock: HostClock = .system, highSpeed: Bool = false) {
        self.init(
            (0..<count).map { index in
                SyntheticCameraConfiguration(
                    serial: Self.serial(index + 1),
                    label: "cam\(index)",
                    position: index % 2 == 0 ? .front : .back,
                    seed: seed &+ UInt64(index),
                    clock: clock,
                    highSpeed: highSpeed
                )
            }
        )
    }

    public func scan() -> [any CameraBackend] {
        cameras.withLockedValue { $0 }
    }

    /// "SYN0001"-style serial numbers.
    public static func serial(_ number: Int) -> String {
        let digits = String(number)
        return "SYN" + String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }

    /// The camera with this serial, if plugged in.
    public func camera(serial: String) -> SyntheticCamera? {
        cameras.withLockedValue { $0.first { $0.configuration.serial == serial } }
    }

    /// Plugs in another camera (seen at the next rescan).
    public func plug(_ configuration: SyntheticCameraConfiguration) {
        cameras.withLockedValue { $0.append(SyntheticCamera(configuration)) }
    }

    /// Unplugs a camera: its stream ends with `.disconnected`, and the next rescan reports it gone.
    public func unplug(serial: String) {
        let camera = cameras.withLockedValue { cameras -> SyntheticCamera? in
            guard let index = cameras.firstIndex(where: { $0.configuration.serial == serial }) else { return nil }
            return cameras.remove(at: index)
        }
        camera?.unplug()
    }
}

