import CamRigCLI
import CamRigCoordinator
import CamRigLocalRig
import CamRigSecurity
import CamRigViews
import CamRigStorage

/// Turns a library error into the message and exit code the user sees: `Error: message`, status 1.
func userFacing(_ error: any Error) -> any Error {
    switch error {
    case let error as AgentClientError: return CommandFailure(error.description)
    case let error as SecurityError: return CommandFailure(error.message)
    case let error as RigSession.CommitError: return CommandFailure(error.description)
    case let error as FrameRatePlanner.PlanError: return CommandFailure(error.description)
    case let error as StorageError: return CommandFailure(error.description)
    case let error as LocalAgentError: return CommandFailure(error.description)
    case let error as DeviceSettingsError: return CommandFailure(error.description)
    default: return error
    }
}
