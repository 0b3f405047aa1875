import Testing

@testable import CamRigService

/// `PreviewHub`'s decisions with plain values for watchers, clients and waiters: no agent, no timer.
@Suite("Preview state machine", .timeLimit(.minutes(1)))
struct PreviewStateMachineTests {
    typealias Machine = PreviewStateMachine<String, String, String, Int>
    let start = ContinuousClock.now

    @Test("the first watcher starts the feed, later ones get the newest preview at once, the last one stops the stream")
    func watchers() {
        var machine = Machine()
        let (first, action) = machine.watch("a/cam0", watcher: "w1")
        guard case .startFeed(let generation) = action else {
            Issue.record("the first watcher did not start the feed")
            return
        }
        #expect(machine.openStream("a/cam0", generation: generation) == .open)
        #expect(machine.streamStarted("a/cam0", generation: generation, client: "client", streamID: "s1") == nil)
        #expect(machine.received("a/cam0", generation: generation, 7, at: start).watchers == ["w1"])
        let (second, joined) = machine.watch("a/cam0", watcher: "w2")
        guard case .yield(7) = joined else {
            Issue.record("a later watcher did not get the newest preview")
            return
        }
        #expect(machine.watcherCount("a/cam0") == 2 && machine.receivedCount("a/cam0") == 1)
        let leaving = machine.stopWatching("a/cam0", id: first)
        #expect(leaving.finish == "w1" && leaving.stopStream == nil)
        let last = machine.stopWatching("a/cam0", id: second)
        #expect(last.finish == "w2" && last.stopStream?.streamID == "s1" && last.stopStream?.client == "client")
        #expect(machine.watcherCount("a/cam0") == 0)
        // A late report of the feed that ended changes nothing.
        #expect(machine.received("a/cam0", generation: generation, 8, at: start).watchers.isEmpty)
        #expect(machine.openStream("a/cam0", generation: generation) == .end)
    }

    @Test("a pause stops the open streams, its caller waits until they are closed, and a resume wakes the feeds that wait")
    func pause() {
        var machine = Machine()
        guard case .startFeed(let generation) = machine.watch("a/cam0", watcher: "w").action else {
            Issue.record("the first watcher did not start the camera's feed")
            return
        }
        #expect(machine.openStream("a/cam0", generation: generation) == .open)
        _ = machine.streamStarted("a/cam0", generation: generation, client: "client", streamID: "s1")
        let open = machine.pause()
        #expect(open.map(\.streamID) == ["s1"])
        #expect(machine.waitForQuiet(id: 1, waiter: "pause-1") == true)
        #expect(machine.streamClosed("a/cam0", generation: generation, error: nil) == ["pause-1"], "the pause is resumed when the stream is closed")
        // While paused the feed waits (no timer), and is woken by the resume.
        #expect(machine.openStream("a/cam0", generation: generation) == .wait)
        #expect(machine.park("a/cam0", generation: generation, waiter: "loop") == true)
        #expect(machine.waitForQuiet(id: 2, waiter: "pause-2") == false, "already quiet: no wait")
        #expect(machine.resume() == ["loop"])
        #expect(machine.openStream("a/cam0", generation: generation) == .open)
        // A stream started while a pause began is stopped at once.
        _ = machine.pause()
        #expect(machine.streamStarted("a/cam0", generation: generation, client: "client", streamID: "s2")?.streamID == "s2")
    }

    @Test("nested pauses: previews resume with the last resume")
    func nestedPauses() {
        var machine = Machine()
        guard case .startFeed(let generation) = machine.watch("a/cam0", watcher: "w").action else {
            Issue.record("the first watcher did not start the camera's feed")
            return
        }
        _ = machine.pause()
        _ = machine.pause()
        #expect(machine.park("a/cam0", generation: generation, waiter: "loop") == true)
        #expect(machine.resume() == [])
        #expect(machine.isPaused == true)
        #expect(machine.resume() == ["loop"])
        #expect(!machine.isPaused)
        #expect(machine.park("a/cam0", generation: generation, waiter: "late") == false, "not paused: the loop goes on at once")
    }

    @Test("the keep-alive resends the newest preview of a quiet feed, sleeps until the next is due, and waits when there is none")
    func keepAlive() {
        var machine = Machine()
        #expect(machine.keepAlive(now: start, interval: .seconds(2)).isWait)
        #expect(machine.parkKeepAlive("keep-alive") == true)
        guard case .startFeed(let generation) = machine.watch("a/cam0", watcher: "w").action else {
            Issue.record("the first watcher did not start the camera's feed")
            return
        }
        #expect(machine.received("a/cam0", generation: generation, 1, at: start).keepAlive == "keep-alive", "the first preview wakes the keep-alive")
        guard case .sleep(let until) = machine.keepAlive(now: start + .seconds(1), interval: .seconds(2)) else {
            Issue.record("the keep-alive did not sleep until the feed is due")
            return
        }
        #expect(until == start + .seconds(2))
        guard case .resend(let feeds) = machine.keepAlive(now: start + .seconds(2), interval: .seconds(2)) else {
            Issue.record("a quiet feed was not resent")
            return
        }
        #expect(feeds.map(\.watchers) == [["w"]] && feeds.map(\.preview) == [1])
        guard case .sleep(let next) = machine.keepAlive(now: start + .seconds(2), interval: .seconds(2)) else {
            Issue.record("after the resend the keep-alive did not sleep until the next is due")
            return
        }
        #expect(next == start + .seconds(4))
        let stopped = machine.stopAll()
        #expect(stopped.finish == ["w"])
        #expect(machine.keepAlive(now: start + .seconds(5), interval: .seconds(2)).isEnd)
    }
}

extension PreviewStateMachine.KeepAliveAction {
    var isWait: Bool { if case .wait = self { true } else { false } }
    var isEnd: Bool { if case .end = self { true } else { false } }
}
