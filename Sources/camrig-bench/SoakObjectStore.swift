import CamRigCLI
import CamRigCapture
import CamRigLocalRig
import CamRigObjectStore
import Foundation
import NIOCore

/// The soak's S3 store: OpenStack Swift's s3api started by `scripts/object-store` in a folder of its own,
/// reached by the hosts in their namespaces through a relay on the bridge's address (the store listens
/// on 127.0.0.1 only). It can be stopped for an outage and started again in the same folder, with its
/// objects and its port.
final class SoakObjectStore: Sendable {
    /// The bucket the soak's recordings go to.
    static let bucket = "soak"
    /// Where under the bucket (`s3://soak/recordings`).
    static let prefix = "recordings"

    let directory: URL
    /// What `scripts/object-store start` wrote: the store as this machine reaches it (127.0.0.1).
    let localEnvironment: [String: String]
    /// The same store on the bridge's address, which the hosts and the coordinator both reach.
    let sharedEndpoint: String
    private let relay: LinkRelay

    private init(directory: URL, localEnvironment: [String: String], sharedEndpoint: String, relay: LinkRelay) {
        self.directory = directory
        self.localEnvironment = localEnvironment
        self.sharedEndpoint = sharedEndpoint
        self.relay = relay
    }

    static var script: String { StoreBenchmark.scripts.appendingPathComponent("object-store").path }

    /// Starts a store in `directory`, its bucket made, and a relay to it on the bridge's address of `rig`.
    static func start(in directory: URL, for rig: NetworkedRig) async throws -> SoakObjectStore {
        let gateway = rig.network.gateway
        let started = try await ToolRunner.run(script, ["start", directory.path], timeout: 120)
        guard started.status == 0 else { throw CommandFailure("scripts/object-store start \(directory.path) failed:\n\(started.stderr)") }
        let environment = ToolRunner.environment(
            fromLines: (try? String(contentsOf: directory.appendingPathComponent("env"), encoding: .utf8)) ?? started.stdout)
        guard let endpoint = environment["AWS_ENDPOINT_URL"], let port = URLComponents(string: endpoint)?.port else {
            throw CommandFailure("scripts/object-store printed no AWS_ENDPOINT_URL with a port:\n\(started.stdout)")
        }
        let relay = try LinkRelay(
            listenHost: gateway, listenPort: port, target: try SocketAddress(ipAddress: "127.0.0.1", port: port), conditions: PathConditions(), seed: 0,
            group: rig.relayGroup)
        let store = SoakObjectStore(directory: directory, localEnvironment: environment, sharedEndpoint: "http://\(gateway):\(port)", relay: relay)
        try await store.withClient { client in try? await client.createBucket() }
        return store
    }

    /// The environment of a `camrig` command writing to the store: its credentials, and the address the
    /// hosts reach it at (the coordinator hands that address to the agents, which upload themselves).
    var commandEnvironment: [String: String] {
        var environment = ProcessInfo.processInfo.environment.merging(localEnvironment) { $1 }
        environment["AWS_ENDPOINT_URL"] = sharedEndpoint
        return environment
    }

    /// `body` given a client of the store on loopback, for the soak's own checks; the client is shut down
    /// before this returns, whether `body` throws or not.
    func withClient<Value>(_ body: (S3Client) async throws -> Value) async throws -> Value {
        try await S3Client.with(try ObjectStoreLocation.parse("s3://\(Self.bucket)/\(Self.prefix)", environment: localEnvironment), body)
    }

    /// An outage: every process of the store stopped (its objects stay).
    func stop() async throws {
        let stopped = try await ToolRunner.run(Self.script, ["stop", directory.path], timeout: 60)
        guard stopped.status == 0 else { throw CommandFailure("scripts/object-store stop failed:\n\(stopped.stderr)") }
    }

    /// The store back after an outage, in the same folder (same port, same objects).
    func resume() async throws {
        let started = try await ToolRunner.run(Self.script, ["start", directory.path], timeout: 120)
        guard started.status == 0 else { throw CommandFailure("scripts/object-store start (after an outage) failed:\n\(started.stderr)") }
    }

    /// Stops the relay and the store (blocking, as `NetworkedRig.shutdown` does: it runs on the way out).
    func shutdown() {
        relay.shutdown()
        _ = try? ToolRunner.run(Self.script, ["stop", directory.path], timeout: 60)
    }
}
