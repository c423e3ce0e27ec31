import Foundation
import Testing
@testable import UploadQueue

/// The sweeps that cut at every fsync of a spool intake, one case per layout (one disk, two): apart from
/// `PowerCutTests` so that the two cases run side by side (each on disks of its own), which halves the heavy group's
/// time.
@Suite struct PowerCutSweepTests {
    @Test("a spool file and its sidecar: a cut at any fsync of the intake leaves both in the spool, or the job and neither",
          arguments: [false, true])
    func sidecarLeavesWithItsFile(acrossDisks: Bool) async throws {
        // The power goes instead of the k-th fsync once the daemon runs (the state then is the one a cut right
        // after the fsync before leaves), for every k until the file is uploaded.
        // One disk is armed at a time (each counts its own fsyncs); across disks the sweeps alternate between the
        // state disk (0) and the spool's (1) until each has been swept to its end.
        var counts = [1, 1]
        var finished = [false, !acrossDisks]
        var iterations = 0
        // A bound against a sweep that never ends, not a measure: a fresh queue's start alone takes a commit (an
        // fsync) per migration, and each life a daemon too slow to get anywhere is tried again.
        let bound = 64
        while finished.contains(false), iterations < bound {
            iterations += 1
            let armed = !finished[0] && (finished[1] || iterations % 2 == 1) ? 0 : 1
            let k = counts[armed]
            let work = try PowerCutTests.scratch("sidecar")
            defer { try? FileManager.default.removeItem(atPath: work) }
            let disk = PowerCutDisk(work: work, name: "disk", peer: acrossDisks ? work + "/spool.sock" : nil)
            let spoolDisk = acrossDisks ? PowerCutDisk(work: work, name: "spool", peer: work + "/disk.sock") : disk
            let config = work + "/uploadq.toml"
            try """
                state_dir = "\(disk.mount)/state"
                [spool]
                dir = "\(spoolDisk.mount)/spool"
                destination = "local"
                quiet_period = "100ms"
                network_quiet_period = "100ms"
                sidecar_destinations = ["local", "other"]
                [destinations.local]
                protocol = "file"
                url = "file://\(work)/local"
                [destinations.other]
                protocol = "file"
                url = "file://\(work)/other"
                """.write(toFile: config, atomically: true, encoding: .utf8)
            let disks = acrossDisks ? [disk, spoolDisk] : [disk]
            // The drop, made durable by the dropper before the daemon starts.
            for each in disks { try await each.boot() }
            try FileManager.default.createDirectory(atPath: spoolDisk.mount + "/spool", withIntermediateDirectories: true)
            try PowerCutTests.write(Data(#"{"destination": "other"}"#.utf8), to: spoolDisk.mount + "/spool/photo.jpg.uploadq.json")
            try PowerCutTests.write(Data(repeating: 42, count: 20_000), to: spoolDisk.mount + "/spool/photo.jpg")
            PowerCutTests.syncDirectories([spoolDisk.mount + "/spool", spoolDisk.mount])
            for each in disks { await each.cut() }

            for (index, each) in disks.enumerated() {
                try await each.boot(dieAt: index == armed ? "^(file|dir):(state|spool)" : nil, count: k, before: true)
            }
            try await PowerCutTests.runDaemon(config, limit: .seconds(10)) { disks.contains { $0.isDead } }
            let died = disks.compactMap(\.diedAt).first
            for each in disks { await each.cut() }

            for each in disks { try await each.boot() }
            let spool = (try? FileManager.default.contentsOfDirectory(atPath: spoolDisk.mount + "/spool")) ?? []
            let visible = Set(spool.filter { !$0.hasPrefix(".") })
            let jobs = try await PowerCutTests.jobs(config)
            // No cut and the upload durable: the life ended before the armed disk's k-th fsync. No cut and no
            // upload: the daemon was too slow (a loaded machine) to get there in its time; k is tried again.
            let uploadedInThatLife = jobs.first?["state"] as? String == "uploaded"
            if visible.contains("photo.jpg.uploadq.json") {
                #expect(visible.contains("photo.jpg"), "cut at fsync \(k) (\(died ?? "none")): a sidecar without its file")
            }
            if !visible.contains("photo.jpg") {
                #expect(jobs.count == 1, "cut at fsync \(k) (\(died ?? "none")): the file left the spool, no job took it")
            }
            // Booted once more, with the power on: the file goes where its sidecar said.
            try await PowerCutTests.runDaemon(config) {
                try await PowerCutTests.jobs(config).first?["state"] as? String == "uploaded"
            }
            let final = try await PowerCutTests.jobs(config)
            #expect(final.count == 1 && final.first?["destination"] as? String == "other"
                    && final.first?["state"] as? String == "uploaded",
                    "cut at fsync \(k) (\(died ?? "none")): \(final)")
            let left = ((try? FileManager.default.contentsOfDirectory(atPath: spoolDisk.mount + "/spool")) ?? [])
                .filter { !$0.hasPrefix(".") }
            #expect(left.isEmpty, "cut at fsync \(k) (\(died ?? "none")): left in the spool: \(left)")
            for each in disks { await each.cut() }
            // The upload was over before the armed disk's k-th fsync: each of its fsyncs was cut.
            if died == nil {
                if uploadedInThatLife { finished[armed] = true }
            } else {
                counts[armed] += 1
            }
        }
        #expect(!finished.contains(false), "the sweep did not reach its end in \(bound) lives: \(counts) fsyncs swept")
        #expect(counts[0] > 3 && (!acrossDisks || counts[1] > 1), "too few fsyncs to sweep: \(counts)")
    }
}
