#define _GNU_SOURCE
#include "CUploadQueueSystem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <sys/vfs.h>
#include <sys/xattr.h>
#include <sys/stat.h>
#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <malloc.h>
#include <spawn.h>
#include <signal.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif

int uploadq_rename_noreplace(int olddirfd, const char *oldpath, int newdirfd, const char *newpath) {
#ifdef __linux__
    return (int)syscall(SYS_renameat2, olddirfd, oldpath, newdirfd, newpath, RENAME_NOREPLACE);
#else
    errno = ENOSYS;
    return -1;
#endif
}

uint32_t uploadq_in_close_write(void) { return IN_CLOSE_WRITE; }
uint32_t uploadq_in_moved_to(void) { return IN_MOVED_TO; }
uint32_t uploadq_in_create(void) { return IN_CREATE; }
uint32_t uploadq_in_modify(void) { return IN_MODIFY; }
uint32_t uploadq_in_delete_self(void) { return IN_DELETE_SELF; }
uint32_t uploadq_in_move_self(void) { return IN_MOVE_SELF; }
uint32_t uploadq_in_onlydir(void) { return IN_ONLYDIR; }
uint32_t uploadq_in_q_overflow(void) { return IN_Q_OVERFLOW; }
uint32_t uploadq_in_ignored(void) { return IN_IGNORED; }
uint32_t uploadq_in_isdir(void) { return IN_ISDIR; }

int uploadq_inotify_record_at(const void *buffer, size_t length, size_t offset, uploadq_inotify_record *out) {
    if (offset + sizeof(struct inotify_event) > length) return -1;
    const struct inotify_event *event = (const struct inotify_event *)((const char *)buffer + offset);
    size_t total = sizeof(struct inotify_event) + event->len;
    if (offset + total > length) return -1;
    out->wd = event->wd;
    out->mask = event->mask;
    out->name = event->len > 0 ? event->name : "";
    out->record_length = total;
    return 0;
}

// One EVP digest context behind an opaque pointer, so no OpenSSL type reaches Swift.
static void *digest_new(const EVP_MD *kind) {
    EVP_MD_CTX *context = EVP_MD_CTX_new();
    if (context == NULL) return NULL;
    if (EVP_DigestInit_ex(context, kind, NULL) != 1) {
        EVP_MD_CTX_free(context);
        return NULL;
    }
    return context;
}

static int digest_finish(void *context, unsigned char *digest, unsigned int expected) {
    unsigned int written = 0;
    int ok = EVP_DigestFinal_ex((EVP_MD_CTX *)context, digest, &written);
    EVP_MD_CTX_free((EVP_MD_CTX *)context);
    return (ok == 1 && written == expected) ? 0 : -1;
}

void *uploadq_sha256_new(void) { return digest_new(EVP_sha256()); }

int uploadq_sha256_update(void *context, const void *data, size_t length) {
    return EVP_DigestUpdate((EVP_MD_CTX *)context, data, length) == 1 ? 0 : -1;
}

int uploadq_sha256_finish(void *context, unsigned char *digest) { return digest_finish(context, digest, 32); }

void uploadq_sha256_free(void *context) { EVP_MD_CTX_free((EVP_MD_CTX *)context); }

void *uploadq_sha1_new(void) { return digest_new(EVP_sha1()); }

int uploadq_sha1_finish(void *context, unsigned char *digest) { return digest_finish(context, digest, 20); }

void *uploadq_md5_new(void) { return digest_new(EVP_md5()); }

int uploadq_md5_finish(void *context, unsigned char *digest) { return digest_finish(context, digest, 16); }

int uploadq_hmac_sha256(const void *key, size_t key_length, const void *data, size_t data_length, unsigned char *mac) {
    unsigned int written = 0;
    if (HMAC(EVP_sha256(), key, (int)key_length, data, data_length, mac, &written) == NULL || written != 32) {
        return -1;
    }
    return 0;
}

