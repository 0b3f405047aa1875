import CamRigCapture
import CamRigCoordinator
import Foundation
import Testing

/// "Durable before acknowledged" for a recorded file, at every point a coordinator (or its store) can stop:
/// the machine is driven against a model of the three places a file's fate is kept (the manifest, the
/// agent's disk, the destination), stopped after each step, and started again from what survived.
@Suite("A recorded file's offload: durable before acknowledged", .timeLimit(.minutes(1)))
struct RecordedFileOffloadTests {
    typealias Machine = RecordedFileOffload

    /// What survives a stop: the manifest's word on the file, the agent's copy, the destination's copy.
    struct World: Equatable, CustomStringConvertible {
        var recorded = Machine.Recorded.onHost
        var agentHolds = true
        /// Whole and checked in the folder (renamed) or the store.
        var stored = false
        /// Bytes in the folder's `.partial` file, not yet checked: what a stop before the flush leaves.
        var partial = false

        var description: String { "manifest \(recorded), agent \(agentHolds ? "holds" : "deleted"), destination \(stored ? "whole" : partial ? "partial" : "none")" }
    }

    /// Steps of the offload after which the coordinator can stop.
    enum Stop: Equatable {
        /// Some bytes fetched into the `.partial` file, before the flush and rename.
        case beforeFlush
        /// The file flushed and renamed (the store's object checked), before the manifest is written.
        case afterStored
        /// The manifest says it is stored, before the agent is told.
        case afterRecord
        /// The agent deleted it, before the manifest says so.
        case afterAcknowledgement
    }

    /// One offload of the file against `world`, performing every action the machine asks for; returns
    /// the actions in order and the outcome, or nil when it stopped at `stop`. `recordFails`: the
    /// manifest's store is down.
    @discardableResult
    static func offload(_ world: inout World, stoppingAt stop: Stop? = nil, recordFails: Bool = false) -> (actions: [Machine.Action], outcome: Machine.Outcome?) {
        var machine = Machine(recorded: world.recorded)
        var action = machine.start()
        var actions = [action]
        while true {
            switch action {
            case .transfer:
                guard world.agentHolds else {
                    action = machine.transferFailed(.notHeld("agent-1 holds no finished file [NOT_FOUND]"))
                    break
                }
                world.partial = true
                if stop == .beforeFlush { return (actions, nil) }
                (world.partial, world.stored) = (false, true)
                if stop == .afterStored { return (actions, nil) }
                action = machine.transferred()
            case .lookUp:
                action = machine.looked(world.stored ? .matches : .missing("the destination has no such file"))
            case .record(let acknowledged):
                #expect(world.stored, "a file is recorded as stored only once it is: \(world)")
                if recordFails {
                    action = machine.recordFailed("the store does not answer")
                    break
                }
                world.recorded = acknowledged ? .settled : .storedUnacknowledged
                if stop == .afterRecord { return (actions, nil) }
                action = machine.recordWritten()
            case .acknowledge:
                #expect(world.recorded != .onHost, "the agent is told to delete a file only once the manifest records it: \(world)")
                guard world.agentHolds else {
                    action = machine.acknowledgeFailed(notHeld: true, "NOT_FOUND")
                    break
                }
                world.agentHolds = false
                if stop == .afterAcknowledgement { return (actions, nil) }
                action = machine.acknowledged()
            case .finish(let outcome):
                if outcome == .offloaded { world.recorded = .settled }
                return (actions, outcome)
            }
            actions.append(action)
        }
    }

    @Test("a file goes on host → transferred → stored → recorded → acknowledged, in that order")
    func happyPath() {
        var machine = Machine(recorded: .onHost)
        #expect(machine.start() == .transfer)
        #expect(machine.transferred() == .record(acknowledged: false))
        #expect(machine.recordWritten() == .acknowledge)
        #expect(machine.acknowledged() == .finish(.offloaded))
        #expect(machine.state == .finished(.offloaded))
    }

    @Test(
        "stopped at any point, the next offload finishes the file: stored once, recorded, then deleted from its host",
        arguments: [Stop.beforeFlush, .afterStored, .afterRecord, .afterAcknowledgement])
    func stopAndResume(at stop: Stop) {
        var world = World()
        let (_, outcome) = Self.offload(&world, stoppingAt: stop)
        #expect(outcome == nil)
        // Whatever the stop left, the file is somewhere a later offload finds it.
        #expect(world.agentHolds || world.recorded != .onHost, "\(world)")
        let (actions, resumed) = Self.offload(&world)
        #expect(resumed == .offloaded, "\(stop): \(actions)")
        #expect(world == World(recorded: .settled, agentHolds: false, stored: true, partial: false), "\(stop)")
        switch stop {
        case .beforeFlush, .afterStored:
            // The manifest never said it was stored: moved again (found whole at once), recorded, acknowledged.
            #expect(actions == [.transfer, .record(acknowledged: false), .acknowledge, .finish(.offloaded)])
        case .afterRecord:
            // Recorded: only the acknowledgement is left.
            #expect(actions == [.acknowledge, .finish(.offloaded)])
        case .afterAcknowledgement:
            // Acknowledged already: the agent answers NOT_FOUND, which is done.
            #expect(actions == [.acknowledge, .finish(.offloaded)])
        }
    }

