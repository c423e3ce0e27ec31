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
