import CamRigCapture
import CamRigLocalRig
import CamRigObjectStore
import Foundation

/// A real S3 API on loopback for a test: OpenStack Swift with its s3api middleware, started by the
/// project's own `scripts/object-store` in a folder of its own, and stopped by `stop()` (or `with`).
public struct ObjectStoreServer: Sendable {
    /// The package's root (where `scripts/` is).
    public static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    public let directory: URL
    /// What `start` printed: `AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, …
    public let environment: [String: String]

    /// Starts a store in a new folder (or the one at `directory`, with its objects).
    public static func start(in directory: URL? = nil) async throws -> ObjectStoreServer {
        let folder = directory ?? FileManager.default.temporaryDirectory.appendingPathComponent("camrig-s3-\(UUID().uuidString.prefix(8))")
        let started = try await ToolRunner.run(root.appendingPathComponent("scripts/object-store").path, ["start", folder.path], timeout: 120)
        guard started.status == 0 else {
            throw ServerFailure(description: "scripts/object-store start \(folder.path) failed (\(started.status)):\n\(started.stderr)\n\(started.stdout)")
        }
        let text = (try? String(contentsOf: folder.appendingPathComponent("env"), encoding: .utf8)) ?? started.stdout
        let environment = ToolRunner.environment(fromLines: text)
        guard environment["AWS_ENDPOINT_URL"] != nil else { throw ServerFailure(description: "scripts/object-store printed no AWS_ENDPOINT_URL:\n\(text)") }
        return ObjectStoreServer(directory: folder, environment: environment)
    }

    /// Stops every process of the store (its objects stay in `directory` for `start(in:)`).
    public func stop() async throws {
        let stopped = try await ToolRunner.run(Self.root.appendingPathComponent("scripts/object-store").path, ["stop", directory.path], timeout: 60)
        guard stopped.status == 0 else { throw ServerFailure(description: "scripts/object-store stop failed:\n\(stopped.stderr)") }
    }

    /// `stop` for a synchronous callback that must not return before the store is gone: it blocks its thread.
    @available(*, noasync, message: "blocks a thread of the cooperative pool: use `try await stop()`")
    public func stopBlocking() throws {
        let stopped = try ToolRunner.run(Self.root.appendingPathComponent("scripts/object-store").path, ["stop", directory.path], timeout: 60)
        guard stopped.status == 0 else { throw ServerFailure(description: "scripts/object-store stop failed:\n\(stopped.stderr)") }
    }

    /// Stops the store and removes its folder.
    public func remove() async throws {
        try await stop()
        try? FileManager.default.removeItem(at: directory)
    }

    /// Runs `body` with a new store, removed afterwards whatever happens.
    public static func with<T>(_ body: (ObjectStoreServer) async throws -> T) async throws -> T {
        let server = try await start()
        do {
            let result = try await body(server)
            try await server.remove()
            return result
        } catch {
            try? await server.remove()
            throw error
        }
    }

    /// `s3://BUCKET/PREFIX` on this store with its credentials (or others').
    public func location(bucket: String, prefix: String = "", secret: String? = nil) throws -> ObjectStoreLocation {
        var environment = environment
        if let secret { environment["AWS_SECRET_ACCESS_KEY"] = secret }
        return try ObjectStoreLocation.parse(prefix.isEmpty ? "s3://\(bucket)" : "s3://\(bucket)/\(prefix)", environment: environment)
    }

    public struct ServerFailure: Error, CustomStringConvertible {
        public var description: String
    }
}
