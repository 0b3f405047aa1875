import ArgumentParser
import CamRigCLI
import CamRigCapture
import CamRigCoordinator
import CamRigLocalRig
import CamRigObjectStore
import CamRigSecurity
import Foundation
import Logging

/// `camrig serve`: the coordinator as a long-running service with an HTTP API and a web console.
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the coordinator as a service: the rig kept connected, measured and locked; an HTTPS API, events and a web console.",
        discussion: """
            Every agent of the rig stays connected and its clock measured; every camera stays in one \
            committed, phase-locked session, rebuilt on its own when an agent restarts or a camera comes or \
            goes. The console and API are served over TLS with the coordinator's certificate: operators \
            present a coordinator certificate or an operator token, viewers a viewer certificate or token \
            (`camrig certs token`). With --loopback N, a rig of N synthetic agents is started on this machine \
            and a sign-in link is printed. The server itself is the camrig-service program installed beside \
            camrig, which this command runs with the rig resolved.
            """
    )

    @OptionGroup var serve: ServeOptions
    @OptionGroup var captures: CaptureOptions
    @OptionGroup var rig: RigOptions
    @OptionGroup var output: OutputOptions

    func run() async throws {
        let logger = output.makeLogger(label: "camrig.serve")
        var arguments = serve.arguments + ["--log-level", output.logLevel.rawValue]
        if output.json { arguments.append("--json") }
        do {
            // Where captures go as camrig resolves it (--out, $CAMRIG_CAPTURES, the rig file's store: url),
            // and this machine's folder for an object store's catalog and work.
            let settings = rig.storeSettings()
            arguments += ["--out", captures.address(settings), "--state", captures.stateDirectory.path]
            arguments += ["--rig-name", try rig.resolvedRigName()]
            // Through the environment, not the arguments: a password in the URL, or the store's secret key,
            // stays out of ps.
            if let catalog = captures.catalog { setenv("CAMRIG_CATALOG", catalog, 1) }
            if let json = Self.json(settings) { setenv("CAMRIG_STORE_SETTINGS", json, 1) } else { unsetenv("CAMRIG_STORE_SETTINGS") }
            if serve.loopback == nil {
                let (endpoints, security) = try rig.resolve(logger: logger, allowingNoAgents: serve.enroll)
                guard case .tls(let mutual) = security, let directory = try rig.tlsDirectoryPath() else {
                    throw CommandFailure("camrig serve needs TLS: give --tls-dir DIR (or tls_dir in the rig file) holding ca.pem and a coordinator certificate")
                }
                arguments += ["--tls-dir", directory, "--identity", mutual.identity.name]
                for endpoint in endpoints { arguments += ["--agent", endpoint.description] }
            }
            try Self.exec(try Self.serviceProgram(), arguments)
        } catch {
            throw userFacing(error)
        }
    }

    /// The rig file's `store:` settings as JSON with the rig file's keys, as the service reads them from
    /// CAMRIG_STORE_SETTINGS; nil when it says nothing of a store.
    static func json(_ settings: ObjectStoreLocation.Settings) -> String? {
        var fields: [String: Any] = [:]
        let strings: [(String, String?)] = [
            ("url", settings.url), ("endpoint", settings.endpoint), ("region", settings.region), ("access_key_id", settings.accessKeyID),
            ("secret_access_key", settings.secretAccessKey), ("session_token", settings.sessionToken), ("ca_bundle", settings.caBundle),
            ("agent_access_key_id", settings.agentAccessKeyID), ("agent_secret_access_key", settings.agentSecretAccessKey),
        ]
        for (key, value) in strings { if let value { fields[key] = value } }
        if let pathStyle = settings.pathStyle { fields["path_style"] = pathStyle }
        if let partSize = settings.partSizeMiB { fields["part_size_mib"] = partSize }
        guard !fields.isEmpty, let data = try? JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys]) else { return nil }
        return String(decoding: data, as: UTF8.self)
    }

    /// The `camrig-service` program: `$CAMRIG_SERVICE_PROGRAM`, else next to this executable, else on `PATH`.
    static func serviceProgram() throws -> String {
        if let found = Programs.find("camrig-service", override: "CAMRIG_SERVICE_PROGRAM") { return found.path }
        throw CommandFailure(
            "cannot find camrig-service (the service's HTTP server) next to camrig or on PATH: install it beside camrig, build it (`swift build`), or set CAMRIG_SERVICE_PROGRAM")
    }

    /// Replaces this process with `program`: the service keeps this process's id, standard streams and
    /// signals (systemd's SIGTERM reaches the service itself).
    static func exec(_ program: String, _ arguments: [String]) throws -> Never {
        let argv = ([program] + arguments).map { strdup($0) } + [nil]
        execv(program, argv)
        let reason = String(cString: strerror(errno))
        throw CommandFailure("cannot run \(program): \(reason)")
    }
}
