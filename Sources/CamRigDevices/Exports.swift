// The device model's describing protocol, for the devices this module drives.

import CamRigDeviceModel

extension CaptureDevice: DescribedDevice {}
