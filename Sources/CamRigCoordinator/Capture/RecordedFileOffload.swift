import CamRigCapture

/// "Durable before acknowledged" for one file of an on-host recording, as a pure state machine.
///
/// A file goes from its host into the capture's destination (fetched into the captures folder, or put
/// in the object store by its agent), is checked there (size and SHA-256), is *recorded* as stored (the
/// capture's manifest written, durably), and only then is its agent told to delete it
/// (`AcknowledgeRecording`). The shell (`RecordingOffload`) performs each action and reports how it
/// went; the machine decides what comes next, so that no path acknowledges a file whose record is not
/// durable, and every crash point is tested without an agent or a store.
///
/// ```
/// onHost ─transfer→ transferring ─transferred→ recording ─recordWritten→ acknowledging ─acknowledged→ offloaded
///                     │ NOT_FOUND                 │ recordFailed: waiting (the host keeps it)
///                     ▼
///                  lookingUp ─matches→ recording (nothing to acknowledge) ─recordWritten→ offloaded
///                     └─missing→ lost
/// ```
///
/// A coordinator stopped anywhere starts again from what the manifest says (`Recorded`): a file not yet
/// recorded is transferred again (finding its bytes already in the destination costs little), a file
/// recorded but not acknowledged is acknowledged, and a file its agent no longer holds is looked for in
/// the destination before it is called lost.
public struct RecordedFileOffload: Sendable, Equatable {
    /// What the capture's manifest says of the file as the offload starts.
    public enum Recorded: Sendable, Equatable {
        /// Not stored, as far as the manifest knows: its agent should hold it.
        case onHost
        /// Stored and recorded; its agent may still hold it (`acknowledged == false`).
        case storedUnacknowledged
        /// Stored, recorded and acknowledged: nothing to do.
        case settled

        /// What `file`'s entry in a manifest says.
        public init(_ file: CaptureManifest.HostRecording.File) {
            self = !file.offloaded ? .onHost : file.acknowledged == false ? .storedUnacknowledged : .settled
        }
    }

    /// Why a transfer did not store the file.
    public enum TransferFailure: Sendable, Equatable {
        /// The agent holds no such file (`NOT_FOUND`): deleted after an acknowledgement, or never made.
        case notHeld(String)
        /// Anything else (the agent or the destination unreachable, a checksum that did not match): the
        /// file stays on its host for the next offload.
        case failed(String)
    }

    /// What looking for the file in the destination found.
    public enum Lookup: Sendable, Equatable {
        /// There, with the size and SHA-256 its host recorded.
        case matches
        /// Not there, or other bytes under its name: why, in words.
        case missing(String)
        /// The destination could not be asked (a store down): the next offload looks again.
        case failed(String)
    }

    /// What the shell must do next.
    public enum Action: Sendable, Equatable {
        /// Fetch the file into the folder and check it, or have its agent put it in the store and check
        /// the object; report `transferred` or `transferFailed`.
        case transfer
        /// Look for the file in the destination (folder: size and SHA-256 of the file; store: the
        /// object's size and `x-amz-meta-sha256`); report `looked`.
        case lookUp
        /// Write the record that the file is stored (the manifest, durably); report `recordWritten` or
        /// `recordFailed`. `acknowledged` is what the record says of its agent's copy: `true` when the
        /// agent holds none, so no acknowledgement follows.
        case record(acknowledged: Bool)
        /// Tell the agent to delete its copy (`AcknowledgeRecording`); report `acknowledged` or
        /// `acknowledgeFailed`.
        case acknowledge
        /// Nothing more for this file in this offload.
        case finish(Outcome)
    }

    /// How the file's offload ended.
    public enum Outcome: Sendable, Equatable {
        /// In the destination, recorded, and its agent holds it no more.
        case offloaded
        /// In the destination and recorded, but its agent could not be told: the next offload tells it.
        case unacknowledged(String)
        /// Still on its host (and maybe in the destination, unrecorded): the next offload goes on.
        case waiting(String)
        /// Neither on its host nor in the destination.
        case lost(String)
    }

    /// Where the file stands.
    public enum State: Sendable, Equatable {
        case initial(Recorded)
        case transferring
        case lookingUp
        /// The record that it is stored is being written; `agentHolds` says whether an acknowledgement
        /// follows it.
        case recording(agentHolds: Bool)
        case acknowledging
        case finished(Outcome)
    }

    public private(set) var state: State

    public init(recorded: Recorded) {
        state = .initial(recorded)
    }

    /// The offload begins with this file.
    public mutating func start() -> Action {
        guard case .initial(let recorded) = state else {
            preconditionFailure("a file's offload starts once (now \(state))")
        }
        switch recorded {
        case .onHost:
            state = .transferring
            return .transfer
        case .storedUnacknowledged:
            state = .acknowledging
            return .acknowledge
        case .settled:
            return finish(.offloaded)
        }
    }

    /// The file is in the destination and checked: its record is written before anything else.
    public mutating func transferred() -> Action {
        precondition(state == .transferring, "transferred while \(state)")
        state = .recording(agentHolds: true)
        return .record(acknowledged: false)
    }

    /// The transfer did not store the file.
    public mutating func transferFailed(_ failure: TransferFailure) -> Action {
        precondition(state == .transferring, "transfer failed while \(state)")
        switch failure {
        case .notHeld:
            // Its agent deleted it, maybe after an acknowledgement whose record was never written: the
            // destination may hold it whole.
            state = .lookingUp
            return .lookUp
        case .failed(let reason):
            return finish(.waiting(reason))
        }
    }

    /// What the destination holds of a file its agent no longer has.
    public mutating func looked(_ lookup: Lookup) -> Action {
        precondition(state == .lookingUp, "looked up while \(state)")
        switch lookup {
        case .matches:
            state = .recording(agentHolds: false)
            return .record(acknowledged: true)
        case .missing(let reason):
            return finish(.lost(reason))
        case .failed(let reason):
            return finish(.waiting(reason))
        }
    }

    /// The record is durable: now, and only now, the agent may delete its copy.
    public mutating func recordWritten() -> Action {
        guard case .recording(let agentHolds) = state else { preconditionFailure("record written while \(state)") }
        guard agentHolds else { return finish(.offloaded) }
        state = .acknowledging
        return .acknowledge
    }

    /// The record could not be written: the agent keeps its copy, and the next offload finds the file
    /// in the destination and writes the record then.
    public mutating func recordFailed(_ reason: String) -> Action {
        guard case .recording = state else { preconditionFailure("record failed while \(state)") }
        return finish(.waiting(reason))
    }

    /// The agent deleted its copy.
    public mutating func acknowledged() -> Action {
        precondition(state == .acknowledging, "acknowledged while \(state)")
        return finish(.offloaded)
    }

    /// The acknowledgement failed. `notHeld`: the agent had no such file (acknowledged before), which is
    /// as good as done.
    public mutating func acknowledgeFailed(notHeld: Bool, _ reason: String) -> Action {
        precondition(state == .acknowledging, "acknowledgement failed while \(state)")
        return finish(notHeld ? .offloaded : .unacknowledged(reason))
    }

    private mutating func finish(_ outcome: Outcome) -> Action {
        state = .finished(outcome)
        return .finish(outcome)
    }
}
