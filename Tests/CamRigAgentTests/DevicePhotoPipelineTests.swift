import CamRigDevices
import Foundation
import NIOConcurrencyHelpers
import Testing

@testable import CamRigAgent

@Suite("A device's photo pipeline", .timeLimit(.minutes(1)))
struct DevicePhotoPipelineTests {
    /// Starts a capture that records when it was let in, in order.
    func begin(_ pipeline: DevicePhotoPipeline, responsive: Bool, name: String, into log: NIOLockedValueBox<[String]>) -> Task<Void, Never> {
        Task {
            await pipeline.beginCapture(responsive: responsive)
            log.withLockedValue { $0.append(name) }
        }
    }

    /// Returns once `count` captures wait for their turn (within five seconds).
    func waiting(_ pipeline: DevicePhotoPipeline, _ count: Int) async throws {
        let deadline = ContinuousClock.now + .seconds(5)
        while pipeline.waitingCount != count {
            guard ContinuousClock.now < deadline else {
                Issue.record("\(pipeline.waitingCount) captures wait, not \(count)")
                throw CancellationError()
            }
            try await Task.sleep(for: .milliseconds(1))
        }
    }

    @Test("without responsive capture the next capture begins only once the previous photo is processed")
    func serial() async throws {
        let pipeline = DevicePhotoPipeline()
        let log = NIOLockedValueBox<[String]>([])
        await pipeline.beginCapture(responsive: false)
        #expect(!pipeline.isReady(responsive: false))
        let second = begin(pipeline, responsive: false, name: "second", into: log)
        try await waiting(pipeline, 1)
        pipeline.endCapture(processing: true)
        #expect(pipeline.waitingCount == 1, "the first photo is still processed")
        #expect(log.withLockedValue { $0 }.isEmpty)
        #expect(!pipeline.isReady(responsive: false) && !pipeline.isIdle)
        pipeline.endProcessing(level: .quality, duration: 5_000_000)
        await second.value
        #expect(log.withLockedValue { $0 } == ["second"])
    }

    @Test("with responsive capture the next capture begins once the previous capture stage ends, and captures begin in the order they asked")
    func responsive() async throws {
        let pipeline = DevicePhotoPipeline()
        let log = NIOLockedValueBox<[String]>([])
        await pipeline.beginCapture(responsive: true)
        let second = begin(pipeline, responsive: true, name: "second", into: log)
        try await waiting(pipeline, 1)
        let third = begin(pipeline, responsive: true, name: "third", into: log)
        try await waiting(pipeline, 2)
        #expect(log.withLockedValue { $0 }.isEmpty, "one capture stage at a time")
        pipeline.endCapture(processing: true)
        await second.value
        #expect(pipeline.waitingCount == 1, "the third waits for the second's capture stage")
        #expect(log.withLockedValue { $0 } == ["second"], "the second began while the first is processed; the third waits for the second's capture stage")
        pipeline.endCapture(processing: true)
        await third.value
        #expect(log.withLockedValue { $0 } == ["second", "third"])
        pipeline.endCapture(processing: false)
        #expect(pipeline.isReady(responsive: true) && !pipeline.isReady(responsive: false), "ready for responsive captures while two photos are processed")
        pipeline.endProcessing(level: .quality, duration: 10_000_000)
        pipeline.endProcessing(level: .quality, duration: 30_000_000)
        #expect(pipeline.isIdle)
    }

    @Test("the processing estimate is the range of this device's recent photos at the level, none before the first")
    func estimate() {
        let pipeline = DevicePhotoPipeline()
        #expect(pipeline.estimate(level: .quality) == (0, 0))
        for duration in [40, 10, 25] as [Int64] {
            pipeline.endProcessing(level: .quality, duration: duration)
        }
        pipeline.record(level: .balanced, duration: 1)
        #expect(pipeline.estimate(level: .quality) == (10, 40))
        for _ in 0..<DevicePhotoPipeline.historyLength { pipeline.endProcessing(level: .quality, duration: 20) }
        #expect(pipeline.estimate(level: .quality) == (20, 20), "only the latest \(DevicePhotoPipeline.historyLength) count")
    }
}
