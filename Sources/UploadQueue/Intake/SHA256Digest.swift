import CUploadQueueSystem
import Foundation

/// Incremental SHA-256 through libcrypto (hardware-accelerated where the CPU has SHA extensions).
struct SHA256Digest: ~Copyable {
    private let context: UnsafeMutableRawPointer

    init() {
        guard let context = uploadq_sha256_new() else {
            preconditionFailure("libcrypto could not create a SHA-256 context (out of memory)")
        }
        self.context = context
    }

    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        _ = uploadq_sha256_update(context, base, bytes.count)
    }

    /// The lowercase hex digest; ends the computation.
    consuming func finish() -> String {
        var digest = [UInt8](repeating: 0, count: 32)
        _ = uploadq_sha256_finish(context, &digest)
        discard self
        return Self.hex(digest)
    }

    deinit {
        uploadq_sha256_free(context)
    }

    /// Hex SHA-256 of a file of `size` bytes read from `descriptor` at offset 0, in 1 MiB blocks; `eachBlock` sees
    /// every block with its offset (so a copy can be written in the same pass). `stop` ends the read between blocks.
    ///
    /// Reads at most one byte past `size`, to notice growth: a file that turns out longer or shorter than the size
    /// it was admitted with is refused as changed (`sourceUnstable`), so no dropper can make the daemon read (and
    /// copy) more than what its checks looked at, nor a file of `/proc` that says it is empty.
    static func ofFile(
        descriptor: Int32, path: String, size: Int64, job: JobID? = nil, stop: IntakeStop? = nil,
        eachBlock: (UnsafeRawBufferPointer, off_t) throws(UploadQueueError) -> Void = { _, _ in }
    ) throws(UploadQueueError) -> String {
        BlockingCheck.check("hashing a whole file")
        var digest = SHA256Digest()
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        var offset: off_t = 0
        while true {
            try stop?.check(path: path, job: job)
            let wanted = Int(min(Int64(buffer.count), max(0, size + 1 - Int64(offset))))
            let count = pread(descriptor, buffer.baseAddress, wanted, offset)
            if count < 0 {
                if errno == EINTR { continue }
                throw .system("read", path: path, job: job)
            }
            if count == 0 { break }
            guard Int64(offset) + Int64(count) <= size else {
                throw UploadQueueError(.sourceUnstable, """
                    grew while it was read: it is longer than the \(size) bytes it was taken with; it is looked at \
                    again once it stops changing
                    """, job: job, path: path)
            }
            let block = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
            digest.update(block)
            try eachBlock(block, offset)
            offset += off_t(count)
        }
        guard Int64(offset) == size else {
            throw UploadQueueError(.sourceUnstable, """
                shrank while it was read: \(offset) of the \(size) bytes it was taken with; it is looked at again once \
                it stops changing
                """, job: job, path: path)
        }
        return digest.finish()
    }

    /// Lowercase hex of bytes (a table instead of `String(format:)`, which costs more than the hashing of a small
    /// file).
    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8](repeating: 0, count: bytes.count * 2)
        for (index, byte) in bytes.enumerated() {
            out[2 * index] = digits[Int(byte >> 4)]
            out[2 * index + 1] = digits[Int(byte & 0x0F)]
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes of an even-length hex string; nil for anything else.
    static func bytes(hex: String) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        func value(_ digit: UInt8) -> UInt8? {
            switch digit {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        var index = 0
        while index < digits.count {
            guard let high = value(digits[index]), let low = value(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }
}
