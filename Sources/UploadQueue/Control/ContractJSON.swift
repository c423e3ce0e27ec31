import Foundation

/// The contract's JSON shapes, built from library values (keys fixed by CONTRACT.md; more may be added): what the
/// CLI's `--json` prints and what the control API answers, one shape for both.
package enum ContractJSON {
    package static func rfc3339(_ date: Date?) -> Any {
        date?.rfc3339 ?? NSNull()
    }

    /// A page of jobs, `{"jobs": [...], "next": ...}`, written job by job: the page is held once as text, never
    /// also as one tree of objects and the text of the whole (a page of about 1 MiB costs a megabyte, not three).
    package static func jobsPage(_ jobs: [Job], next: JobID?) -> Data {
        var page = Data("{\"jobs\":[".utf8)
        for (index, listed) in jobs.enumerated() {
            if index > 0 { page.append(UInt8(ascii: ",")) }
            let text = (try? JSONSerialization.data(withJSONObject: job(listed), options: [.sortedKeys, .withoutEscapingSlashes]))
                ?? Data("{}".utf8)
            page.append(escapingControls(text))
        }
        // Escaped as any text: an id read back from a damaged row may hold anything.
        page.append(contentsOf: "],\"next\":\(next.map { SafeText.jsonString($0.rawValue) } ?? "null")}".utf8)
        return page
    }

    package static func job(_ job: Job) -> [String: Any] {
        [
            "id": job.id.rawValue,
            "state": job.state.rawValue,
            "waiting_reason": job.waitingReason?.rawValue ?? NSNull(),
            // Everything that holds it, strongest first (`waiting_reason` is the first).
            "waiting_reasons": job.waitingHolds.map { hold -> [String: Any] in
                ["reason": hold.reason.rawValue, "until": rfc3339(hold.until), "detail": hold.detail ?? NSNull(),
                 "text": hold.text(timeZone: .init(identifier: "UTC")!)]
            },
            "file": job.file,
            "source_path": job.sourcePath,
            "original_name": job.originalName,
            "mode": job.mode.rawValue,
            "size": job.size,
            // Null until the upload for a destination that hashes while sending.
            "sha256": job.sha256.isEmpty ? NSNull() : job.sha256,
            "content_type": job.contentType,
            "destination": job.destination,
            "priority": job.priority,
            // Shown, not used: credentials in its query (a presigned URL) are masked. The library has it whole.
            "remote_url": job.remoteURL.map(URLRedaction.redact) ?? NSNull(),
            "bytes_confirmed": job.bytesConfirmed,
            "attempts": job.attempts,
            "last_error": job.lastError ?? NSNull(),
            "permanent": job.permanent,
            "next_attempt_at": rfc3339(job.nextAttemptAt),
            "created_at": rfc3339(job.createdAt),
            "updated_at": rfc3339(job.updatedAt),
            "meta": job.meta,
            "patch_state": job.patchState.rawValue,
            "on_metered": job.onMetered ?? NSNull(),
            "source_after_upload": job.sourceAfterUpload ?? NSNull(),
            "lane": job.lane ?? NSNull(),
            "lane_seq": job.laneSequence ?? NSNull(),
            "after_mode": job.afterMode?.rawValue ?? NSNull(),
            "blocked_by": job.blockedBy?.rawValue ?? NSNull(),
            "group": job.group ?? NSNull(),
        ]
    }

    /// A group as `GET /v1/groups/{name}` gives it: its state and tallies, and once it is uploaded its members
    /// with their remote URLs (masked as everywhere outside the library: the hook and the patch get them whole).
    package static func group(_ group: JobGroup) -> [String: Any] {
        [
            "name": group.name,
            "owner_uid": group.ownerUID.map { Int($0) } ?? NSNull(),
            "state": group.state.rawValue,
            "members": group.members,
            "remaining": group.remaining,
            "failed": group.failed,
            "failing_job": group.failingJob?.rawValue ?? NSNull(),
            "created_at": rfc3339(group.createdAt),
            "closed_at": rfc3339(group.closedAt),
            "completed_at": rfc3339(group.completedAt),
            "acknowledged_at": rfc3339(group.acknowledgedAt),
            "completion": group.completion.map { member -> [String: Any] in
                ["id": member.jobID.rawValue, "name": member.originalName, "size": member.size, "sha256": member.sha256,
                 "remote_url": URLRedaction.redact(member.remoteURL)]
            },
        ]
    }

    /// A lane as `GET /v1/lanes` gives it.
    package static func lane(_ lane: LaneStatus) -> [String: Any] {
        [
            "name": lane.name,
            "owner_uid": lane.ownerUID.map { Int($0) } ?? NSNull(),
            "queued": lane.queued,
            "head": lane.head?.rawValue ?? NSNull(),
            "head_state": lane.headState?.rawValue ?? NSNull(),
            "head_since": rfc3339(lane.headSince),
            "blocked_by": lane.blockedBy?.rawValue ?? NSNull(),
            "blocked_since": rfc3339(lane.blockedSince),
            "reason": lane.reason ?? NSNull(),
            "on_failure": lane.onFailure.rawValue,
        ]
    }

    package static func attempt(_ attempt: JobAttempt) -> [String: Any] {
        [
            "number": attempt.number,
            "started_at": rfc3339(attempt.startedAt),
            "ended_at": rfc3339(attempt.endedAt),
            "start_offset": attempt.startOffset,
            "end_offset": attempt.endOffset ?? NSNull(),
            "outcome": attempt.outcome ?? NSNull(),
            "error": attempt.error ?? NSNull(),
        ]
    }

    package static func status(_ status: QueueStatus) -> [String: Any] {
        let summary = status.summary
        var daemon: [String: Any] = ["running": status.runnerPID != nil]
        daemon["pid"] = status.runnerPID.map { Int($0) } ?? NSNull()
        return [
            "daemon": daemon,
            "link": link(status.link),
            "traffic": [
                "by_class": status.trafficByClass,
                "by_destination": status.traffic,
            ] as [String: Any],
            "counts": Dictionary(uniqueKeysWithValues: JobState.allCases.map { ($0.rawValue, summary.counts[$0] ?? 0) }),
            "bytes": Dictionary(uniqueKeysWithValues: JobState.allCases.map { ($0.rawValue, summary.bytes[$0] ?? 0) }),
            "waiting": Dictionary(uniqueKeysWithValues: summary.waiting.map { ($0.key.rawValue, $0.value) }),
            "failed_permanent": summary.permanentFailures,
            "quota_full": summary.fullDestinations.sorted(),
            "unverified_answers": summary.unverifiedAnswers,
            "request_limits": status.requestLimits.mapValues { limit -> [String: Any] in
                ["chunk_cap": limit.chunkCap ?? NSNull(), "refused_at": limit.refusedAt ?? NSNull()] as [String: Any]
            },
            "active": summary.active.map { transfer -> [String: Any] in
                [
                    "id": transfer.id.rawValue, "file": transfer.file, "original_name": transfer.originalName,
                    "destination": transfer.destination, "bytes_confirmed": transfer.bytesConfirmed,
                    "size": transfer.size, "rate_bytes_per_s": transfer.rateBytesPerSecond,
                ]
            },
            "next_attempt_at": rfc3339(summary.nextAttemptAt),
            "releases": ["owed": summary.owedReleases, "error": summary.releaseError ?? NSNull()] as [String: Any],
            "disk": status.disk.map(disk) ?? NSNull(),
            "power": status.power.map { power -> [String: Any] in
                ["external": power.state.isExternal, "battery_percent": power.state.batteryPercent ?? NSNull(),
                 "source": power.state.source, "requirements": power.requirements]
            } ?? NSNull(),
            "windows": status.windows.mapValues { window -> [String: Any] in
                ["open": window.open, "until": rfc3339(window.until), "windows": window.windows]
            },
            "metered_budget": status.meteredBudget.map { budget -> [String: Any] in
                ["budget": budget.budget, "bytes": budget.bytes, "used": budget.used, "left": budget.left,
                 "resets_at": rfc3339(budget.resetsAt)]
            } ?? NSNull(),
            "patches": [
                "pending": summary.patches[.pending] ?? 0,
                "done": summary.patches[.done] ?? 0,
                "failed": summary.patches[.failed] ?? 0,
            ],
            "hooks": Dictionary(uniqueKeysWithValues: status.hooks.map { event, counts in
                (event.key, ["pending": counts[.pending] ?? 0, "done": counts[.done] ?? 0, "failed": counts[.failed] ?? 0])
            }),
            "lanes": ["active": status.lanes.active, "blocked": status.lanes.blocked,
                      "oldest_head_age_seconds": Int(status.lanes.oldestHeadAge)],
            "spool": ["held": status.spoolHeldFiles, "files": status.spoolHolds.map(spoolHold)] as [String: Any],
        ]
    }

    /// A spool file held where it is (`GET /v1/spool`, the status's `spool.files`).
    package static func spoolHold(_ hold: QueueStatus.SpoolHold) -> [String: Any] {
        ["name": hold.name, "owner_uid": Int(hold.ownerUID), "reason": hold.reason.rawValue, "message": hold.message,
         "since": rfc3339(hold.since)]
    }

    /// The queue's disk: room, the `min_free_space` floor, whether the intake is paused and why.
    package static func disk(_ disk: DiskStatus) -> [String: Any] {
        [
            "path": disk.path,
            "available_bytes": disk.space.available,
            "total_bytes": disk.space.total,
            "min_free_bytes": disk.minimum,
            "intake_paused": disk.intakePaused,
            "reason": disk.low.map { String(describing: $0) } ?? NSNull(),
        ]
    }

    /// A prune's report, as `uploadq prune --json` prints it and `POST /v1/prune` answers.
    package static func prune(_ report: PruneReport, dryRun: Bool) -> [String: Any] {
        [
            "dry_run": dryRun, "jobs": report.jobs, "attempts": report.attempts, "patches": report.patches,
            "completions": report.completions, "cancelled_files": report.cancelledFiles,
            "database_bytes_before": report.databaseBytesBefore, "database_bytes_after": report.databaseBytesAfter,
        ]
    }

    /// Whether a JSON value is a boolean (not the number 0 or 1, which Foundation bridges to `Bool` too).
    package static func isBoolean(_ value: Any) -> Bool {
        if type(of: value) == Bool.self { return true }
        guard let number = value as? NSNumber else { return false }
        return String(cString: number.objCType) == "c"
    }

    /// The link's class, who decided, the interface, NetworkManager's value and why.
    package static func link(_ link: LinkStatus) -> [String: Any] {
        [
            "class": link.linkClass.rawValue,
            "source": link.source.rawValue,
            "interface": link.interface ?? NSNull(),
            "networkmanager": link.networkManager ?? NSNull(),
            "reason": link.reason ?? NSNull(),
        ]
    }

    /// Prints one JSON document on stdout. Besides the C0 controls JSON escapes anyway, DEL, the C1 controls and
    /// the bidirectional formatting characters are written as `\uXXXX` escapes: a terminal showing the document
    /// shows them as text.
    package static func print(_ value: Any) throws {
        let data = try JSONSerialization.data(withJSONObject: value, options: [.sortedKeys, .withoutEscapingSlashes])
        FileHandle.standardOutput.write(escapingControls(data))
        FileHandle.standardOutput.write(Data("\n".utf8))
    }

    /// `escapingControls` of UTF-8 JSON text: the text itself, not copied, when it is printable ASCII throughout
    /// (a page of about 1 MiB is then held once, not three times).
    package static func escapingControls(_ json: Data) -> Data {
        let printable = json.withUnsafeBytes { bytes in bytes.allSatisfy { $0 >= 0x20 && $0 < 0x7f } }
        return printable ? json : Data(escapingControls(String(decoding: json, as: UTF8.self)).utf8)
    }

    /// JSON text with the characters `SafeText` escapes written as `\uXXXX` (they occur only inside strings: the
    /// rest of a JSON document is ASCII).
    package static func escapingControls(_ json: String) -> String {
        guard json.unicodeScalars.contains(where: SafeText.needsEscape) else { return json }
        var out = String.UnicodeScalarView()
        for scalar in json.unicodeScalars {
            if SafeText.needsEscape(scalar) {
                out.append(contentsOf: String(format: "\\u%04x", scalar.value).unicodeScalars)
            } else {
                out.append(scalar)
            }
        }
        return String(out)
    }
}
