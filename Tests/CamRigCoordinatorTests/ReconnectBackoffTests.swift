import CamRigCoordinator
import Testing

@Suite("Reconnect backoff", .timeLimit(.minutes(1)))
struct ReconnectBackoffTests {
    @Test("waits double from the initial wait up to the maximum, within ±20% jitter, and start over after a success")
    func doublesUpToMaximum() {
        var backoff = ReconnectBackoff(initial: .milliseconds(250), maximum: .seconds(2))
        let waits = (0..<6).map { _ in backoff.next(jitter: 1) }
        #expect(waits == [.milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2), .seconds(2), .seconds(2)])
        #expect(backoff.next(jitter: 0.8) == .milliseconds(1600))
        #expect(backoff.next(jitter: 5) == .milliseconds(2400), "jitter is held to ±20%")
        backoff.reset()
        #expect(backoff.current == .milliseconds(250))
        for _ in 0..<100 {
            var fresh = ReconnectBackoff(initial: .milliseconds(250), maximum: .seconds(2))
            let wait = fresh.next()
            #expect(wait >= .milliseconds(200) && wait <= .milliseconds(300))
        }
    }
}
