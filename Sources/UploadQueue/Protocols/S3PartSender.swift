import Foundation
import Synchronization

/// Sends the parts a multipart upload still lacks, up to `concurrency` at once, each with `Content-MD5` so the
/// store refuses bytes damaged on the way; each part's ETag is persisted as it is confirmed, in whatever order the
/// parts finish. How one part travels (a signed UploadPart, or a URL the app's backend presigns) is `transport`'s.
struct S3PartSender: Sendable {
    /// Sends part `number` of the upload in `state` with its body and `Content-MD5`, reporting bytes handed over;
    /// returns the store's ETag.
    typealias Transport = @Sendable (_ number: Int, _ state: S3ResumeState, _ body: RequestBody, _ md5: [UInt8],
                                     _ progress: @escaping @Sendable (Int64) -> Void) async throws(TransferFailure)
        -> String

    let transport: Transport
    let source: SourceFile
    let context: TransferContext
    let plan: S3PartPlan
    let concurrency: Int
    /// What the store's ETags are: with `.md5`, a part whose ETag is not the MD5 sent is not proven stored.
    var etags: S3Settings.ETags = .md5

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
                try context.checkConstraints()
                return .success(try await send(number, state: snapshot, inFlight: inFlight))
            } catch {
                return .failure(error)
            }
        }
        await withTaskGroup(of: Result<S3ResumeState.Part, TransferFailure>.self) { group in
            for _ in 0..<max(1, concurrency) {
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
                    // A part stopped because a sibling failed says less than that failure (a 507's quota-full
                    // included, which is also an interruption).
                    if failure == nil || failure?.code == TransferFailure.interrupted.code { failure = error }
                    group.cancelAll()
                }
            }
        }
        if let failure { throw failure }
        if Task.isCancelled { throw .interrupted }
    }

    /// The code of `partsTooLarge`'s transient failure: the uploader aborts the upload (once its parts have
    /// stopped) and forgets it, so the next attempt starts one with the smaller parts.
    static let partsTooLargeCode = "parts-too-large"

    /// A 413 on a part: a body cap below the part size. The parts of an upload all have its size, so the next
    /// attempt starts a new upload with half the part size (kept for the destination), down to S3's 5 MiB and as far
    /// as 10,000 parts allow; a store refusing the smallest parts the file can have fails the job for good.
    static func partsTooLarge(_ state: S3ResumeState, size: Int64, bodyLimit: RequestBodyLimit, request: String)
        -> TransferFailure
    {
        let smaller = max(S3Settings.minimumPartSize, state.partSize / 2)
        guard let plan = S3PartPlan(size: size, requestedPartSize: smaller), plan.partSize < state.partSize else {
            return .permanent("too-large", "\(request): the store refuses parts of \(state.partSize) bytes (HTTP "
                + "413), and this file cannot have smaller ones (at least 5 MiB each, at most 10,000 of them); raise "
                + "the body limit of the store or the proxy in front of it, then `uploadq retry`")
        }
        bodyLimit.capChunks(at: plan.partSize)
        return TransferFailure(.transient(retryAfter: .seconds(1)), code: partsTooLargeCode,
            "\(request): the store refuses parts of \(state.partSize) bytes (HTTP 413); the upload starts again with "
            + "parts of \(plan.partSize) bytes")
    }

    /// One part with `Content-MD5`; the ETag is checked against the MD5 when it is a plain one.
    private func send(_ number: Int, state: S3ResumeState, inFlight: PartsInFlight) async throws(TransferFailure)
        -> S3ResumeState.Part
    {
        let offset = plan.offset(of: number)
        let length = plan.length(of: number)
        let md5 = try await FileRangeDigest.digest(.md5, of: source, offset: offset, length: length)
        let context = self.context
        let etag = try await transport(number, state, .file(descriptor: source.descriptor, offset: offset, length: length),
                                       md5, { context.sent(inFlight.update(number, sent: $0)) })
        // The store checked the bytes against Content-MD5, and its ETag is their MD5: the proof that it holds the
        // part (unless its ETags are opaque: then the object's size is checked once it is complete).
        let matches = S3ETag.plainMD5(etag) == SigV4Signer.hex(md5)
        if etags == .md5, !matches {
            throw S3ETag.unproven(etag, expected: SigV4Signer.hex(md5), what: "part \(number)")
        }
        return S3ResumeState.Part(number: number, etag: etag, size: length, md5: matches)
    }

    /// The parts worth keeping: the store has them at the planned size and, for a plain-MD5 ETag, with the file's
    /// bytes (checked by reading the part when the ETag is not the one recorded when it was sent). With `etags`
    /// `.md5`, a part whose ETag is no MD5 proves nothing and is sent again.
    static func reconcile(_ stored: [Int: (etag: String, size: Int64)], previous: S3ResumeState, plan: S3PartPlan,
                           source: SourceFile, etags: S3Settings.ETags = .md5) async throws(TransferFailure)
        -> [S3ResumeState.Part]
    {
        var kept: [S3ResumeState.Part] = []
        for number in 1...plan.count {
            guard let part = stored[number], part.size == plan.length(of: number) else { continue }
            if etags == .md5, S3ETag.plainMD5(part.etag) == nil { continue }
            if Task.isCancelled { throw .interrupted }
            let recorded = previous.parts.first { $0.number == number }
            if recorded?.etag != part.etag, previous.etagsAreMD5 != false, let md5 = S3ETag.plainMD5(part.etag) {
                let local = try await FileRangeDigest.digest(.md5, of: source, offset: plan.offset(of: number),
                                                             length: part.size)
                guard SigV4Signer.hex(local) == md5 else { continue }
            }
            kept.append(S3ResumeState.Part(number: number, etag: part.etag, size: part.size,
                                           md5: recorded?.etag == part.etag ? recorded?.md5 : nil))
        }
        return kept
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
