import CMagic
import Foundation

/// The MIME type of a file's first bytes, from libmagic (`image/jpeg`, `video/mp4`, …).
///
/// One magic cookie loaded once (loading the database takes milliseconds); libmagic is not thread-safe, so calls
/// are serialised by a lock, which is what makes this class safe to share (`@unchecked Sendable`).
final class ContentTypeDetector: @unchecked Sendable {
    private let lock = NSLock()
    private let cookie: OpaquePointer?

    init() {
        let handle = magic_open(MAGIC_MIME_TYPE | MAGIC_ERROR)
        if let handle, magic_load(handle, nil) != 0 {
            magic_close(handle)
            cookie = nil
        } else {
            cookie = handle
        }
    }

    deinit {
        if let cookie { magic_close(cookie) }
    }

    /// The type of these leading bytes; `application/octet-stream` when libmagic is unavailable or unsure.
    func contentType(of head: UnsafeRawBufferPointer) -> String {
        if head.isEmpty { return "application/x-empty" }
        lock.lock()
        defer { lock.unlock() }
        guard let cookie, let result = magic_buffer(cookie, head.baseAddress, head.count) else {
            return "application/octet-stream"
        }
        let text = String(cString: result)
        return text.isEmpty ? "application/octet-stream" : text
    }

    /// The type of the file open at `descriptor` (reads its first 64 KiB).
    func contentType(descriptor: Int32) -> String {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 << 10, alignment: 16)
        defer { buffer.deallocate() }
        let count = pread(descriptor, buffer.baseAddress, buffer.count, 0)
        return contentType(of: UnsafeRawBufferPointer(rebasing: buffer[0..<max(0, count)]))
    }
}
