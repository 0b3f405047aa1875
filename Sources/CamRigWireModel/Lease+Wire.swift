import CamRigDeviceModel
import CamRigWire

// Leases (AVFoundation's lockForConfiguration over the network) in wire messages.

extension WireLeaseInfo {
    public init(_ lease: LeaseTable.Lease) {
        self.init()
        leaseID = lease.id
        deviceID = lease.deviceID
        holder = lease.holder
        expiresAtNs = lease.expiresAt
    }
}
