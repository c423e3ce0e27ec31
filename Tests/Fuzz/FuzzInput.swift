import Foundation
@testable import UploadQueue

/// The fuzzer's bytes, cut into fields at 0x00 bytes: how one input drives several arguments of a call.
struct FuzzInput {
    let bytes: [UInt8]

    init(_ data: UnsafePointer<UInt8>, _ size: Int) {
        bytes = Array(UnsafeBufferPointer(start: data, count: size))
    }

    /// All the bytes as text (invalid UTF-8 repaired, as the daemon reads what it decodes).
    var text: String { String(decoding: bytes, as: UTF8.self) }

    /// The fields between 0x00 bytes, as text; at least `count` of them (empty ones added).
    func fields(_ count: Int) -> [String] {
        var parts = bytes.split(separator: 0, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
        while parts.count < count { parts.append("") }
        return parts
    }
}

/// A job carrying fuzzed values where the templates read them.
func fuzzJob(name: String, meta: [String: String], sha256: String = "") -> Job {
    Job(id: JobID(trusted: "01934f7e-8c1a-7b3e-9d2f-0a1b2c3d4e5f"), state: .pending, waitingReason: nil, permanent: false,
        attempts: 0, failures: 0, nextAttemptAt: nil, lastError: nil, file: "/tmp/f", sourcePath: "/tmp/f",
        originalName: name, mode: .copy, size: 1, sha256: sha256, contentType: "image/jpeg", modifiedNanoseconds: 0,
        inode: 1, device: 1, destination: "d", priority: 0, remoteURL: nil, bytesConfirmed: 0, rateBytesPerSecond: 0,
        meta: meta, patch: nil, patchState: .none, onMetered: nil, meteredBelow: nil, sourceAfterUpload: nil,
        resumeState: nil, intakeComplete: true, cancelRequested: false, createdAt: Date(timeIntervalSince1970: 0),
        updatedAt: Date(timeIntervalSince1970: 0))
}
