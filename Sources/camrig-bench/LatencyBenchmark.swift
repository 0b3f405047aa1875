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

        options.say("\(count) pings over TLS")
        for _ in 0..<200 { _ = try await client.ping() }
        var pings: [Double] = []
        for _ in 0..<count {
            let start = ContinuousClock.now
            _ = try await client.ping()
            pings.append((ContinuousClock.now - start).microseconds)
        }

        options.say("\(count) device descriptions over TLS")
        var describe = WireDescribeDevice()
        describe.deviceID = "synthetic:SYN0001"
        var describes: [Double] = []
        for index in 0..<(count + 200) {
            let start = ContinuousClock.now
            _ = try await client.request(.describeDevice(describe))
            if index >= 200 { describes.append((ContinuousClock.now - start).microseconds) }
        }
        await client.close()

        options.say("\(count) round trips through a TCP echo")
        _ = try Baselines.tcpEcho(count: 200)
        let echo = Distribution(try Baselines.tcpEcho(count: count))
        let rows = [
            Row(operation: "CamRig ping (TLS)", microseconds: Distribution(pings), p99RatioToEcho: 0),
            Row(operation: "CamRig describe device (TLS)", microseconds: Distribution(describes), p99RatioToEcho: 0),
            Row(operation: "TCP echo, 64 B (baseline)", microseconds: echo, p99RatioToEcho: 1),
        ].map { row in
            var row = row
            row.p99RatioToEcho = ratio(row.microseconds.p99, echo.p99)
            return row
        }
        return Result(machine: .current, rows: rows)
    }
}
