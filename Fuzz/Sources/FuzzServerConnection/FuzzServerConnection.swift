import CamRigWire
import NIOCore

private let configuration = ServerConnectionStateMachine.Configuration(
    agentID: "fuzz", agentSoftware: "camrig-agent fuzz", maxFrameLength: WireProtocol.minimumMaxFrameLength)

/// The agent's connection state machine fed the frames that arbitrary bytes decode to, as a client
/// would send them: no sequence crashes it, nothing is delivered before the handshake, there is one
/// handshake, and once it closes nothing more is delivered.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzServerConnection(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    var decoder = WireFrameDecoder(maxFrameLength: WireProtocol.minimumMaxFrameLength)
    var buffer = ByteBuffer(bytes: UnsafeRawBufferPointer(start: start, count: count))
    var machine = ServerConnectionStateMachine(configuration: configuration, client: .init(role: .coordinator, name: "coordinator"))
    var ready = false
    var closed = false
    func run(_ action: ServerConnectionStateMachine.Action) {
        switch action {
        case .none, .send:
            break
        case .completeHandshake:
            precondition(!ready, "a second handshake completed")
            ready = true
        case .deliver:
            precondition(ready, "a request was delivered before the handshake")
            precondition(!closed, "a request was delivered after closing")
        case .sendAndClose, .close:
            closed = true
        }
    }
    do {
        while !closed, let frame = try decoder.decode(buffer: &buffer) {
            run(machine.frameReceived(frame, agentClockNanoseconds: 1))
        }
        if !closed, let frame = try decoder.decodeLast(buffer: &buffer, seenEOF: true) {
            run(machine.frameReceived(frame, agentClockNanoseconds: 2))
        }
    } catch let error as WireProtocolError {
        if !closed { run(machine.decodingFailed(error)) }
    } catch {
        preconditionFailure("the decoder threw something other than a WireProtocolError: \(error)")
    }
    if closed {
        var hello = WireHello()
        hello.minProtocolVersion = 1
        hello.maxProtocolVersion = 1
        if case .deliver = machine.frameReceived(WireFrame(requestID: 1, .hello(hello)), agentClockNanoseconds: 3) {
            preconditionFailure("a closed connection delivered a request")
        }
    }
    return 0
}
