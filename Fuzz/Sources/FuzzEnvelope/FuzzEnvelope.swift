import CamRigWire

/// Envelope and message decoding from arbitrary bytes: decoding either fails or gives a message that
/// encodes, decodes and encodes again to the same bytes. (Bytes, not `==`: a double field may hold a NaN,
/// which is never equal to itself; the agent checks such fields with `isFinite` where it uses them.)
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzEnvelope(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let bytes = Array(UnsafeRawBufferPointer(start: start, count: count))
    guard let envelope = try? WireEnvelope(serializedBytes: bytes) else { return 0 }
    _ = envelope.messageName
    let encoded: [UInt8] = try! envelope.serializedBytes()
    let again = try! WireEnvelope(serializedBytes: encoded)
    let reencoded: [UInt8] = try! again.serializedBytes()
    precondition(reencoded == encoded, "an envelope did not survive encoding and decoding")
    return 0
}