int uploadq_netlink_route_socket(void) {
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (fd < 0) return -1;
    struct sockaddr_nl address;
    memset(&address, 0, sizeof address);
    address.nl_family = AF_NETLINK;
    address.nl_groups = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_IFADDR | RTMGRP_IPV6_ROUTE;
    if (bind(fd, (struct sockaddr *)&address, sizeof address) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

int uploadq_write_behind(int fd, long long offset, long long length) {
    if (sync_file_range(fd, offset, length, SYNC_FILE_RANGE_WRITE) != 0) return -1;
    if (offset < length) return 0;
    return sync_file_range(fd, offset - length, length,
                           SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
}

int uploadq_clear_ambient_capabilities(void) {
    return prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
}

int uploadq_become_subreaper(void) { return prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); }

// Through libc, not a raw syscall: the power-cut runs (contrib/powercut) interpose it to see the syncfs.
int uploadq_syncfs(int fd) { return syncfs(fd); }

// NFS, SMB, CIFS, SMB2, FUSE, 9p, Ceph, AFS: their files change on other machines too, where neither inotify nor
// leases see the writers.
static int is_network_type(unsigned long type) {
    return type == 0x6969UL || type == 0x517BUL || type == 0xFF534D42UL || type == 0xFE534D42UL ||
        type == 0x65735546UL || type == 0x01021997UL || type == 0x00C36400UL || type == 0x5346414FUL;
}

int uploadq_is_network_fs(const char *path) {
    struct statfs fs;
    if (statfs(path, &fs) != 0) return -1;
    return is_network_type((unsigned long)fs.f_type);
}

int uploadq_is_network_fs_fd(int fd) {
    struct statfs fs;
    if (fstatfs(fd, &fs) != 0) return -1;
    return is_network_type((unsigned long)fs.f_type);
}

int uploadq_open_for_writing(const char *path) {
    // A writer opening the file while we hold the lease makes the kernel signal us (SIGIO, whose default action
    // ends the process): the daemon has no use for SIGIO, so it is ignored.
    static volatile int sigio_ignored = 0;
    if (!sigio_ignored) {
        signal(SIGIO, SIG_IGN);
        sigio_ignored = 1;
    }
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    // Network and FUSE file systems refuse leases for reasons of their own: no answer there.
    struct statfs fs;
    if (fstatfs(fd, &fs) == 0 && is_network_type((unsigned long)fs.f_type)) {
        close(fd);
        return -1;
    }
    int answer;
    if (fcntl(fd, F_SETLEASE, F_RDLCK) == 0) {
        fcntl(fd, F_SETLEASE, F_UNLCK);
        answer = 0;
    } else {
        answer = (errno == EAGAIN || errno == EBUSY) ? 1 : -1;
    }
    close(fd);
    return answer;
}

int uploadq_writer_scan(const char *path) {
    struct stat target;
    if (stat(path, &target) != 0) return -1;
    // Descriptors are matched by the path their link names before anything is asked of the file behind them: a
    // stat of every open file would reach into each file system, and one on a hung NFS server or a stuck FUSE
    // daemon would block the spool for good. (A writer in another mount namespace names another path and is not
    // seen here; the lease sees it.)
    char real[PATH_MAX];
    if (!realpath(path, real)) return -1;
    size_t realLength = strlen(real);
    DIR *proc = opendir("/proc");
    if (!proc) return -1;
    int found = 0, hidden = 0;
    char name[96];
    struct dirent *process;
    while (!found && (process = readdir(proc)) != NULL) {
        if (process->d_name[0] < '0' || process->d_name[0] > '9') continue;
        snprintf(name, sizeof name, "/proc/%s/fd", process->d_name);
        DIR *fds = opendir(name);
        if (!fds) {
            // Gone meanwhile (ENOENT) is no writer; another user's process (EACCES) may be one.
            if (errno != ENOENT) hidden = 1;
            continue;
        }
        struct dirent *descriptor;
        while ((descriptor = readdir(fds)) != NULL) {
            if (descriptor->d_name[0] < '0' || descriptor->d_name[0] > '9') continue;
            snprintf(name, sizeof name, "/proc/%s/fd/%s", process->d_name, descriptor->d_name);
            char linked[PATH_MAX];
            ssize_t length = readlink(name, linked, sizeof linked);
            if (length < 0) continue;  // closed meanwhile
            if ((size_t)length != realLength || memcmp(linked, real, realLength) != 0) continue;
            struct stat info;
            if (stat(name, &info) != 0 || info.st_ino != target.st_ino || info.st_dev != target.st_dev) continue;
            snprintf(name, sizeof name, "/proc/%s/fdinfo/%s", process->d_name, descriptor->d_name);
            FILE *fdinfo = fopen(name, "re");
            if (!fdinfo) {
                hidden = 1;
                continue;
            }
            char line[128];
            unsigned int flags = 0;
            int known = 0;
            while (fgets(line, sizeof line, fdinfo)) {
                if (sscanf(line, "flags: %o", &flags) == 1) {
                    known = 1;
                    break;
                }
            }
            fclose(fdinfo);
            if (!known) {
                hidden = 1;
            } else if ((flags & O_ACCMODE) != O_RDONLY) {
                found = 1;
                break;
            }
        }
        closedir(fds);
    }
    closedir(proc);
    return found ? 1 : (hidden ? 2 : 0);
}

int uploadq_make_undumpable(void) { return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); }

int uploadq_keep_freed_memory(int bytes) {
    return mallopt(M_TRIM_THRESHOLD, bytes) == 1 && mallopt(M_MMAP_THRESHOLD, bytes) == 1 ? 0 : -1;
}

int uploadq_is_dumpable(void) { return prctl(PR_GET_DUMPABLE, 0, 0, 0, 0); }

int uploadq_spawn_close_from(posix_spawn_file_actions_t *actions, int lowest) {
    return posix_spawn_file_actions_addclosefrom_np(actions, lowest);
}

int uploadq_so_peercred(void) {
    _Static_assert(sizeof(struct uploadq_peer_credentials) == sizeof(struct ucred), "struct ucred's layout");
    return SO_PEERCRED;
}

int uploadq_so_peergroups(void) { return SO_PEERGROUPS; }

// proc, sysfs, debugfs, tracefs, securityfs, cgroup, cgroup2, bpf, configfs, efivarfs, pstore, selinuxfs, smackfs,
// binfmt_misc, nsfs, fusectl, devpts, mqueue, autofs.
int uploadq_is_pseudo_fs(int fd) {
    static const unsigned long types[] = {
        0x9fa0UL, 0x62656572UL, 0x64626720UL, 0x74726163UL, 0x73636673UL, 0x27e0ebUL, 0x63677270UL, 0xcafe4a11UL,
        0x62656570UL, 0xde5e81e4UL, 0x6165676cUL, 0xf97cff8cUL, 0x43415d53UL, 0x42494e4dUL, 0x6e736673UL,
        0x65735543UL, 0x1cd1UL, 0x19800202UL, 0x0187UL,
    };
    struct statfs fs;
    if (fstatfs(fd, &fs) != 0) return -1;
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        if ((unsigned long)fs.f_type == types[i]) return 1;
    }
    return 0;
}

