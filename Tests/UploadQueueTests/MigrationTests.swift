import Foundation
import GRDB
import Testing
@testable import UploadQueue

/// The migrations are frozen (plain SQL, no application types), so a later change of the app cannot change what an
/// old one did. What the running code still names in them (index conditions, the names of states, consumers and
/// events) is checked here against what they wrote: a change on either side alone fails.
@Suite struct MigrationTests {
    /// SQL with its runs of white space made one space.
    static func normalized(_ sql: String) -> String {
        sql.split(whereSeparator: \.isWhitespace).joined(separator: " ")
    }

    @Test("the claim queries' index conditions are the ones the frozen migrations wrote")
    func claimIndexes() throws {
        let sandbox = try Sandbox()
        try FileManager.default.createDirectory(atPath: sandbox.state, withIntermediateDirectories: true)
        let store = QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
        let indexes = try store.writer.read { db in
            Dictionary(uniqueKeysWithValues: try Row.fetchAll(db, sql: "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")
                .map { ($0["name"] as String, Self.normalized($0["sql"])) })
        }
        for index in QueueDatabase.ClaimIndex.allCases {
            let sql = try #require(indexes[index.rawValue], "\(index.rawValue) is missing")
            #expect(sql.hasSuffix("WHERE " + Self.normalized(index.condition)), "\(sql)")
        }
        let exempt = try #require(indexes[QueueDatabase.budgetExemptIndex])
        #expect(exempt.hasSuffix("WHERE " + Self.normalized(QueueDatabase.budgetExemptCondition)), "\(exempt)")
        #expect(indexes["outbox_due"]?.hasSuffix("WHERE state = '\(OutboxState.pending.rawValue)'") == true)
    }

    @Test("the names the frozen outbox and event-log triggers wrote are still the app's")
    func namesInTriggers() {
        #expect(OutboxState.pending.rawValue == "pending" && OutboxState.done.rawValue == "done")
        #expect(JobState.uploaded.rawValue == "uploaded" && JobState.failed.rawValue == "failed")
        #expect(JobState.uploading.rawValue == "uploading" && JobState.pending.rawValue == "pending")
        #expect(OutboxConsumer.patch.description == "patch" && OutboxConsumer.hook(.failed).description == "hook:failed")
        #expect(HookEvent.uploaded.rawValue == "uploaded" && HookEvent.failed.rawValue == "failed")
        #expect(PatchState.none.rawValue == "none")
        #expect(QueueDatabase.runnableCondition
                == "state = 'pending' AND intake_complete = 1 AND cancel_requested = 0 AND blocked_by IS NULL")
        #expect(PrerequisiteKind.lane.rawValue == "lane" && PrerequisiteKind.after.rawValue == "after")
    }

    @Test("v7's own reading of a job's on_metered agrees with the policy the app reads today")
    func meteredBelowAsV7ReadIt() {
        let texts = ["defer", "allow", "always", "allow-below:1MiB", "allow-below:1.5MB", "allow-below:512",
                     "allow-below: 2 GiB", "allow-below:10KB", "allow-below:3B", "allow-below:-1", "allow-below:", "later",
                     "allow-below:9223372036854775807", "allow-below:9007199254740993", "allow-below:1.5", "allow-below:1e6",
                     "allow-below:0x10", "allow-below:infMB", "allow-below:nanB"]
        for text in texts {
            #expect(QueueDatabase.v7MeteredBelow(text) == MeteredPolicy(text)?.sizeLimit, "\(text)")
        }
    }
}
