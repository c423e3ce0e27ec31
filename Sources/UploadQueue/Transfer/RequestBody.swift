import Foundation

/// What a request sends: nothing, bytes in memory, a range of an open file, or a sequence of those.
///
/// File ranges are read with `pread` while libcurl sends them, so a body is never held in memory whole.
indirect enum RequestBody: Sendable {
    case empty
    case bytes([UInt8])
    /// `length` bytes of the open file `descriptor` from `offset`; the caller keeps the descriptor open.
    case file(descriptor: Int32, offset: Int64, length: Int64)
    /// `length` bytes of the job's file from `offset`: what is read feeds the file's digest when the job is hashed
    /// while sending.
    case source(SourceFile, offset: Int64, length: Int64)
    case sequence([RequestBody])

    /// Total bytes the body sends.
    var length: Int64 {
        switch self {
        case .empty: 0
        case .bytes(let bytes): Int64(bytes.count)
        case .file(_, _, let length), .source(_, _, let length): length
        case .sequence(let parts): parts.reduce(0) { $0 + $1.length }
        }
    }

    /// The body as flat segments, for the reader.
    var segments: [RequestBody] {
        switch self {
        case .empty: []
        case .sequence(let parts): parts.flatMap(\.segments)
        default: [self]
        }
    }
}

/// Reads a `RequestBody` sequentially for libcurl, and rewinds when libcurl asks (auth, dead reused connection).
///
/// Lives on the engine thread only.
final class RequestBodyReader {
    private let segments: [RequestBody]
    private let starts: [Int64]
    let length: Int64
    private(set) var position: Int64 = 0
    /// Why the last read failed (a file that shrank or an I/O error), when it did.
    private(set) var failure: String?
    /// True when the failure was an I/O error rather than a file that shrank.
    private(set) var failureIsIO = false

    init(_ body: RequestBody) {
        segments = body.segments
        var starts: [Int64] = []
        var total: Int64 = 0
        for segment in segments {
            starts.append(total)
            total += segment.length
        }
        self.starts = starts
        length = total
    }

    /// Moves to `offset` from the start; false when out of range.
    func seek(to offset: Int64) -> Bool {
        guard offset >= 0, offset <= length else { return false }
        position = offset
        return true
    }

    /// Fills `buffer` from the current position; returns the bytes written, 0 at the end, or nil on failure.
    func read(into buffer: UnsafeMutableRawBufferPointer) -> Int? {
        var written = 0
        while written < buffer.count, position < length {
            guard let index = segmentIndex(containing: position) else { return written }
            let within = position - starts[index]
            let room = UnsafeMutableRawBufferPointer(rebasing: buffer[written...])
            let count: Int
            switch segments[index] {
            case .bytes(let bytes):
                count = min(room.count, bytes.count - Int(within))
                bytes.withUnsafeBytes { source in
                    room.baseAddress!.copyMemory(from: source.baseAddress! + Int(within), byteCount: count)
                }
            case .file(let descriptor, let offset, let segmentLength):
                guard let got = readFile(descriptor, into: room, at: offset + within, length: segmentLength - within,
                                         written: written) else { return written > 0 ? written : nil }
                count = got
            case .source(let source, let offset, let segmentLength):
                guard let got = readFile(source.descriptor, into: room, at: offset + within,
                                         length: segmentLength - within, written: written)
                else { return written > 0 ? written : nil }
                source.digest.take(UnsafeRawBufferPointer(rebasing: room[0..<got]), at: offset + within)
                count = got
            case .empty, .sequence:
                count = 0
            }
            written += count
            position += Int64(count)
        }
        return written
    }

    /// Reads up to `length` bytes of `descriptor` at `offset` into `room`; nil when nothing could be read (the
    /// failure is noted for the next call when bytes were already handed over in this one).
    private func readFile(_ descriptor: Int32, into room: UnsafeMutableRawBufferPointer, at offset: Int64,
                          length: Int64, written: Int) -> Int? {
        let want = Int(min(Int64(room.count), length))
        var got: Int
        repeat {
            got = pread(descriptor, room.baseAddress, want, off_t(offset))
        } while got < 0 && errno == EINTR
        guard got <= 0 else { return got }
        // Hand over what was read; the next call reports the failure.
        if written > 0 { return nil }
        failureIsIO = got < 0
        failure = got < 0 ? "reading the file failed: \(String(cString: strerror(errno)))"
            : "the file ended \(length) bytes early (it shrank while being sent)"
        return nil
    }

    private func segmentIndex(containing offset: Int64) -> Int? {
        var index = starts.count - 1
        while index >= 0 {
            if starts[index] <= offset && offset < starts[index] + segments[index].length { return index }
            index -= 1
        }
        return nil
    }
}