// Whether `wanted` is one of the user's groups: 1, 0, or -1 when it cannot be told (`uncertain`, as
// uploadq_open_as_user takes it).
static int in_groups(gid_t wanted, gid_t gid, const gid_t *groups, int count, int uncertain) {
    if (wanted == gid) return 1;
    for (int i = 0; i < count; i++) {
        if (groups[i] == wanted) return 1;
    }
    if (uncertain == UPLOADQ_GROUPS_UNKNOWN || (uncertain == UPLOADQ_GROUP_ZERO_UNKNOWN && wanted == 0)) return -1;
    return 0;
}

// The permission bits (4 read, 2 write, 1 search) user `uid` has on the inode open as `fd` (an O_PATH descriptor):
// its owner's, else its POSIX access ACL's (a named user's or the groups', under the mask), else its group's or
// others' mode bits, as the kernel decides (acl_permission_check and posix_acl_permission). A group the user may
// or may not be in counts both ways, and only what both grant is granted: membership can take away as well as give
// (mode 0604 shuts the group out).
static int permissions(int fd, const struct stat *info, uid_t uid, gid_t gid, const gid_t *groups, int count,
                       int uncertain) {
    if (info->st_uid == uid) return (info->st_mode >> 6) & 7;
    unsigned char acl[4 + 8 * 64];
    char name[64];
    snprintf(name, sizeof(name), "/proc/self/fd/%d", fd);
    ssize_t length = getxattr(name, "system.posix_acl_access", acl, sizeof(acl));
    // No ACL (none set, or a file system without them): the mode bits decide. An ACL that cannot be read (too
    // long, /proc missing, anything else) grants nothing: a check may refuse more, never allow more.
    if (length < 0 && errno != ENODATA && errno != ENOTSUP) return 0;
    if (length >= 0 && (length < 4 || (length - 4) % 8 != 0 || acl[0] != 2 || acl[1] || acl[2] || acl[3])) return 0;
    if (length >= 4) {
        int mask = 7, group_matched = 0, group_perms = 0, user_perms = -1, other = 0;
        // The groups' entries that may match: what each of them grants, together.
        int maybe_matched = 0, maybe_perms = 7;
        for (ssize_t at = 4; at < length; at += 8) {
            unsigned tag = acl[at] | (acl[at + 1] << 8);
            unsigned perm = acl[at + 2] | (acl[at + 3] << 8);
            uint32_t id = (uint32_t)acl[at + 4] | ((uint32_t)acl[at + 5] << 8) | ((uint32_t)acl[at + 6] << 16)
                | ((uint32_t)acl[at + 7] << 24);
            int member = -2;
            switch (tag) {
            case 0x02: if (id == uid) user_perms = (int)perm; break;
            case 0x04: member = in_groups(info->st_gid, gid, groups, count, uncertain); break;
            case 0x08: member = in_groups((gid_t)id, gid, groups, count, uncertain); break;
            case 0x10: mask = (int)perm; break;
            case 0x20: other = (int)perm; break;
            default: break;
            }
            if (member == 1) { group_matched = 1; group_perms |= (int)perm; }
            if (member == -1) { maybe_matched = 1; maybe_perms &= (int)perm; }
        }
        if (user_perms >= 0) return user_perms & mask & 7;
        // More groups matching only add to what the known ones grant.
        if (group_matched) return group_perms & mask & 7;
        // None known: the others' entry, or any one group that may match alone.
        if (maybe_matched) return other & maybe_perms & mask & 7;
        return other & 7;
    }
    int member = in_groups(info->st_gid, gid, groups, count, uncertain);
    if (member == 1) return (info->st_mode >> 3) & 7;
    if (member == -1) return (info->st_mode >> 3) & info->st_mode & 7;
    return info->st_mode & 7;
}