    @Test("the store down when the manifest is written: nothing is acknowledged, the host keeps the file, and the offload after the store is back completes")
    func recordFailsThenStoreComesBack() {
        var world = World()
        let (actions, outcome) = Self.offload(&world, recordFails: true)
        #expect(!actions.contains(.acknowledge), "\(actions)")
        guard case .waiting(let reason)? = outcome else {
            Issue.record("expected the file to wait: \(String(describing: outcome))")
            return
        }
        #expect(reason.contains("store"))
        #expect(world == World(recorded: .onHost, agentHolds: true, stored: true), "stored but not recorded: the host keeps it")
        let (again, resumed) = Self.offload(&world)
        #expect(resumed == .offloaded)
        #expect(again == [.transfer, .record(acknowledged: false), .acknowledge, .finish(.offloaded)])
        #expect(!world.agentHolds && world.recorded == .settled)
    }

    @Test("a file acknowledged before its record was written (an older coordinator): found whole in the destination, recorded as offloaded, never asked for again")
    func deletedBeforeRecordFoundInDestination() {
        var world = World(recorded: .onHost, agentHolds: false, stored: true)
        let (actions, outcome) = Self.offload(&world)
        #expect(outcome == .offloaded)
        #expect(actions == [.transfer, .lookUp, .record(acknowledged: true), .finish(.offloaded)], "no acknowledgement: the agent holds nothing")
        #expect(world.recorded == .settled)
    }

    @Test("a file its agent no longer holds and the destination lacks is reported lost, with why; one the destination cannot be asked for now waits")
    func lostOrUnknown() {
        var world = World(recorded: .onHost, agentHolds: false, stored: false)
        let (actions, outcome) = Self.offload(&world)
        #expect(actions.last == .finish(.lost("the destination has no such file")))
        #expect(outcome == .lost("the destination has no such file"))
        #expect(world.recorded == .onHost, "a lost file is not recorded as stored")

        var machine = Machine(recorded: .onHost)
        _ = machine.start()
        #expect(machine.transferFailed(.notHeld("NOT_FOUND")) == .lookUp)
        #expect(machine.looked(.failed("the store does not answer")) == .finish(.waiting("the store does not answer")))
    }

    @Test("a transfer that fails otherwise leaves the file on its host for the next offload")
    func transferFails() {
        var machine = Machine(recorded: .onHost)
        _ = machine.start()
        #expect(machine.transferFailed(.failed("STORE_UNAVAILABLE")) == .finish(.waiting("STORE_UNAVAILABLE")))
    }

    @Test("an acknowledgement that fails leaves the file recorded and its host told next time; one answered NOT_FOUND is done")
    func acknowledgementFails() {
        var machine = Machine(recorded: .onHost)
        _ = machine.start()
        _ = machine.transferred()
        _ = machine.recordWritten()
        #expect(machine.acknowledgeFailed(notHeld: false, "connection closed") == .finish(.unacknowledged("connection closed")))

        var settled = Machine(recorded: .storedUnacknowledged)
        #expect(settled.start() == .acknowledge)
        #expect(settled.acknowledgeFailed(notHeld: true, "NOT_FOUND") == .finish(.offloaded))

        var done = Machine(recorded: .settled)
        #expect(done.start() == .finish(.offloaded))
    }

    @Test("what the manifest says of a file is where its offload starts (old manifests: offloaded means acknowledged)")
    func recordedFromManifest() {
        typealias File = CaptureManifest.HostRecording.File
        #expect(Machine.Recorded(File(name: "a.mkv", size: 1, sha256: "x")) == .onHost)
        #expect(Machine.Recorded(File(name: "a.mkv", size: 1, sha256: "x", offloaded: true, acknowledged: false)) == .storedUnacknowledged)
        #expect(Machine.Recorded(File(name: "a.mkv", size: 1, sha256: "x", offloaded: true, acknowledged: true)) == .settled)
        #expect(Machine.Recorded(File(name: "a.mkv", size: 1, sha256: "x", offloaded: true)) == .settled)
    }

