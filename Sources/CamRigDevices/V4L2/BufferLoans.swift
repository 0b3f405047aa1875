@_spi(CustomByteBufferAllocator) import NIOCore
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#endif

/// Driver buffers lent out as `ByteBuffer`s, so a frame reaches the socket (or TLS) straight from the
/// memory the camera wrote, with no copy in between.
///
/// A lent buffer's storage is the driver's mapping itself. NIO frees a `ByteBuffer`'s storage when its
/// last copy or slice goes; for a lent buffer that is the moment the bytes are given back (to be queued
/// to the driver again) instead of freed. A holder that writes into a shared lent buffer gets its own
/// copy (copy on write, as for any `ByteBuffer`), and one that grows it moves to ordinary memory and
/// gives the driver's buffer back at once. Memory a lent buffer's copies allocate is ordinary `malloc`
/// memory and freed as usual.
enum BufferLoans {
    /// What to do when a lent buffer is no longer referenced, by the buffer's address.
    private static let outstanding = NIOLockedValueBox<[UInt: @Sendable () -> Void]>([:])

    /// The allocator of lent buffers and of every copy made from them.
    static let allocator = ByteBufferAllocator(
        allocate: { size in malloc(max(size, 1)) },
        reallocate: { pointer, oldSize, newSize in BufferLoans.reallocate(pointer, oldSize: oldSize, newSize: newSize) },
        deallocate: { pointer in BufferLoans.deallocate(pointer) },
        copy: { destination, source, count in destination.copyMemory(from: source, byteCount: count) }
    )

    /// A `ByteBuffer` over `memory` (its first `used` bytes readable); `giveBack` runs, once, on whichever
    /// thread drops the last reference to it.
    static func lend(_ memory: UnsafeMutableRawBufferPointer, used: Int, giveBack: @escaping @Sendable () -> Void) -> ByteBuffer {
        let key = UInt(bitPattern: memory.baseAddress)
        outstanding.withLockedValue { loans in
            precondition(loans[key] == nil, "a driver buffer is lent twice")
            loans[key] = giveBack
        }
        return ByteBuffer(takingOwnershipOf: memory, allocator: allocator, readerIndex: 0, writerIndex: used)
    }

    /// How many buffers are lent and not yet given back (all devices).
    static var count: Int { outstanding.withLockedValue { $0.count } }

    private static func takeLoan(_ pointer: UnsafeMutableRawPointer) -> (@Sendable () -> Void)? {
        outstanding.withLockedValue { $0.removeValue(forKey: UInt(bitPattern: pointer)) }
    }

    private static func deallocate(_ pointer: UnsafeMutableRawPointer) {
        if let giveBack = takeLoan(pointer) {
            giveBack()
        } else {
            free(pointer)
        }
    }

    private static func reallocate(_ pointer: UnsafeMutableRawPointer?, oldSize: Int, newSize: Int) -> UnsafeMutableRawPointer? {
        guard let pointer else { return malloc(max(newSize, 1)) }
        guard let giveBack = takeLoan(pointer) else { return realloc(pointer, max(newSize, 1)) }
        // A lent buffer that grows moves to ordinary memory; the driver's buffer goes back.
        let moved = malloc(max(newSize, 1))
        if let moved { moved.copyMemory(from: pointer, byteCount: min(oldSize, newSize)) }
        giveBack()
        return moved
    }
}

/// One stream's lent buffers, the model every backend lends through (V4L2's mappings, libcamera's
/// requests): how many are out, and a wait, without polling, for them to come back before the stream's
/// buffers are freed or the device is configured again.
final class LoanBook: Sendable {
    /// Loans out; changed only under its lock, which also sets `allBack` so the two never disagree.
    private let out = NIOLockedValueBox(0)
    /// True while no loan is out: what `waitForReturns` waits on.
    private let allBack = ConditionLock(value: true)

    /// Lends `memory` as `BufferLoans.lend` does; `giveBack` runs when the last reference goes, then the
    /// loan is off the book.
    func lend(_ memory: UnsafeMutableRawBufferPointer, used: Int, giveBack: @escaping @Sendable () -> Void) -> ByteBuffer {
        change(by: 1)
        return BufferLoans.lend(memory, used: used) { [self] in
            giveBack()
            change(by: -1)
        }
    }

    private func change(by delta: Int) {
        out.withLockedValue { count in
            count += delta
            guard count == 0 || (count == 1 && delta == 1) else { return }
            allBack.lock()
            allBack.unlock(withValue: count == 0)
        }
    }

    /// Loans not yet given back.
    var count: Int { out.withLockedValue { $0 } }

    /// Blocks (a device's own thread, never an event loop or the cooperative pool) until every loan is
    /// back or `timeout` seconds have passed; returns how many are still out.
    func waitForReturns(timeout: Double) -> Int {
        guard allBack.lock(whenValue: true, timeoutSeconds: timeout) else { return count }
        allBack.unlock()
        return count
    }
}
