import Foundation
import GRDB

/// De-duplication for jobs hashed while sending (`sha256 = "while-sending"`), which enter the queue without a
/// digest: only a job of the same size to the same destination can be a duplicate, so intake hashes a file, and
/// the waiting jobs of its size, only when there is one.
///
/// The hashing is done before the insert's transaction (`takeDigestsForComparison`), never inside it: a file may
/// take seconds to read, and the queue's write lock is the scheduler's too. The transaction checks that no digest
/// it needs is missing (`checkNoneOfItsSize`, `withDigests`); if one is, intake takes the digests and starts
/// over. Its first try takes none: most intakes need none, and pay only those checks.
enum ContentIdentity {
    /// How many times intake takes the digests and tries the insert again while jobs of the same size keep coming.
    static let attempts = 3

    /// Thrown inside the insert's transaction when a job of the same size came after the digests were taken.
    struct QueueChanged: Error {}

    /// What `takeDigestsForComparison` found about the queue's jobs without a digest: the digests it took (the
    /// insert's transaction records them), and the jobs whose file changed or went (they keep none).
    struct Examined {
        var digests: [JobID: String] = [:]
        var unreadable: Set<JobID> = []

        func hasSeen(_ id: JobID) -> Bool { digests[id] != nil || unreadable.contains(id) }
    }

    /// Takes the digests the insert of `jobs` compares, outside any transaction: a job's own when it has none
    /// and another job of its size goes to its destination (in the queue or in the batch), and those of the
    /// queue's jobs of that size without one (the insert records them, so each is hashed once). Another job's
    /// file that changed or cannot be read gets no digest: it is nobody's duplicate, and its upload fails on it.
    static func takeDigestsForComparison(_ jobs: inout [Job], store: QueueStore, databasePath: String)
        throws(UploadQueueError) -> Examined
    {
        struct Key: Hashable {
            let destination: String
            let size: Int64
        }
        var inBatch: [Key: Int] = [:]
        for job in jobs { inBatch[Key(destination: job.destination, size: job.size), default: 0] += 1 }
        let snapshot = jobs
        let found: [(sameSize: Bool, unhashed: [Job])]
        do {
            found = try store.writer.read { db in
                try snapshot.map { job in
                    let unhashed = try Job.fetchAll(db.cachedStatement(sql: """
                        SELECT * FROM job INDEXED BY job_identity WHERE destination = ? AND size = ? AND sha256 = ''
                        AND NOT (state = 'failed' AND permanent = 1)
                        """), arguments: [job.destination, job.size])
                    guard job.sha256.isEmpty, unhashed.isEmpty else { return (!unhashed.isEmpty, unhashed) }
                    return (try sameSizeExists(job, in: db), [])
                }
            }
        } catch {
            throw .database("cannot read the queue", error, job: jobs.first?.id, path: jobs.first?.sourcePath,
                            databasePath: databasePath)
        }
        var examined = Examined()
        for index in jobs.indices {
            let (sameSize, unhashed) = found[index]
            let key = Key(destination: jobs[index].destination, size: jobs[index].size)
            if jobs[index].sha256.isEmpty, sameSize || inBatch[key, default: 0] > 1 {
                guard let sha256 = try digest(of: jobs[index]) else {
                    throw UploadQueueError(.sourceUnstable, "the file changed or went away while it was read",
                                           path: jobs[index].sourcePath)
                }
                jobs[index].sha256 = sha256
            }
            for other in unhashed where !examined.hasSeen(other.id) {
                // Another job's file: its trouble is its own, not this intake's.
                if let sha256 = (try? digest(of: other)) ?? nil {
                    examined.digests[other.id] = sha256
                } else {
                    examined.unreadable.insert(other.id)
                }
            }
        }
        return examined
    }

    /// Inside the insert's transaction, for a job without a digest: throws `QueueChanged` when a live job of its
    /// size came since the digests were taken.
    static func checkNoneOfItsSize(_ job: Job, in db: Database) throws {
        if try sameSizeExists(job, in: db) { throw QueueChanged() }
    }

    /// Inside the insert's transaction, for a job with a digest, given the live jobs of its size that have its
    /// digest or none: those with a digest, the ones taken for them recorded now. Throws `QueueChanged` when one
    /// without a digest came since the digests were taken.
    static func withDigests(_ candidates: [Job], examined: Examined, in db: Database) throws -> [Job] {
        try candidates.compactMap { candidate in
            guard candidate.sha256.isEmpty else { return candidate }
            guard let sha256 = examined.digests[candidate.id] else {
                if examined.unreadable.contains(candidate.id) { return nil }
                throw QueueChanged()
            }
            try QueueStore.recordDigest(candidate.id, sha256: sha256, in: db)
            var hashed = candidate
            hashed.sha256 = sha256
            return hashed
        }
    }

    /// Whether a live job of `job`'s size goes to its destination.
    private static func sameSizeExists(_ job: Job, in db: Database) throws -> Bool {
        try Bool.fetchOne(db.cachedStatement(sql: """
            SELECT EXISTS (SELECT 1 FROM job INDEXED BY job_identity WHERE destination = ? AND size = ?
            AND NOT (state = 'failed' AND permanent = 1))
            """), arguments: [job.destination, job.size]) ?? false
    }

    /// The digest of the job's file (at its source until a `move` intake completes, or already in `blobs/` when
    /// it is being completed), or nil when the file is gone or is no longer the one enqueued (size, inode or mtime
    /// moved, or it changed while it was read).
    static func digest(of job: Job) throws(UploadQueueError) -> String? {
        for path in job.intakeComplete ? [job.file] : [job.sourcePath, job.file] {
            let descriptor = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW)
            guard descriptor >= 0 else { continue }
            defer { close(descriptor) }
            return try digest(of: job, descriptor: descriptor, path: path)
        }
        return nil
    }

    private static func digest(of job: Job, descriptor: Int32, path: String) throws(UploadQueueError) -> String? {
        let before = try FileFingerprint.of(descriptor: descriptor, path: path)
        guard before.size == job.size, before.inode == job.inode, before.device == job.device,
              before.modifiedNanoseconds == job.modifiedNanoseconds else { return nil }
        let sha256 = try SHA256Digest.ofFile(descriptor: descriptor, path: path, size: job.size, job: job.id)
        let after = try FileFingerprint.of(descriptor: descriptor, path: path)
        return after.contentMayDiffer(from: before) ? nil : sha256
    }
}
