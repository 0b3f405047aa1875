// The device model's value types are part of this module's interface (formats, frames, settings): code
// that drives devices sees them through this import alone.
@_exported import CamRigDeviceModel

extension CaptureDevice: DescribedDevice {}
