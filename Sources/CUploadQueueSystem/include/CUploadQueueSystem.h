#ifndef CUPLOADQUEUESYSTEM_H
#define CUPLOADQUEUESYSTEM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <spawn.h>

/// renameat2(2) with RENAME_NOREPLACE: Swift's Glibc module does not export it (it needs _GNU_SOURCE).
int uploadq_rename_noreplace(int olddirfd, const char *oldpath, int newdirfd, const char *newpath);

/// inotify mask bits, exposed as functions because they are macros.
uint32_t uploadq_in_close_write(void);
uint32_t uploadq_in_moved_to(void);
uint32_t uploadq_in_create(void);
uint32_t uploadq_in_modify(void);
uint32_t uploadq_in_delete_self(void);
uint32_t uploadq_in_move_self(void);
uint32_t uploadq_in_onlydir(void);
uint32_t uploadq_in_q_overflow(void);
uint32_t uploadq_in_ignored(void);
uint32_t uploadq_in_isdir(void);

/// One record of an inotify read buffer, decoded (inotify_event has a flexible array member Swift cannot read).
typedef struct {
    int32_t wd;
    uint32_t mask;
    const char *name;   // NUL-terminated, empty when the event concerns the watched directory itself
    size_t record_length;
} uploadq_inotify_record;

/// Decodes the record at `offset` of a buffer filled by read(2) on an inotify descriptor; returns 0, or -1 when
/// the remaining bytes do not hold a whole record.
int uploadq_inotify_record_at(const void *buffer, size_t length, size_t offset, uploadq_inotify_record *out);

/// Incremental SHA-256 over libcrypto's EVP interface (opaque handle, so no OpenSSL types reach Swift).
void *uploadq_sha256_new(void);
int uploadq_sha256_update(void *context, const void *data, size_t length);
/// Writes 32 bytes to `digest` and frees the context.
int uploadq_sha256_finish(void *context, unsigned char *digest);
void uploadq_sha256_free(void *context);

/// Incremental SHA-1 (tus `Upload-Checksum`); update and free with the SHA-256 calls, finish with this one.
void *uploadq_sha1_new(void);
/// Writes 20 bytes to `digest` and frees the context.
int uploadq_sha1_finish(void *context, unsigned char *digest);

/// Incremental MD5 (S3 `Content-MD5` and part ETags); update and free with the SHA-256 calls, finish with this one.
void *uploadq_md5_new(void);
/// Writes 16 bytes to `digest` and frees the context.
int uploadq_md5_finish(void *context, unsigned char *digest);

/// Whether some process has `path` open for writing, asked the way Samba does: a read lease (F_SETLEASE) is
/// refused while a writer holds the file. 1: open for writing, 0: not, -1: cannot tell (not the owner, no
/// CAP_LEASE, or a file system without leases).
int uploadq_open_for_writing(const char *path);

/// Whether `path` lies on a network or FUSE file system (NFS, SMB/CIFS, FUSE, 9p, Ceph, AFS): 1 or 0; -1 when
/// statfs fails.
int uploadq_is_network_fs(const char *path);

/// `uploadq_is_network_fs` of the file open as `fd`.
int uploadq_is_network_fs_fd(int fd);

/// Looks through /proc for a process holding `path` open for writing, for when leases give no answer: 1 when one
/// does, 0 when none does and every process could be looked at, 2 when none was found but some processes (other
/// users') could not be looked at, -1 when `path` or /proc cannot be read.
int uploadq_writer_scan(const char *path);

/// Marks the process not dumpable (PR_SET_DUMPABLE 0): no core dump, and no other process of the same user may
/// ptrace it or read its memory; 0 on success.
int uploadq_make_undumpable(void);

/// glibc's allocator keeps up to `bytes` freed at the top of each arena, and serves allocations below `bytes` from
/// the arenas rather than from mmap (M_TRIM_THRESHOLD and M_MMAP_THRESHOLD, fixed); 0 on success.
int uploadq_keep_freed_memory(int bytes);

/// PR_GET_DUMPABLE: 1 when dumpable, 0 when not.
int uploadq_is_dumpable(void);

/// Adds to `actions` the closing of every descriptor from `lowest` up in the spawned program
/// (posix_spawn_file_actions_addclosefrom_np, glibc 2.34); 0 on success.
int uploadq_spawn_close_from(posix_spawn_file_actions_t *actions, int lowest);

/// Write-behind for a long sequential write: starts writing back the `length` bytes at `offset` just written, and
/// waits for the window before it, so the file keeps at most two windows of dirty pages (and another file's fsync
/// never waits behind gigabytes of it). 0 on success.
int uploadq_write_behind(int fd, long long offset, long long length);

