import CUploadQueueSystem

/// The daemon's settings of glibc's allocator: each thread keeps up to 1 MiB of what it freed, instead of giving
/// it back to the kernel at once and faulting it in again on the next allocation.
///
/// Why: with glibc's defaults, an arena whose free top grows past a (moving) threshold gives it back with
/// `madvise`, and every such call flushes the TLB of every core. A drain of small files made about two a file
/// (SQLite's statement journals, libcurl's buffers, finished tasks: 562 for 300 files, 7 with these settings);
/// fixed thresholds of 1 MiB took a tenth off the drain's wall time and CPU. What it costs is bounded: at most
/// 1 MiB kept free per arena (glibc makes at most eight per core), and allocations of 1 MiB or more still come from
/// `mmap` and go back at once.
/// For the daemon alone: a process embedding the library keeps its own allocator's settings.
package enum AllocatorSettings {
    /// The threshold, in bytes, for both.
    package static let keptFreePerArena: Int32 = 1 << 20

    /// Applies them; returns what could not be done, to be logged (the daemon runs on with glibc's defaults).
    package static func apply() -> String? {
        uploadq_keep_freed_memory(keptFreePerArena) == 0 ? nil : "mallopt refused M_TRIM_THRESHOLD or M_MMAP_THRESHOLD"
    }
}
