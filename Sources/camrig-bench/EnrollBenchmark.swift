import ArgumentParser
import CamRigAgent
import CamRigCLI
import CamRigClock
import CamRigFiles
import CamRigLocalRig
import CamRigSecurity
import CamRigServiceClient
import CamRigViews
import Crypto
import Foundation

/// `camrig-bench enroll`: how fast a rig comes together from join tokens, and how many enrolments a second
/// `camrig serve --enroll` takes.
///
/// 1. From nothing to a rig: N `camrig-agent --enroll` processes, each with a synthetic camera, are started
///    at once against a new service; timed until every one is enrolled, connected and clock-settled, and
///    then until a photo of every camera is taken through the service.
/// 2. Enrolments per second the service takes: `--clients` at once over kept-alive HTTPS connections, each
///    a token check, a signature and a durable ledger entry (the hosts' keys and requests are made
///    beforehand: that is the hosts' work). The baseline, measured in the same run against the same
///    service over the same client, is a bare authenticated request (GET /api/v1/whoami): the ratio is
///    what checking, signing and recording an enrolment add.
struct EnrollBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "enroll",
        abstract: "Time from join tokens to a rig of N connected, settled agents with a photo; enrolments per second against a bare HTTPS baseline."
    )

    @Option(name: .long, help: "Agents started at once (each a camrig-agent process with one synthetic camera).")
    var agents = 8

    @Option(name: .long, help: "Enrolments measured for the rate.")
    var enrollments = 300

    @Option(name: .long, help: "Hosts enrolling at once for the rate.")
    var clients = 8

    @OptionGroup var options: BenchOptions

    struct Result: BenchResult {
        var machine: MachineDescription
        var agents: Int
        var secondsToEnrolled: Double
        var secondsToConnectedAndSettled: Double
        var secondsToPhoto: Double
        var enrollments: Int
        var clients: Int
        var enrollmentsPerSecond: Double
        var baselineRequestsPerSecond: Double
        var enrollmentCostVersusBaseline: Double
        /// Durable writes (write, fsync, rename, fsync of the folder) of a ledger-sized file a second, in
        /// the service's folder: an enrolment makes two (the certificate's copy and the ledger).
        var durableWritesPerSecond: Double
        var enrollmentsPerDurableWrite: Double

        var text: String {
            """
            camrig-bench enroll — \(machine.text)
            a rig from join tokens: \(agents) agents started at once
              all enrolled                   \(String(format: "%6.2f s", secondsToEnrolled))
              all connected, clock settled   \(String(format: "%6.2f s", secondsToConnectedAndSettled))
              a photo of every camera taken  \(String(format: "%6.2f s", secondsToPhoto))
            enrolments against camrig serve --enroll (\(clients) hosts at once, \(enrollments) enrolments)
              enrolments                     \(String(format: "%8.1f /s", enrollmentsPerSecond))
              baseline: bare HTTPS requests  \(String(format: "%8.1f /s", baselineRequestsPerSecond))  (GET /api/v1/whoami, same client and concurrency)
              an enrolment costs             \(times(enrollmentCostVersusBaseline)) a bare request
              baseline: durable file writes  \(String(format: "%8.1f /s", durableWritesPerSecond))  (the ledger's size, fsync'd, in the service's folder)
              enrolments per durable write   \(String(format: "%8.2f", enrollmentsPerDurableWrite))  (each writes two files durably and re-encodes the whole ledger)
            """
        }
    }

    func validate() throws {
        guard (1...64).contains(agents), (1...100_000).contains(enrollments), (1...64).contains(clients) else {
            throw ValidationError("--agents within 1…64, --enrollments within 1…100000, --clients within 1…64")
        }
    }

    func run() async throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("camrig-bench-enroll-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }

        options.say("a rig of \(agents) agents from a join token…")
        let rig = try await Self.fromTokens(agents: agents, scratch: scratch.appendingPathComponent("rig"), options: options)
        options.say("enrolments per second, \(clients) at once…")
        let (rate, baseline, durable) = try await Self.rate(enrollments: enrollments, clients: clients, scratch: scratch.appendingPathComponent("rate"))
        try options.emit(
            Result(
                machine: .current, agents: agents, secondsToEnrolled: rig.enrolled, secondsToConnectedAndSettled: rig.settled, secondsToPhoto: rig.photo,
                enrollments: enrollments, clients: clients, enrollmentsPerSecond: rate, baselineRequestsPerSecond: baseline,
                enrollmentCostVersusBaseline: rate > 0 ? baseline / rate : .nan, durableWritesPerSecond: durable,
                enrollmentsPerDurableWrite: durable > 0 ? rate / durable : .nan))
    }

    /// A `camrig serve --enroll` over a new CA in `folder`; stopped by the caller.
    struct Service {
        let process: ChildProcess
        let url: String
        let directory: TLSDirectory

        /// Starts the service and waits for the first line it prints (its address), read on a thread of its
        /// own (the read blocks), for a minute at most: a service that says nothing by then is killed.
        static func start(folder: URL, extra: [String] = []) async throws -> Service {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            let directory = TLSDirectory(path: folder.appendingPathComponent("ca").path)
            try directory.initialize()
            let rigFile = folder.appendingPathComponent("rig.yaml")
            try "tls_dir: \(directory.path)\nagents: []\n".write(to: rigFile, atomically: true, encoding: .utf8)
            guard let camrig = Programs.find("camrig", override: "CAMRIG") else { throw CommandFailure("cannot find camrig next to camrig-bench") }
            let output = Pipe()
            let process = try ChildProcess.spawn(
                camrig.path,
                [
                    "serve", "--rig", rigFile.path, "--enroll", "--listen", "127.0.0.1:0", "--json", "--out",
                    folder.appendingPathComponent("captures").path,
                ] + extra, stdout: .descriptor(output.fileHandleForWriting.fileDescriptor), stderr: .null)
            try? output.fileHandleForWriting.close()
            let reader = output.fileHandleForReading
            let line: Data
            do {
                // Killing the service closes the pipe, which ends the read.
                line = try await withDeadline(.seconds(60), "camrig serve --enroll (pid \(process.processIdentifier)) to print its address") {
                    try await onDedicatedThread("enroll-service-address") {
                        var line = Data()
                        while let byte = try reader.read(upToCount: 1), !byte.isEmpty, byte != Data("\n".utf8) { line.append(byte) }
                        return line
                    }
                }
            } catch {
                await process.reap(grace: .zero)
                throw error
            }
            guard let fields = try? JSONSerialization.jsonObject(with: line) as? [String: String], let url = fields["url"] else {
                await process.reap(grace: .seconds(5))
                throw CommandFailure("camrig serve --enroll did not start")
            }
            return Service(process: process, url: url.hasSuffix("/") ? String(url.dropLast()) : url, directory: directory)
        }

        func token(uses: Int) throws -> String {
            let (token, _) = try JoinTokenList(directory: directory).make(role: .agent, name: nil, prefix: nil, expires: Date() + 3600, uses: uses)
            return token.text
        }

        func stop() {
            process.terminate()
            process.reapBlocking(grace: .seconds(20))
        }
    }

    static func fromTokens(agents count: Int, scratch: URL, options: BenchOptions) async throws -> (enrolled: Double, settled: Double, photo: Double) {
        let service = try await Service.start(folder: scratch)
        defer { service.stop() }
        let token = try service.token(uses: count)
        let client = try ServiceClient(url: service.url, directory: service.directory, identityName: "coordinator")
        do {
            let timings = try await fromTokens(agents: count, token: token, service: service, client: client, scratch: scratch)
            await client.shutdown()
            return timings
        } catch {
            await client.shutdown()
            throw error
        }
    }

    private static func fromTokens(
        agents count: Int, token: String, service: Service, client: ServiceClient, scratch: URL
    ) async throws -> (enrolled: Double, settled: Double, photo: Double) {
        let started = ContinuousClock.now
        let processes = try await withThrowingTaskGroup(of: LocalAgentProcess.self) { group in
            for index in 1...count {
                let folder = scratch.appendingPathComponent("host-\(index)")
                group.addTask {
                    try await LocalAgentProcess.start(
                        arguments: [
                            "--enroll", service.url, "--token", token, "--tls-dir", folder.appendingPathComponent("tls").path, "--identity", "host-\(index)",
                            "--synthetic", "1", "--no-realtime", "--listen", "127.0.0.1:0", "--spool-dir", folder.appendingPathComponent("spool").path,
                        ], logFile: folder.appendingPathExtension("log"), timeout: .seconds(60))
                }
            }
            var started: [LocalAgentProcess] = []
            for try await process in group { started.append(process) }
            return started
        }
        let enrolled = (ContinuousClock.now - started).seconds
        defer { for process in processes { _ = process.stopBlocking() } }
        while true {
            let listed: [AgentStatusOutput] = (try? await client.get("/api/v1/agents")) ?? []
            if listed.count == count && listed.allSatisfy({ $0.status == "connected" && $0.clockSettled == true }) { break }
            guard ContinuousClock.now - started < .seconds(180) else { throw CommandFailure("the agents did not all connect and settle within 180 s") }
            try await Task.sleep(for: .milliseconds(50))
        }
        let settled = (ContinuousClock.now - started).seconds
        while true {
            let session: SessionCameras? = try? await client.get("/api/v1/session")
            if session?.cameras == count { break }
            guard ContinuousClock.now - started < .seconds(180) else { throw CommandFailure("no session over every camera within 180 s") }
            try await Task.sleep(for: .milliseconds(50))
        }
        let job: CaptureJob = try await client.post("/api/v1/captures/photo", PhotoRequest(quality: "speed"))
        let requested = ContinuousClock.now
        while true {
            let current: CaptureJob = try await client.get("/api/v1/jobs/\(job.id)")
            if current.captureId != nil { break }
            if current.state == .failed { throw CommandFailure("the photo failed: \(current.error ?? "")") }
            guard ContinuousClock.now - requested < .seconds(180) else {
                throw CommandFailure("photo job \(job.id) of \(count) cameras: no capture within 180 s (state \(current.state))")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        return (enrolled, settled, (ContinuousClock.now - started).seconds)
    }

    /// Enrolments a second the service takes, the requests made beforehand (keys and certificate requests
    /// are the hosts' work), sent over kept-alive HTTPS connections; and the baseline, a bare authenticated
    /// request (GET /api/v1/whoami) over the same client.
    static func rate(enrollments: Int, clients: Int, scratch: URL) async throws -> (enrolments: Double, baseline: Double, durableWrites: Double) {
        // Members nobody listens for (port 9): the service's attempts to reach them are refused at once.
        let service = try await Service.start(folder: scratch)
        defer { service.stop() }
        let token = try service.token(uses: enrollments)
        let requests = try (0..<enrollments).map { index in
            let csr = try AgentEnrollment.request(name: "bench-\(index)", key: P256.Signing.PrivateKey())
            return Enrollment.JoinRequest(token: token, name: "bench-\(index)", csr: try csr.serializeAsPEM().pemString, port: 9)
        }
        let client = try ServiceClient(url: service.url, directory: service.directory, identityName: "coordinator")
        func measure(_ work: @escaping @Sendable (Int) async throws -> Void) async throws -> Double {
            let started = ContinuousClock.now
            try await withThrowingTaskGroup(of: Void.self) { group in
                for first in 0..<clients {
                    group.addTask {
                        for index in stride(from: first, to: enrollments, by: clients) { try await work(index) }
                    }
                }
                try await group.waitForAll()
            }
            return Double(enrollments) / (ContinuousClock.now - started).seconds
        }
        do {
            let enrolments = try await measure { index in
                let issued: Named = try await client.post("/enroll/v1/join", requests[index])
                guard issued.name == requests[index].name else { throw CommandFailure("enrolled as \(issued.name), not \(requests[index].name)") }
            }
            let baseline = try await measure { _ in
                let _: Named = try await client.get("/api/v1/whoami")
            }
            await client.shutdown()
            // The disk's part: the ledger as it now is, written durably again and again beside it.
            let ledger = try Data(contentsOf: URL(fileURLWithPath: service.directory.path).appendingPathComponent("enrollment/ledger.json"))
            let probe = URL(fileURLWithPath: service.directory.path).appendingPathComponent("enrollment/durable-probe.json")
            let count = 100
            let started = ContinuousClock.now
            for _ in 0..<count { try DurableFile.write(Array(ledger), to: probe) }
            let durable = Double(count) / (ContinuousClock.now - started).seconds
            return (enrolments, baseline, durable)
        } catch {
            await client.shutdown()
            throw error
        }
    }
}

/// The name in an answer (an enrolment's certificate, whoami's caller).
private struct Named: Decodable {
    var name: String
}

/// What the rate of the session's cameras needs of GET /api/v1/session.
private struct SessionCameras: Decodable {
    var cameras: Int
}