/// Clears the calling thread's ambient capabilities (the unit's `CAP_LEASE`), so a program it spawns next gets
/// none: a hook or a token program has no use for a capability of the daemon's. 0 on success.
int uploadq_clear_ambient_capabilities(void);

/// PR_SET_CHILD_SUBREAPER: the descendants of this process's children that lose their parent (a helper that called
/// setsid and left) become its children instead of init's, so it can end them. 0 on success.
int uploadq_become_subreaper(void);

/// syncfs(2): flushes the file system holding `fd` (one flush for a batch of new files instead of one fsync each).
int uploadq_syncfs(int fd);

/// A non-blocking NETLINK_ROUTE socket subscribed to link, address and route changes (IPv4 and IPv6), so the link
/// monitor hears when an interface or the default route comes or goes; -1 with errno set when it cannot be made.
int uploadq_netlink_route_socket(void);

/// `struct ucred`, the answer of getsockopt(SO_PEERCRED): Swift's Glibc module does not export it (it needs
/// _GNU_SOURCE). Same layout: the kernel fills it in.
struct uploadq_peer_credentials {
    pid_t pid;
    uid_t uid;
    gid_t gid;
};

/// SO_PEERCRED's option number, a macro under _GNU_SOURCE.
int uploadq_so_peercred(void);

/// The answer of getsockopt(SO_PEERGROUPS): the peer's supplementary groups, in ascending order (the kernel keeps
/// them sorted), the rest of the array zero. A peer with more groups than fit gets ERANGE.
struct uploadq_peer_groups {
    gid_t groups[256];
};

/// SO_PEERGROUPS's option number (Linux 4.13).
int uploadq_so_peergroups(void);

/// Whether the file open as `fd` lies on a pseudo file system whose files are not data (proc, sysfs, debugfs,
/// tracefs, securityfs, cgroup, bpf, configfs, efivarfs, pstore, selinuxfs, and the like): 1 or 0; -1 when
/// fstatfs fails. Such a "regular" file can say it is empty and read for ever, or hold what its reader alone may see.
int uploadq_is_pseudo_fs(int fd);

/// Opens `path` (absolute) for reading the way user `uid` (group `gid`, supplementary `groups`) would reach it:
/// each directory on the way must let that user search it, and the file must be one it may read, by the mode bits
/// and POSIX ACLs the kernel would apply; symbolic links on the way are followed (at most 40), a final one is not.
/// Every step holds the directory it checked, so nothing swapped in between is reached, and each mount entered is
/// looked at before anything on it: a network or FUSE file system is refused without a request to its server (on
/// Linux 5.8 and later, which give a descriptor's mount id; before, it is asked its type).
/// `uncertain` says which groups not listed the user may be in after all (UPLOADQ_GROUPS_*): such a group grants
/// only what both being in it and not being in it would. The descriptor (O_RDONLY | O_NONBLOCK | O_NOCTTY |
/// O_CLOEXEC), or -1 with errno: EACCES (that user may not reach or read it), ELOOP (the file is a symbolic link,
/// or too many on the way), EREMOTE (the way enters a network or FUSE file system), ENOENT, ENOTDIR, or the
/// error of a step.
int uploadq_open_as_user(const char *path, uid_t uid, gid_t gid, const gid_t *groups, int group_count,
                         int uncertain);

/// uploadq_open_as_user's `uncertain`: the groups listed are all the user's.
#define UPLOADQ_GROUPS_EXACT 0
/// The user may be in group 0 too (SO_PEERGROUPS answers zeros alike for none and for group 0 alone).
#define UPLOADQ_GROUP_ZERO_UNKNOWN 1
/// The user may be in any group (it has more than SO_PEERGROUPS could answer).
#define UPLOADQ_GROUPS_UNKNOWN 2

/// Whether the calling thread may block (on SQLite, an fsync): 1 on the threads uploadq runs blocking work on
/// (an actor's own thread, the blocking-work queues while they run it), 0 elsewhere. A thread-local flag.
int uploadq_thread_may_block(void);

/// Sets the calling thread's flag (`uploadq_thread_may_block`) and returns what it was.
int uploadq_thread_set_may_block(int value);

/// The name of the execution context the calling thread is (a thread uploadq made names itself with
/// `uploadq_thread_set_context`), or NULL. Thread-local, at most 31 bytes.
const char *uploadq_thread_context(void);

/// Names the calling thread's execution context (copied, cut at 31 bytes), for `uploadq_thread_context`.
void uploadq_thread_set_context(const char *name);

/// HMAC-SHA256 of `data` under `key` (SigV4 signing keys and signatures); writes 32 bytes to `mac`, returns 0.
int uploadq_hmac_sha256(const void *key, size_t key_length, const void *data, size_t data_length, unsigned char *mac);

#endif
