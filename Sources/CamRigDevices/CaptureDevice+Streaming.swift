import CamRigDeviceModel
import NIOConcurrencyHelpers

extension CaptureDevice {
    /// Starts streaming the active format; frames arrive on the returned stream until the consumer stops
    /// iterating (or cancels), the device fails, or it vanishes (the stream then throws the error).
    ///
    /// At most `bufferLimit` frames wait for a slow consumer; older ones are dropped, and `dropped` counts them.
    public func frames(bufferLimit: Int = 4) throws(DeviceError) -> FrameStream {
        let alreadyStreaming: Bool = state.withLockedValue { state in
            defer { state.streaming = true }
            return state.streaming || !state.connected
        }
        if alreadyStreaming {
            if !isConnected { throw disconnectedError }
            throw DeviceError(.busy, device: uniqueID, "is already streaming")
        }
        let current = state.withLockedValue { $0 }
        do {
            _ = try backend.activate(format: current.activeFormat, frameDuration: current.activeMinFrameDuration)
            try backend.apply(settings: current.settings)
        } catch {
            state.withLockedValue { $0.streaming = false }
            throw error
        }
        let counter = NIOLockedValueBox<UInt64>(0)
        let meter = NIOLockedValueBox(FramePeriodMeter())
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: CapturedFrame.self, bufferingPolicy: .bufferingNewest(max(bufferLimit, 1)))
        let backend = self.backend
        continuation.onTermination = { [weak self] _ in
            backend.stopStreaming()
            self?.state.withLockedValue { $0.streaming = false }
        }
        do {
            try backend.startStreaming(bufferCount: 4) { event in
                switch event {
                case .frame(var frame):
                    frame.measuredFramePeriod = meter.withLockedValue {
                        $0.observe(sequence: frame.sequence, exposureStart: frame.exposureStart, streamStart: frame.streamStart)
                    }
                    if case .dropped = continuation.yield(frame) {
                        counter.withLockedValue { $0 += 1 }
                    }
                case .ended(nil):
                    continuation.finish()
                case .ended(let error?):
                    continuation.finish(throwing: error)
                }
            }
        } catch {
            state.withLockedValue { $0.streaming = false }
            throw error
        }
        return FrameStream(stream: stream, dropped: counter)
    }
}

public struct FrameStream: AsyncSequence, Sendable {
    public typealias Element = CapturedFrame
    let stream: AsyncThrowingStream<CapturedFrame, any Error>
    let droppedCounter: NIOLockedValueBox<UInt64>

    init(stream: AsyncThrowingStream<CapturedFrame, any Error>, dropped: NIOLockedValueBox<UInt64>) {
        self.stream = stream
        self.droppedCounter = dropped
    }

    /// Frames dropped so far because the consumer did not keep up.
    public var dropped: UInt64 { droppedCounter.withLockedValue { $0 } }

    public func makeAsyncIterator() -> AsyncThrowingStream<CapturedFrame, any Error>.AsyncIterator {
        stream.makeAsyncIterator()
    }
}