// Whether the mount `id` (statx's stx_mnt_id) is a network or FUSE file system, read from /proc/self/mountinfo
// without asking the file system anything: 1 or 0, or 1 when it cannot be told (refused rather than reached).
static int is_network_mount(uint64_t id) {
    FILE *mounts = fopen("/proc/self/mountinfo", "re");
    if (!mounts) return 1;
    char *line = NULL;
    size_t capacity = 0;
    int answer = 1;
    while (getline(&line, &capacity, mounts) > 0) {
        char *end;
        unsigned long long mount = strtoull(line, &end, 10);
        if (end == line || mount != id) continue;
        // "36 35 98:0 /root /mnt opts [optional fields] - type source superopts"
        char *separator = strstr(line, " - ");
        if (!separator) break;
        char type[64];
        if (sscanf(separator + 3, "%63s", type) != 1) break;
        static const char *const network[] = {
            "nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "afs", "ncpfs", "coda", "glusterfs", "lustre",
            "gfs2", "ocfs2", "orangefs", "davfs",
        };
        answer = strncmp(type, "fuse", 4) == 0;
        for (size_t i = 0; i < sizeof(network) / sizeof(network[0]); i++) {
            if (strcmp(type, network[i]) == 0) answer = 1;
        }
        break;
    }
    free(line);
    fclose(mounts);
    return answer;
}

// The mount `fd` lies on (an O_PATH descriptor), asking the file system nothing (no attribute is requested, so
// FUSE sends no request); 0 when the kernel does not say (before Linux 5.8).
static uint64_t mount_of(int fd) {
    struct statx info;
    if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW | AT_STATX_DONT_SYNC, 0, &info) != 0) return 0;
    return (info.stx_mask & STATX_MNT_ID) ? info.stx_mnt_id : 0;
}

// The local mounts a walk has entered, each held open (an O_PATH descriptor of the directory it was entered by)
// while the walk lasts: a mount id is reused once its mount is gone, and a held mount cannot go.
struct local_mounts {
    uint64_t ids[16];
    int held[16];
    int count;
};

static int open_as_user(const char *path, uid_t uid, gid_t gid, const gid_t *groups, int group_count,
                        int uncertain, struct local_mounts *local);

int uploadq_open_as_user(const char *path, uid_t uid, gid_t gid, const gid_t *groups, int group_count,
                         int uncertain) {
    struct local_mounts local = { .count = 0 };
    int file = open_as_user(path, uid, gid, groups, group_count, uncertain, &local);
    int saved = errno;
    for (int i = 0; i < local.count; i++) close(local.held[i]);
    errno = saved;
    return file;
}

