import Foundation

/// The queue's state in Prometheus text format (0.0.4): jobs and bytes by state, waiting reasons, bytes sent per
/// destination and link class, transfer rate, failed attempts, open circuits, patches, owed
/// releases, the queue's disk and the link class.
///
/// The daemon rewrites `[metrics] textfile` with it (atomically: temporary file, fsync, rename) for
/// node_exporter's textfile collector; `uploadq status --prometheus` prints it once.
package enum PrometheusText {
    /// The exposition for one status.
    package static func render(_ status: QueueStatus) -> String {
        var out = ""
        func family(_ name: String, _ type: String, _ help: String, _ samples: [(labels: [(String, String)], value: Int64)]) {
            out += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
            for sample in samples {
                let labels = sample.labels.map { "\($0.0)=\"\(escape($0.1))\"" }.joined(separator: ",")
                out += name + (labels.isEmpty ? "" : "{\(labels)}") + " \(sample.value)\n"
            }
        }
        let summary = status.summary
        family("uploadq_up", "gauge", "1 while a process runs the queue's transfers.",
               [([], status.runnerPID == nil ? 0 : 1)])
        family("uploadq_jobs", "gauge", "Jobs by state.",
               JobState.allCases.map { ([("state", $0.rawValue)], Int64(summary.counts[$0] ?? 0)) })
        family("uploadq_job_bytes", "gauge", "Size of the jobs in each state, in bytes.",
               JobState.allCases.map { ([("state", $0.rawValue)], summary.bytes[$0] ?? 0) })
        family("uploadq_waiting_jobs", "gauge", "Pending jobs by the reason they wait.",
               WaitingReason.allCases.map { ([("reason", $0.rawValue)], Int64(summary.waiting[$0] ?? 0)) })
        family("uploadq_failed_permanently_jobs", "gauge", "Failed jobs that need a person.",
               [([], Int64(summary.permanentFailures))])
        family("uploadq_sent_bytes_total", "counter", "Request-body bytes sent, by destination and link class.",
               status.traffic.sorted { $0.key < $1.key }.flatMap { destination, classes in
                   classes.sorted { $0.key < $1.key }.map { ([("destination", destination), ("link_class", $0.key)], $0.value) }
               })
        family("uploadq_active_transfers", "gauge", "Transfers running now.", [([], Int64(summary.active.count))])
        family("uploadq_transfer_rate_bytes_per_second", "gauge", "Sum of the running transfers' rates.",
               [([], summary.active.reduce(0) { $0 + $1.rateBytesPerSecond })])
        family("uploadq_failed_attempts", "gauge", "Failed attempts of the jobs in the queue (retried or permanent).",
               [([], Int64(summary.failedAttempts))])
        family("uploadq_circuit_open", "gauge", "1 for a destination whose circuit is open (its jobs wait).",
               summary.openCircuits.sorted().map { ([("destination", $0)], 1) })
        family("uploadq_request_chunk_cap_bytes", "gauge",
               "The largest request body chunked uploads send to a destination, learnt from HTTP 413.",
               status.requestLimits.sorted { $0.key < $1.key }.compactMap { name, limit in
                   limit.chunkCap.map { ([("destination", name)], $0) }
               })
        family("uploadq_quota_full", "gauge", "1 for a destination whose storage is full (its jobs wait as quota-full).",
               summary.fullDestinations.sorted().map { ([("destination", $0)], 1) })
        family("uploadq_unverified_answer", "gauge",
               "1 for a destination whose answers proved nothing, a captive portal or a proxy (its jobs wait).",
               summary.unverifiedAnswers.keys.sorted().map { ([("destination", $0)], 1) })
        family("uploadq_lanes_active", "gauge", "Lanes with jobs pending, uploading, or failed and holding them.",
               [([], Int64(status.lanes.active))])
        family("uploadq_lanes_blocked", "gauge", "Lanes a failed job holds (uploadq lanes says which, and why).",
               [([], Int64(status.lanes.blocked))])
        family("uploadq_lane_head_age_seconds", "gauge",
               "How long the oldest head of a lane with work has been at its lane's front (0: no lane has work).",
               [([], Int64(status.lanes.oldestHeadAge))])
        family("uploadq_patches", "gauge", "Metadata patches by state.",
               PatchState.allCases.filter { $0 != .none }.map { ([("state", $0.rawValue)], Int64(summary.patches[$0] ?? 0)) })
        if !status.hooks.isEmpty {
            family("uploadq_hooks", "gauge", "Hook runs by event and state (pending, done, failed for good).",
                   HookEvent.allCases.flatMap { event in
                       [OutboxState.pending, .done, .failed].map { state in
                           ([("event", event.key), ("state", state.rawValue)], Int64(status.hooks[event]?[state] ?? 0))
                       }
                   })
        }
        family("uploadq_owed_releases", "gauge", "Uploaded copies whose release ([retention]) is still owed.",
               [([], Int64(summary.owedReleases))])
        if let disk = status.disk {
            family("uploadq_disk_available_bytes", "gauge", "Bytes free on the queue's disk.", [([], disk.space.available)])
            family("uploadq_disk_min_free_bytes", "gauge", "[limits] min_free_space in bytes.", [([], disk.minimum)])
            family("uploadq_intake_paused", "gauge", "1 while the intake waits for room on the queue's disk.",
                   [([], disk.intakePaused ? 1 : 0)])
        }
        if let budget = status.meteredBudget {
            family("uploadq_metered_budget_bytes", "gauge",
                   "The metered budget of this period ([link] metered_budget): bytes used and left.",
                   [([("state", "used")], budget.used), ([("state", "left")], budget.left)])
        }
        if let power = status.power {
            family("uploadq_power_external", "gauge", "1 while the device runs on external power.",
                   [([], power.state.isExternal ? 1 : 0)])
            if let percent = power.state.batteryPercent {
                family("uploadq_battery_percent", "gauge", "The system battery's charge.", [([], Int64(percent))])
            }
        }
        if !status.windows.isEmpty {
            family("uploadq_window_open", "gauge", "1 for a destination inside its upload windows now.",
                   status.windows.sorted { $0.key < $1.key }.map { ([("destination", $0.key)], $0.value.open ? 1 : 0) })
        }
        family("uploadq_link_class", "gauge", "1 for the class of the link as a whole, 0 for the others.",
               LinkStatus.LinkClass.allCases.map { ([("class", $0.rawValue)], status.link.linkClass == $0 ? 1 : 0) })
        return out
    }

    /// Writes `text` to `path` so that a reader never sees a partial file: a temporary file, fsync, rename. A
    /// failure (a full disk) leaves the previous file as it was and no temporary behind.
    ///
    /// The textfile directory is often shared (group-writable for node_exporter's collectors): the temporary is a
    /// new file of a name no one can guess, created exclusively and never through a link, so a link planted there
    /// cannot make the daemon write any file it can write.
    package static func write(_ text: String, to path: String) throws {
        let directory = (path as NSString).deletingLastPathComponent
        let name = (path as NSString).lastPathComponent
        let temporary = (directory.isEmpty ? "." : directory) + "/.\(name).\(UInt64.random(in: 0...UInt64.max)).tmp"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw UploadQueueError.system("open", path: temporary) }
        do {
            defer { close(descriptor) }
            let failure = Array(text.utf8).withUnsafeBytes { bytes -> UploadQueueError? in
                do throws(UploadQueueError) {
                    try BlobStore.writeAll(descriptor, bytes, at: 0, path: temporary)
                } catch { return error }
                return nil
            }
            if let failure { throw failure }
            guard fsync(descriptor) == 0 else { throw UploadQueueError.system("fsync", path: temporary) }
            guard rename(temporary, path) == 0 else { throw UploadQueueError.system("rename", path: path) }
        } catch {
            unlink(temporary)
            throw error
        }
    }

    /// A label value: backslash, double quote and newline escaped.
    static func escape(_ value: String) -> String {
        value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            .replacingOccurrences(of: "\n", with: "\\n")
    }
}
