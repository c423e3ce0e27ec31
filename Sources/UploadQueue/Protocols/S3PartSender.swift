import Foundation
import Synchronization

/// Sends the parts a multipart upload still lacks, up to `part_concurrency` at once, each with `Content-MD5` so
/// the store refuses bytes damaged on the way; each part's ETag is persisted as it is confirmed, in whatever
/// order the parts finish.
struct S3PartSender: Sendable {
    let client: S3Client
    let source: SourceFile
    let context: TransferContext
    let plan: S3PartPlan

    /// Sends every part `state` does not hold yet and records each in it. The first failure stops the parts
    /// still in flight (ListParts knows later which of them arrived) and is thrown.
    func sendMissing(_ state: inout S3ResumeState) async throws(TransferFailure) {
        let done = Set(state.parts.map(\.number))
        var missing = (1...plan.count).filter { !done.contains($0) }[...]
        let inFlight = PartsInFlight(confirmed: state.confirmedBytes)
        let snapshot = state
        var failure: TransferFailure?
        let sendPart = { @Sendable (number: Int) async -> Result<S3ResumeState.Part, TransferFailure> in
            do throws(TransferFailure) {
                if Task.isCancelled { throw .interrupted }
                try context.checkLink()
                return .success(try await send(number, state: snapshot, inFlight: inFlight))
            } catch {
                return .failure(error)
            }
        }
        await withTaskGroup(of: Result<S3ResumeState.Part, TransferFailure>.self) { group in
            for _ in 0..<max(1, client.settings.partConcurrency) {
                guard let number = missing.popFirst() else { break }
                group.addTask { await sendPart(number) }
            }
            while let result = await group.next() {
                switch result {
                case .success(let part):
                    state.record(part)
                    inFlight.finish(part.number, confirmed: state.confirmedBytes)
                    do throws(TransferFailure) {
                        try await context.confirmed(state.confirmedBytes, state.json)
                        try source.verifyUnchanged()
                        if failure == nil, let number = missing.popFirst() { group.addTask { await sendPart(number) } }
                    } catch {
                        failure = failure ?? error
                        group.cancelAll()
                    }
                case .failure(let error):
                    if failure == nil || failure?.kind == .interrupted { failure = error }
                    group.cancelAll()
                }
            }
        }
        if let failure { throw failure }
        if Task.isCancelled { throw .interrupted }
    }

    /// UploadPart with `Content-MD5`; the ETag is checked against the MD5 when it is a plain one.
    private func send(_ number: Int, state: S3ResumeState, inFlight: PartsInFlight) async throws(TransferFailure)
        -> S3ResumeState.Part
    {
        let offset = plan.offset(of: number)
        let length = plan.length(of: number)
        let md5 = try await FileRangeDigest.digest(.md5, of: source, offset: offset, length: length)
        let query = [("partNumber", String(number)), ("uploadId", state.uploadID)]
        let response = try await client.send("PUT", key: state.key, query: query,
                                             headers: [HTTPHeader("Content-MD5", Data(md5).base64EncodedString())],
                                             body: .file(descriptor: source.descriptor, offset: offset, length: length),
                                             payloadHash: SigV4Signer.unsignedPayload, paced: true,
                                             progress: { context.sent(inFlight.update(number, sent: $0)) })
        let request = "PUT \(client.describe(client.target(key: state.key, query: query)))"
        switch response.status {
        case 200:
            guard let etag = response.header("ETag"), !etag.isEmpty else {
                throw client.badReply(request, "no ETag for part \(number)")
            }
            // The store checked the bytes against Content-MD5. Whether its ETags are those MD5s (not with SSE-KMS
            // or SSE-C) decides later whether a part found by ListParts can be checked against the file.
            return S3ResumeState.Part(number: number, etag: etag, size: length,
                                      md5: S3ETag.plainMD5(etag) == SigV4Signer.hex(md5))
        case 404 where S3ErrorReply(response)?.code == "NoSuchUpload":
            try await context.forgetResumeState()
            throw client.uploadGone(request)
        default:
            throw client.failure(for: response, request: request)
        }
    }
}

/// Bytes handed over for the parts in flight, so progress shows their sum on top of the confirmed parts.
final class PartsInFlight: Sendable {
    private let state: Mutex<(confirmed: Int64, sent: [Int: Int64])>

    init(confirmed: Int64) {
        state = Mutex((confirmed, [:]))
    }

    /// Records part `number`'s bytes sent so far; returns the confirmed bytes plus all parts in flight.
    func update(_ number: Int, sent bytes: Int64) -> Int64 {
        state.withLock { state in
            state.sent[number] = bytes
            return state.confirmed + state.sent.values.reduce(0, +)
        }
    }

    /// Part `number` is confirmed: `confirmed` bytes are now durable in all.
    func finish(_ number: Int, confirmed: Int64) {
        state.withLock { state in
            state.sent.removeValue(forKey: number)
            state.confirmed = confirmed
        }
    }
}
