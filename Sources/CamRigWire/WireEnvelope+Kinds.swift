extension WireEnvelope {
    /// The message's name as the schema spells it (`hello`, `video_frame`, …), for logs and errors.
    public var messageName: String {
        guard let body else { return "(none)" }
        return body.messageName
    }
}

extension WireEnvelope.OneOf_Body {
    /// The schema's field name of this message.
    public var messageName: String {
        switch self {
        case .hello: "hello"
        case .welcome: "welcome"
        case .error: "error"
        case .goodbye: "goodbye"
        case .ping: "ping"
        case .pong: "pong"
        case .clockProbe: "clock_probe"
        case .clockProbeReply: "clock_probe_reply"
        case .ok: "ok"
        case .openClockChannel: "open_clock_channel"
        case .clockChannel: "clock_channel"
        case .listDevices: "list_devices"
        case .discoveryQuery: "discovery_query"
        case .deviceList: "device_list"
        case .describeDevice: "describe_device"
        case .deviceDescription: "device_description"
        case .lock: "lock"
        case .lease: "lease"
        case .renewLease: "renew_lease"
        case .unlock: "unlock"
        case .configure: "configure"
        case .deviceState: "device_state"
        case .startStream: "start_stream"
        case .streamStarted: "stream_started"
        case .stopStream: "stop_stream"
        case .streamEnded: "stream_ended"
        case .videoFrame: "video_frame"
        case .capturePhoto: "capture_photo"
        case .scheduleTrigger: "schedule_trigger"
        case .triggerScheduled: "trigger_scheduled"
        case .triggerFired: "trigger_fired"
        case .fetchResults: "fetch_results"
        case .photoResult: "photo_result"
        case .resultsEnd: "results_end"
        case .acknowledgeResults: "acknowledge_results"
        case .preparePhotoSettings: "prepare_photo_settings"
        case .photoStage: "photo_stage"
        case .finalizePhotos: "finalize_photos"
        case .getSpoolStatus: "get_spool_status"
        case .spoolStatus: "spool_status"
        case .subscribe: "subscribe"
        case .event: "event"
        case .lockPhase: "lock_phase"
        case .unlockPhase: "unlock_phase"
        case .getPhaseStatus: "get_phase_status"
        case .phaseStatus: "phase_status"
        case .phaseStatusList: "phase_status_list"
        case .checkRecording: "check_recording"
        case .recordingCheck: "recording_check"
        case .startRecording: "start_recording"
        case .recordingStarted: "recording_started"
        case .recordingProgress: "recording_progress"
        case .recordingEnded: "recording_ended"
        case .stopRecording: "stop_recording"
        case .listRecordings: "list_recordings"
        case .recordingList: "recording_list"
        case .fetchRecordingFile: "fetch_recording_file"
        case .fileChunk: "file_chunk"
        case .acknowledgeRecording: "acknowledge_recording"
        case .uploadRecordingFile: "upload_recording_file"
        case .storedObject: "stored_object"
        }
    }

    /// Whether the message may be followed by a payload of raw bytes in its frame.
    public var carriesPayload: Bool {
        switch self {
        case .videoFrame, .photoResult, .fileChunk: true
        default: false
        }
    }

    /// Whether the message is a request a client sends to an agent (and so needs a non-zero request id).
    public var isClientRequest: Bool {
        switch self {
        case .ping, .clockProbe, .openClockChannel, .listDevices, .discoveryQuery, .describeDevice, .lock, .renewLease, .unlock,
            .configure, .startStream, .stopStream, .capturePhoto, .scheduleTrigger, .fetchResults,
            .acknowledgeResults, .preparePhotoSettings, .finalizePhotos, .subscribe, .lockPhase, .unlockPhase, .getPhaseStatus,
            .getSpoolStatus, .checkRecording, .startRecording, .stopRecording, .listRecordings, .fetchRecordingFile,
            .acknowledgeRecording, .uploadRecordingFile:
            true
        default:
            false
        }
    }
}

extension WirePeerRole {
    /// Whether a client with this role may send `request` (coordinators anything; viewers only what
    /// describes devices or watches them).
    public func mayRequest(_ request: WireEnvelope.OneOf_Body) -> Bool {
        switch self {
        case .coordinator:
            return true
        case .viewer:
            switch request {
            case .ping, .clockProbe, .openClockChannel, .listDevices, .discoveryQuery, .describeDevice, .startStream, .stopStream, .subscribe,
                .getPhaseStatus, .getSpoolStatus:
                return true
            default:
                return false
            }
        case .agent, .unspecified, .UNRECOGNIZED:
            return false
        }
    }
}
