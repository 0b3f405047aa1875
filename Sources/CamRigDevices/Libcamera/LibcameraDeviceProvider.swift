import CamRigClock
import CamRigDeviceModel
import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#endif

/// The cameras libcamera's camera manager lists, hot-plug included (libcamera adds and removes cameras as
/// their devices come and go; every scan asks it again).
///
/// A camera both libcamera and V4L2 can drive appears once:
/// - a UVC webcam (libcamera's uvcvideo pipeline) stays with the V4L2 backend, which serves every format
///   and control the driver has (MJPEG included) with the driver's own stamps; libcamera adds no ISP
///   there. Its libcamera camera is skipped.
/// - anything else (a CSI sensor behind Unicam/CFE and Raspberry Pi's ISP, a simple-pipeline sensor)
///   belongs to libcamera: V4L2 alone gives raw Bayer without exposure or white balance control, and
///   the same nodes must not be opened twice. `V4L2DeviceProvider` skips its nodes (`claimedDevices`).
public final class LibcameraDeviceProvider: DeviceProvider {
    public let clock: HostClock
    public let lendFrames: Bool
    private let cache = NIOLockedValueBox<[String: LibcameraCamera]>([:])
    private let failures = NIOLockedValueBox<[String: String]>([:])
    private let claimed = NIOLockedValueBox<Set<UInt64>>([])
    private let scanning = NIOLock()
    /// UVC cameras left to V4L2, by id: not opened again on every scan.
    private let leftToV4L2 = NIOLockedValueBox<[String: String]>([:])

    /// - Parameters:
    ///   - clock: the agent's host clock (a simulated host's shifts the stamps as everything else).
    ///   - lendFrames: hand frames on in libcamera's buffers; false copies each frame out.
    public init(clock: HostClock = .system, lendFrames: Bool = true) {
        self.clock = clock
        self.lendFrames = lendFrames
    }

    /// Why cameras could not be used, by libcamera id ("libcamera" itself when it is unavailable).
    public var skipped: [String: String] { failures.withLockedValue { $0 } }

    /// The kernel devices (dev_t) behind the cameras served, which V4L2 must leave alone.
    public var claimedDevices: Set<UInt64> { claimed.withLockedValue { $0 } }

    public func scan() -> [any CameraBackend] {
        // One scan at a time: two at once would open a camera twice.
        scanning.withLock { scanLocked() }
    }

    private func scanLocked() -> [any CameraBackend] {
        let manager: LibcameraManager
        switch LibcameraManager.shared {
        case .success(let started): manager = started
        case .failure(let error):
            failures.withLockedValue { $0 = ["libcamera": error.message] }
            return []
        }
        let ids = manager.cameraIDs()
        let known = cache.withLockedValue { $0 }
        var found: [LibcameraCamera] = []
        var skipped: [String: String] = [:]
        let uvc = leftToV4L2.withLockedValue { $0 }
        for id in ids {
            if let camera = known[id] {
                found.append(camera)
                continue
            }
            if let reason = uvc[id] {
                skipped[id] = reason
                continue
            }
            do throws(DeviceError) {
                let camera = try LibcameraCamera.open(manager: manager, id: id, clock: clock, lendFrames: lendFrames)
                if let node = Self.uvcNode(camera.systemDevices) {
                    let reason = "a UVC camera (\(node)): served through V4L2, which has every format and control of its driver"
                    skipped[id] = reason
                    leftToV4L2.withLockedValue { $0[id] = reason }
                    continue
                }
                found.append(camera)
            } catch {
                skipped[id] = error.message
            }
        }
        leftToV4L2.withLockedValue { $0 = $0.filter { ids.contains($0.key) } }
        cache.withLockedValue { $0 = Dictionary(found.map { ($0.cameraID, $0) }, uniquingKeysWith: { first, _ in first }) }
        failures.withLockedValue { $0 = skipped }
        claimed.withLockedValue { $0 = Set(found.flatMap(\.systemDevices)) }
        return found
    }

    /// The `/dev/videoN` among `devices` whose driver is uvcvideo, if any.
    static func uvcNode(_ devices: [UInt64]) -> String? {
        for device in devices {
            if let driver = driverName(device: device), driver == "uvcvideo" { return node(device: device) ?? "uvcvideo" }
        }
        return nil
    }

    /// The kernel driver of character device `device` (dev_t), from sysfs.
    static func driverName(device: UInt64) -> String? {
        let (major, minor) = split(device)
        let link = "/sys/dev/char/\(major):\(minor)/device/driver"
        guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: link) else { return nil }
        return (target as NSString).lastPathComponent
    }

    /// `/dev/NAME` of character device `device`, from sysfs.
    static func node(device: UInt64) -> String? {
        let (major, minor) = split(device)
        guard let uevent = try? String(contentsOfFile: "/sys/dev/char/\(major):\(minor)/uevent", encoding: .utf8) else { return nil }
        for line in uevent.split(separator: "\n") where line.hasPrefix("DEVNAME=") {
            return "/dev/" + line.dropFirst("DEVNAME=".count)
        }
        return nil
    }

    /// glibc's major() and minor() of a dev_t.
    static func split(_ device: UInt64) -> (UInt64, UInt64) {
        let major = ((device >> 8) & 0xfff) | ((device >> 32) & ~UInt64(0xfff))
        let minor = (device & 0xff) | ((device >> 12) & ~UInt64(0xff))
        return (major, minor)
    }
}
