import CamRigText
import CamRigViews
import CamRigClock
import ArgumentParser
import CamRigCLI
import CamRigCoordinator
import CamRigLocalRig
import CamRigWire
import Foundation
import Logging

/// `camrig-bench latency`: control round trips over TLS on loopback (ping, and a device description),
/// against a minimal TCP echo measured in the same run.
struct LatencyBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "latency",
        abstract: "Control round trips over TLS (ping, device describe) against a TCP echo."
    )

    @Option(name: .long, help: "Round trips of each kind.")
    var count = 5000

    @OptionGroup var options: BenchOptions

    struct Row: Encodable {
        var operation: String
        var microseconds: Distribution
        var p99RatioToEcho: Double
    }

    struct Result: BenchResult {
        var scenario = "latency"
        var machine: MachineDescription
        var rows: [Row]

        var text: String {
            let header = "latency: control round trips on loopback, \(rows.first?.microseconds.count ?? 0) each; \(machine.text)"
            return header + "\n" + table(
                ["OPERATION", "P50 µs", "P99 µs", "P99.9 µs", "MAX µs", "P99 / ECHO P99"],
                rows.map { [
                    $0.operation, String(format: "%.1f", $0.microseconds.p50), String(format: "%.1f", $0.microseconds.p99),
                    String(format: "%.1f", $0.microseconds.p999), String(format: "%.1f", $0.microseconds.max), times($0.p99RatioToEcho),
                ] }
            )
        }
    }

    func run() async throws {
        try await options.runOnLoopbackRig(agents: [LocalAgentSpec(cameras: 1)], measure)
    }

    func measure(_ rig: LoopbackRig, logger: Logger) async throws -> Result {
        let client = try await AgentClient.connect(to: rig.endpoints[0], security: try rig.clientSecurity(), logger: logger)

        // Each request measured twice: from a task on Swift's global executor (two thread switches per
        // round trip on this side), and from a task on the connection's event loop (none).
        options.say("\(count) pings and \(count) device descriptions over TLS, from the global executor")
        let pings = try await Self.roundTrips(count) { _ = try await client.ping() }
        var describe = WireDescribeDevice()
        describe.deviceID = "synthetic:SYN0001"
        let describes = try await Self.roundTrips(count) { _ = try await client.request(.describeDevice(describe)) }
        options.say("\(count) pings and \(count) device descriptions over TLS, on the connection's event loop")
        let (loopPings, loopDescribes) = try await withTaskExecutorPreference(client.executor) {
            (
                try await Self.roundTrips(count) { _ = try await client.ping() },
                try await Self.roundTrips(count) { _ = try await client.request(.describeDevice(describe)) }
            )
        }
        await client.close()

        options.say("\(count) round trips through a TCP echo")
        _ = try Baselines.tcpEcho(count: 200)
        let echo = Distribution(try Baselines.tcpEcho(count: count))
        let rows = [
            Row(operation: "CamRig ping (TLS)", microseconds: Distribution(pings), p99RatioToEcho: 0),
            Row(operation: "CamRig describe device (TLS)", microseconds: Distribution(describes), p99RatioToEcho: 0),
            Row(operation: "CamRig ping (TLS), on the event loop", microseconds: Distribution(loopPings), p99RatioToEcho: 0),
            Row(operation: "CamRig describe (TLS), on the event loop", microseconds: Distribution(loopDescribes), p99RatioToEcho: 0),
            Row(operation: "TCP echo, 64 B (baseline)", microseconds: echo, p99RatioToEcho: 1),
        ].map { row in
            var row = row
            row.p99RatioToEcho = ratio(row.microseconds.p99, echo.p99)
            return row
        }
        return Result(machine: .current, rows: rows)
    }

    /// `count` round trips of `request` after 200 to warm up, in microseconds.
    static func roundTrips(_ count: Int, _ request: () async throws -> Void) async throws -> [Double] {
        for _ in 0..<200 { try await request() }
        var times: [Double] = []
        times.reserveCapacity(count)
        for _ in 0..<count {
            let start = ContinuousClock.now
            try await request()
            times.append((ContinuousClock.now - start).microseconds)
        }
        return times
    }
}
