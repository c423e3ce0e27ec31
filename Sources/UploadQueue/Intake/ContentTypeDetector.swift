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
        if let known = Self.cameraFormat(head) { return known }
        return libmagicType(of: head)
    }

    /// libmagic's answer alone.
    func libmagicType(of head: UnsafeRawBufferPointer) -> String {
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

    /// What phones and cameras write, recognised by their signatures before libmagic (which tries its whole
    /// database and is most of the cost of taking in a small file): the same answers libmagic gives for them.
    static func cameraFormat(_ head: UnsafeRawBufferPointer) -> String? {
        func starts(_ bytes: [UInt8], at offset: Int = 0) -> Bool {
            head.count >= offset + bytes.count && head[offset..<(offset + bytes.count)].elementsEqual(bytes)
        }
        if starts([0xFF, 0xD8, 0xFF]) { return "image/jpeg" }
        if starts([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return "image/png" }
        if starts(Array("GIF87a".utf8)) || starts(Array("GIF89a".utf8)) { return "image/gif" }
        if starts(Array("RIFF".utf8)), starts(Array("WEBP".utf8), at: 8) { return "image/webp" }
        if starts(Array("ftyp".utf8), at: 4), head.count >= 12 {
            switch String(decoding: head[8..<12], as: UTF8.self) {
            case "heic", "heix": return "image/heic"
            case "isom", "mp41", "mp42": return "video/mp4"
            case "qt  ": return "video/quicktime"
            default: return nil
            }
        }
        return nil
    }
}