    @Test("on every path through the machine, an acknowledgement follows a durable record")
    func everyPathRecordsBeforeAcknowledging() {
        /// The machine after `event`, and the action it asks for.
        func after(_ machine: Machine, _ event: (inout Machine) -> Machine.Action) -> (Machine, Machine.Action) {
            var next = machine
            let action = event(&next)
            return (next, action)
        }
        // Every answer the shell can give to every action, explored depth first; returns the paths.
        func explore(_ machine: Machine, _ action: Machine.Action, recordedDurably: Bool, depth: Int) -> Int {
            #expect(depth < 10)
            let answers: [(event: (inout Machine) -> Machine.Action, durable: Bool)]
            switch action {
            case .finish:
                return 1
            case .acknowledge:
                #expect(recordedDurably, "acknowledged with no durable record")
                answers = [
                    ({ $0.acknowledged() }, true), ({ $0.acknowledgeFailed(notHeld: true, "NOT_FOUND") }, true),
                    ({ $0.acknowledgeFailed(notHeld: false, "closed") }, true),
                ]
            case .transfer:
                answers = [
                    ({ $0.transferred() }, recordedDurably), ({ $0.transferFailed(.notHeld("NOT_FOUND")) }, recordedDurably),
                    ({ $0.transferFailed(.failed("down")) }, recordedDurably),
                ]
            case .lookUp:
                answers = [
                    ({ $0.looked(.matches) }, recordedDurably), ({ $0.looked(.missing("none")) }, recordedDurably),
                    ({ $0.looked(.failed("down")) }, recordedDurably),
                ]
            case .record:
                answers = [({ $0.recordWritten() }, true), ({ $0.recordFailed("down") }, false)]
            }
            return answers.map { answer in
                let (next, action) = after(machine, answer.event)
                return explore(next, action, recordedDurably: answer.durable, depth: depth + 1)
            }.reduce(0, +)
        }
        var paths = 0
        for recorded in [Machine.Recorded.onHost, .storedUnacknowledged, .settled] {
            let (machine, first) = after(Machine(recorded: recorded)) { $0.start() }
            paths += explore(machine, first, recordedDurably: recorded != .onHost, depth: 0)
        }
        // On host: stored then recorded (3 acknowledgement answers) or not (1), deleted and found (1), found
        // but not recorded (1), missing (1), not asked (1), failed (1); recorded: 3; settled: 1.
        #expect(paths == 13)
    }
}

/// A track's state and its frame counts as the manifest keeps them.
@Suite("On-host recording manifest fields")
struct HostRecordingManifestTests {
    @Test("a track's state reads and writes its spellings; one this version does not know reads as unrecognized and is written back unchanged")
    func trackStateSpellings() throws {
        typealias State = CaptureManifest.HostRecording.Track.State
        for (spelling, state) in [("recording", State.recording), ("complete", .complete), ("cut_short", .cutShort), ("failed", .failed), ("unknown", .unknown)] {
            #expect(State(rawValue: spelling) == state)
            #expect(state.rawValue == spelling)
        }
        #expect(State(rawValue: "paused_by_later_version") == .unrecognized("paused_by_later_version"))
        #expect(State.unrecognized("paused_by_later_version").hasEnded)
        #expect(!State.recording.hasEnded && !State.unknown.hasEnded && State.cutShort.hasEnded)

        let json = #"{"camera":0,"agent":"agent-1","device":"cam0","stem":"cam0-x","codec":"raw","state":"paused_by_later_version","frames":3,"gaps":1,"duplicates":0,"files":[{"name":"cam0-x.mkv","size":10,"sha256":"ab","offloaded":true}]}"#
        let track = try JSONDecoder().decode(CaptureManifest.HostRecording.Track.self, from: Data(json.utf8))
        #expect(track.state == .unrecognized("paused_by_later_version"))
        #expect(track.lost == nil && track.files[0].acknowledged == nil && track.files[0].isSettled, "an old manifest's offloaded file was acknowledged")
        let written = String(decoding: try JSONEncoder().encode(track), as: UTF8.self)
        #expect(written.contains(#""state":"paused_by_later_version""#))
    }

    @Test("a track cut short: its lost instants are counted apart from its gaps")
    func lostApartFromGaps() throws {
        let table = try RecordedFrameTable(
            parsing: [
                RecordedFrameTable.header,
                "0,0,0,1000,20,990,start-of-exposure,",
                "1,,,2000,,,,gap",
                "2,1,0,3000,20,2990,start-of-exposure,",
                "2,2,0,3010,20,3000,start-of-exposure,duplicate",
                "3,,,4000,,,,lost",
                "4,,,5000,,,,lost",
            ].joined(separator: "\n") + "\n")
        #expect(table.gapCount == 1)
        #expect(table.lostCount == 2)
    }
}
