import CamRigWire

/// Envelope and message decoding from arbitrary bytes: decoding either fails or gives a message that
/// encodes again and decodes to the same message.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzEnvelope(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let bytes = Array(UnsafeRawBufferPointer(start: start, count: count))
    guard let envelope = try? WireEnvelope(serializedBytes: bytes) else { return 0 }
    _ = envelope.messageName
    let encoded: [UInt8] = try! envelope.serializedBytes()
    let again = try! WireEnvelope(serializedBytes: encoded)
    precondition(again == envelope, "an envelope did not survive encoding and decoding")
    return 0
}
