import CLibcamera
import CamRigDeviceModel
import Foundation
import Logging
import NIOConcurrencyHelpers

/// libcamera's camera manager: one per process, started on first use and kept for the process's life
/// (libcamera allows one at a time, and starting it enumerates every pipeline).
public final class LibcameraManager: @unchecked Sendable {
    /// The process's manager, or why there is none (built without libcamera, or it failed to start).
    public static let shared: Result<LibcameraManager, DeviceError> = {
        guard camrig_lc_available() != 0 else {
            return .failure(DeviceError(.unsupported, device: "libcamera", String(cString: camrig_lc_version())))
        }
        // libcamera logs every pipeline it matches at INFO; warnings and errors are what an operator needs,
        // and they go to the agent's log.
        setenv("LIBCAMERA_LOG_LEVELS", "*:WARN", 0)
        camrig_lc_set_log_callback { line in
            guard let line else { return }
            LibcameraManager.log(String(cString: line))
        }
        var error = [CChar](repeating: 0, count: 512)
        guard let handle = camrig_lc_manager_start(&error, error.count) else {
            return .failure(DeviceError(.system, device: "libcamera", libcameraMessage(error)))
        }
        return .success(LibcameraManager(handle: handle))
    }()

    /// Whether this build can drive libcamera at all.
    public static var isAvailable: Bool { camrig_lc_available() != 0 }

    /// libcamera's version ("v0.4.0"), or why this build has none.
    public static var version: String { String(cString: camrig_lc_version()) }

    private static let logger = Logger(label: "camrig.libcamera")

    /// One line of libcamera's log ("[time] [thread] LEVEL Category file:line message"), at its level.
    static func log(_ line: String) {
        let fields = line.split(separator: " ", maxSplits: 3, omittingEmptySubsequences: true)
        let level = fields.count > 2 ? String(fields[2]) : ""
        let message = fields.count > 3 ? String(fields[3]) : line
        switch level {
        case "FATAL": logger.critical("\(message)")
        case "ERROR": logger.error("\(message)")
        case "WARN": logger.warning("\(message)")
        case "INFO": logger.info("\(message)")
        default: logger.debug("\(message)")
        }
    }

    let handle: OpaquePointer
    /// Serializes calls into the manager (its camera list changes on libcamera's own thread).
    let lock = NIOLock()

    private init(handle: OpaquePointer) {
        self.handle = handle
    }

    /// The ids of the cameras present now.
    public func cameraIDs() -> [String] {
        lock.withLock {
            var size = 4096
            while true {
                var buffer = [CChar](repeating: 0, count: size)
                let count = camrig_lc_manager_cameras(handle, &buffer, size)
                if count < 0 {
                    size *= 4
                    continue
                }
                var ids: [String] = []
                var start = 0
                for _ in 0..<Int(count) {
                    let id = buffer[start...].withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
                    ids.append(id)
                    start += id.utf8.count + 1
                }
                return ids
            }
        }
    }
}

/// Calls a CLibcamera function that reports failure as a negative result with a message, throwing the
/// message as a `DeviceError` of `code` about `device`.
@discardableResult
func libcameraCall(
    _ code: DeviceError.Code = .system, device: String, _ body: (UnsafeMutablePointer<CChar>, Int) -> Int32
) throws(DeviceError) -> Int32 {
    var error = [CChar](repeating: 0, count: 512)
    let result = error.withUnsafeMutableBufferPointer { body($0.baseAddress!, $0.count) }
    guard result >= 0 else {
        throw DeviceError(code, device: device, libcameraMessage(error))
    }
    return result
}

/// The NUL-terminated message in `buffer`.
func libcameraMessage(_ buffer: [CChar]) -> String {
    String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