static int open_as_user(const char *path, uid_t uid, gid_t gid, const gid_t *groups, int group_count,
                        int uncertain, struct local_mounts *local) {
    if (path[0] != '/') { errno = EINVAL; return -1; }
    char rest[PATH_MAX * 2];
    if (strlen(path) >= sizeof(rest)) { errno = ENAMETOOLONG; return -1; }
    strcpy(rest, path);
    int links = 0;
    int dir = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) return -1;
    // Each mount the walk enters is looked at before anything on it is: a network or FUSE file system (whose
    // server, maybe the dropper's own, could answer slowly or never) is refused, not walked. The mounts found
    // local are remembered for the walk (`local`): a path that goes back and forth (/proc/../proc/..) reads the
    // table of mounts once a mount, not once a step.
    uint64_t root_mount = mount_of(dir), mount = root_mount;
    char *cursor = rest;
    for (;;) {
        while (*cursor == '/') cursor++;
        if (*cursor == '\0') { close(dir); errno = EISDIR; return -1; }
        struct stat here;
        if (fstat(dir, &here) != 0) { int saved = errno; close(dir); errno = saved; return -1; }
        if (!(permissions(dir, &here, uid, gid, groups, group_count, uncertain) & 1)) {
            close(dir);
            errno = EACCES;
            return -1;
        }
        char *end = strchr(cursor, '/');
        char component[NAME_MAX + 1];
        size_t length = end ? (size_t)(end - cursor) : strlen(cursor);
        if (length > NAME_MAX) { close(dir); errno = ENAMETOOLONG; return -1; }
        memcpy(component, cursor, length);
        component[length] = '\0';
        const char *after = end ? end : cursor + length;
        int slashed = *after == '/';
        while (*after == '/') after++;
        int last = *after == '\0';
        if (last && slashed) { close(dir); errno = ENOTDIR; return -1; }
        int next = openat(dir, component, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0) { int saved = errno; close(dir); errno = saved; return -1; }
        uint64_t next_mount = mount_of(next);
        if (next_mount != mount || next_mount == 0) {
            int known = 0;
            for (int i = 0; i < local->count; i++) known |= local->ids[i] == next_mount && next_mount != 0;
            // Without a mount id (before Linux 5.8) the file system is asked (fstatfs): a FUSE server hears it.
            if (!known && (next_mount != 0 ? is_network_mount(next_mount) : uploadq_is_network_fs_fd(next) != 0)) {
                close(next);
                close(dir);
                errno = EREMOTE;
                return -1;
            }
            if (!known && next_mount != 0 && local->count < 16) {
                int held = dup(next);
                if (held >= 0) {
                    local->ids[local->count] = next_mount;
                    local->held[local->count++] = held;
                }
            }
        }
        mount = next_mount;
        struct stat info;
        if (fstat(next, &info) != 0) { int saved = errno; close(next); close(dir); errno = saved; return -1; }
        if (S_ISLNK(info.st_mode)) {
            if (last || ++links > 40) { close(next); close(dir); errno = ELOOP; return -1; }
            char target[PATH_MAX];
            ssize_t size = readlinkat(next, "", target, sizeof(target) - 1);
            close(next);
            if (size < 0) { int saved = errno; close(dir); errno = saved; return -1; }
            target[size] = '\0';
            // The link's target, then what followed it.
            char spliced[PATH_MAX * 2];
            if ((size_t)size + strlen(after) + 2 >= sizeof(spliced)) { close(dir); errno = ENAMETOOLONG; return -1; }
            snprintf(spliced, sizeof(spliced), "%s/%s", target, after);
            strcpy(rest, spliced);
            cursor = rest;
            if (target[0] == '/') {
                close(dir);
                dir = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
                if (dir < 0) return -1;
                mount = root_mount;
            }
            continue;
        }
        if (last) {
            if (!S_ISREG(info.st_mode) || !(permissions(next, &info, uid, gid, groups, group_count, uncertain) & 4)) {
                close(next);
                close(dir);
                errno = S_ISREG(info.st_mode) ? EACCES : EINVAL;
                return -1;
            }
            // The inode checked is the one opened, through the descriptor that holds it: no name is looked up again,
            // so nothing renamed or linked in between is reached.
            char held[64];
            snprintf(held, sizeof(held), "/proc/self/fd/%d", next);
            int file = open(held, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
            int saved = errno;
            struct stat opened;
            if (file >= 0 && (fstat(file, &opened) != 0 || opened.st_ino != info.st_ino || opened.st_dev != info.st_dev)) {
                close(file);
                file = -1;
                saved = EAGAIN;
            }
            close(next);
            close(dir);
            errno = saved;
            return file;
        }
        if (!S_ISDIR(info.st_mode)) { close(next); close(dir); errno = ENOTDIR; return -1; }
        close(dir);
        dir = next;
        cursor = (char *)after;
    }
}

static _Thread_local int may_block = 0;

int uploadq_thread_may_block(void) { return may_block; }

int uploadq_thread_set_may_block(int value) {
    int was = may_block;
    may_block = value;
    return was;
}

static _Thread_local char thread_context[32];

const char *uploadq_thread_context(void) { return thread_context[0] ? thread_context : NULL; }

void uploadq_thread_set_context(const char *name) {
    strncpy(thread_context, name, sizeof thread_context - 1);
    thread_context[sizeof thread_context - 1] = 0;
}
