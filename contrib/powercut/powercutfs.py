#!/usr/bin/python3
"""powercutfs: a FUSE file system that loses, at a power cut, what a real one may lose.

Every write, create, rename, link and unlink lands in a volatile layer. A file's data (and its mode, owner and
times) become durable on an fsync or fdatasync of that file; a directory's names become durable on an fsync of that
directory, and only then: a new file whose directory was never fsynced is gone after a cut, however often the
file itself was fsynced, and a rename whose directory was not fsynced is undone. This is stricter than ext4, on
purpose: what survives here survives on any POSIX file system.

    powercutfs.py MOUNTPOINT --image IMAGE --control SOCKET [--fsync-log FILE] [--own-pid PID] [--peer SOCKET]
                  [--die-at-fsync K | --die-at REGEX [--die-count N] [--die-before]]

IMAGE holds the durable state between lives (it is created when missing). The control socket takes one line:
  die            the power goes: from now on every request fails with EIO (what a dead disk answers)
  cut [tear]     the durable state (with, given `tear`, a torn prefix of the last unsynced write) is written to
                 IMAGE, and the file system unmounts and exits; mount it again on IMAGE to boot after the cut
  syncfs         what syncfs(2) does on a real file system: every file's data and every name become durable.
                 FUSE never sees a syncfs, so contrib/powercut/syncfs-shim.so (LD_PRELOAD) sends this first.
  stats          a JSON line: fsyncs so far, whether it is dead, and at which fsync it died
  syncdir PATH   the folder PATH's names durable as they are now, even on a dead disk: what another process's fsync
                 made durable the instant before the power went
  arm RE N WHEN  from now on, die at the N-th fsync whose `KIND:PATH` matches RE (WHEN: before or after it), as
                 --die-at does from the start
With --die-at-fsync K it dies right after the K-th fsync (of a file or a directory, or a syncfs) has made its state
durable. With --die-at REGEX it dies at the N-th fsync whose `KIND:PATH` matches (KIND is file, dir or syncfs):
right after it, or with --die-before instead of it (that fsync makes nothing durable, and fails with EIO).
Each fsync is appended to the fsync log as `N<TAB>KIND<TAB>PATH`, PATH relative to the mount, with `died` as a
fourth field on the one it died at. The fsyncs of files and directories that process --own-pid opened (the harness's
own, as a dropper) are logged with KIND `own-file` or `own-dir` and never matched by --die-at. With --peer, the
file system at that control socket (a second disk of the same machine) dies the moment this one does.
"""
import argparse
import errno
import json
import os
import pickle
import random
import re
import socket
import stat
import subprocess
import sys
import time

import pyfuse3
import trio

ROOT = pyfuse3.ROOT_INODE


class Node:
    """An inode: its current state, and the state a power cut would leave."""

    def __init__(self, ino, mode, uid, gid):
        self.ino = ino
        self.mode = mode
        self.uid = uid
        self.gid = gid
        now = time.time_ns()
        self.atime = self.mtime = self.ctime = now
        self.data = bytearray()          # files
        self.target = b""                # symbolic links
        self.entries = {}                # directories: name -> ino
        self.links = set()               # (parent ino, name) of its current names
        # The durable state: (mode, uid, gid, mtime, data) of a file as of its last fsync, a directory's entries
        # as of its last fsync. A file never fsynced is empty after a cut.
        self.durable_meta = (mode, uid, gid, now)
        self.durable_data = b""
        self.durable_entries = {}

    @property
    def is_dir(self):
        return stat.S_ISDIR(self.mode)


class PowerCutFS(pyfuse3.Operations):
    def __init__(self, nodes, next_ino, args):
        super().__init__()
        self.nodes = nodes
        self.next_ino = next_ino
        self.fsync_log = args.fsync_log
        self.die_at = args.die_at_fsync
        self.die_match = re.compile(args.die_at) if args.die_at else None
        self.die_count = args.die_count
        self.die_before = args.die_before
        self.matches = 0
        self.died_at = None
        self.fsyncs = 0
        self.dead = False
        self.handles = {}
        self.openers = {}                # fh -> pid of the process that opened it
        self.own_pid = args.own_pid
        self.peer = args.peer
        self.next_fh = 1
        self.last_write = None           # (ino, offset, bytes) of the last write not yet made durable

    # --- helpers

    def alive(self):
        if self.dead:
            raise pyfuse3.FUSEError(errno.EIO)

    def node(self, ino):
        node = self.nodes.get(ino)
        if node is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return node

    def attributes(self, node):
        entry = pyfuse3.EntryAttributes()
        entry.st_ino = node.ino
        entry.generation = 0
        entry.entry_timeout = 0
        entry.attr_timeout = 0
        entry.st_mode = node.mode
        if node.is_dir:
            entry.st_nlink = 2 + sum(1 for child in node.entries.values() if self.nodes[child].is_dir)
        else:
            entry.st_nlink = len(node.links)
        entry.st_uid = node.uid
        entry.st_gid = node.gid
        entry.st_rdev = 0
        size = len(node.target) if stat.S_ISLNK(node.mode) else len(node.data)
        entry.st_size = size
        entry.st_blksize = 4096
        entry.st_blocks = (size + 511) // 512
        entry.st_atime_ns = node.atime
        entry.st_mtime_ns = node.mtime
        entry.st_ctime_ns = node.ctime
        return entry

    def path(self, node):
        parts = []
        while node.ino != ROOT:
            if not node.links:
                return "<unlinked>/" + "/".join(reversed(parts))
            parent, name = min(node.links)
            parts.append(name.decode(errors="replace"))
            node = self.nodes[parent]
        return "/".join(reversed(parts))

    def child(self, parent, name):
        ino = self.node(parent).entries.get(name)
        if ino is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self.nodes[ino]

    def make(self, parent, name, mode, ctx):
        directory = self.node(parent)
        if name in directory.entries:
            raise pyfuse3.FUSEError(errno.EEXIST)
        node = Node(self.next_ino, mode, ctx.uid, ctx.gid)
        self.next_ino += 1
        self.nodes[node.ino] = node
        self.attach(directory, name, node)
        return node

    def attach(self, directory, name, node):
        directory.entries[name] = node.ino
        node.links.add((directory.ino, name))
        directory.mtime = directory.ctime = time.time_ns()

    def detach(self, directory, name):
        ino = directory.entries.pop(name)
        self.nodes[ino].links.discard((directory.ino, name))
        directory.mtime = directory.ctime = time.time_ns()
        return self.nodes[ino]

    def syncing(self, node, kind, fh=None):
        """Counts an fsync about to happen; raises EIO when the power goes instead (--die-before), and says whether
        it goes right after."""
        self.fsyncs += 1
        path = self.path(node) if node is not None else ""
        if fh is not None and self.own_pid and self.openers.get(fh) == self.own_pid:
            kind = "own-" + kind
        dies = False
        if self.die_match and not kind.startswith("own-") and self.die_match.search(f"{kind}:{path}"):
            self.matches += 1
            dies = self.matches == self.die_count
        elif self.die_at and self.fsyncs == self.die_at:
            dies = True
        if self.fsync_log:
            with open(self.fsync_log, "a") as log:
                log.write(f"{self.fsyncs}\t{kind}\t{path}" + ("\tdied" if dies else "") + "\n")
        if dies:
            self.died_at = f"{kind}:{path}"
            if self.die_before:
                self.die()
                raise pyfuse3.FUSEError(errno.EIO)
        return dies

    def synced(self, dies):
        if dies:
            self.die()

    def die(self):
        """The power goes, for this disk and its peer."""
        self.dead = True
        if self.peer:
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                    sock.settimeout(5)
                    sock.connect(self.peer)
                    sock.sendall(b"die\n")
                    sock.recv(16)
            except OSError:
                pass

    def sync_everything(self):
        """syncfs(2): every file's data and every name durable, as a journal commit makes them."""
        dies = self.syncing(None, "syncfs")
        for node in self.nodes.values():
            if node.is_dir:
                node.durable_entries = dict(node.entries)
            else:
                node.durable_data = bytes(node.data)
            node.durable_meta = (node.mode, node.uid, node.gid, node.mtime)
        self.last_write = None
        self.synced(dies)

    # --- the volatile layer

    async def lookup(self, parent, name, ctx):
        self.alive()
        if name == b".":
            return self.attributes(self.node(parent))
        if name == b"..":
            node = self.node(parent)
            up = min(node.links)[0] if node.links else ROOT
            return self.attributes(self.node(up))
        return self.attributes(self.child(parent, name))

    async def getattr(self, ino, ctx):
        self.alive()
        return self.attributes(self.node(ino))

    async def setattr(self, ino, attr, fields, fh, ctx):
        self.alive()
        node = self.node(ino)
        now = time.time_ns()
        if fields.update_size:
            size = attr.st_size
            if size < len(node.data):
                del node.data[size:]
            else:
                node.data.extend(bytes(size - len(node.data)))
            node.mtime = now
        if fields.update_mode:
            node.mode = (node.mode & ~0o7777) | (attr.st_mode & 0o7777)
        if fields.update_uid:
            node.uid = attr.st_uid
        if fields.update_gid:
            node.gid = attr.st_gid
        if fields.update_atime:
            node.atime = attr.st_atime_ns
        if fields.update_mtime:
            node.mtime = attr.st_mtime_ns
        node.ctime = now
        return self.attributes(node)

    async def readlink(self, ino, ctx):
        self.alive()
        return self.node(ino).target

    async def mknod(self, parent, name, mode, rdev, ctx):
        self.alive()
        if not stat.S_ISREG(mode):
            raise pyfuse3.FUSEError(errno.EPERM)
        return self.attributes(self.make(parent, name, mode, ctx))

    async def mkdir(self, parent, name, mode, ctx):
        self.alive()
        return self.attributes(self.make(parent, name, stat.S_IFDIR | (mode & 0o7777), ctx))

    async def symlink(self, parent, name, target, ctx):
        self.alive()
        node = self.make(parent, name, stat.S_IFLNK | 0o777, ctx)
        node.target = target
        return self.attributes(node)

    async def unlink(self, parent, name, ctx):
        self.alive()
        node = self.child(parent, name)
        if node.is_dir:
            raise pyfuse3.FUSEError(errno.EISDIR)
        self.detach(self.node(parent), name)
        node.ctime = time.time_ns()

    async def rmdir(self, parent, name, ctx):
        self.alive()
        node = self.child(parent, name)
        if not node.is_dir:
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        if node.entries:
            raise pyfuse3.FUSEError(errno.ENOTEMPTY)
        self.detach(self.node(parent), name)

    async def rename(self, parent_old, name_old, parent_new, name_new, flags, ctx):
        self.alive()
        source = self.node(parent_old)
        target = self.node(parent_new)
        moving = self.child(parent_old, name_old)
        existing = target.entries.get(name_new)
        if flags & pyfuse3.RENAME_EXCHANGE:
            if existing is None:
                raise pyfuse3.FUSEError(errno.ENOENT)
            other = self.detach(target, name_new)
            self.detach(source, name_old)
            self.attach(target, name_new, moving)
            self.attach(source, name_old, other)
            return
        if existing is not None:
            if flags & pyfuse3.RENAME_NOREPLACE:
                raise pyfuse3.FUSEError(errno.EEXIST)
            if existing == moving.ino:
                return
            replaced = self.nodes[existing]
            if replaced.is_dir and replaced.entries:
                raise pyfuse3.FUSEError(errno.ENOTEMPTY)
            if replaced.is_dir != moving.is_dir:
                raise pyfuse3.FUSEError(errno.EISDIR if replaced.is_dir else errno.ENOTDIR)
            self.detach(target, name_new)
        self.detach(source, name_old)
        self.attach(target, name_new, moving)
        moving.ctime = time.time_ns()

    async def link(self, ino, parent_new, name_new, ctx):
        self.alive()
        node = self.node(ino)
        target = self.node(parent_new)
        if name_new in target.entries:
            raise pyfuse3.FUSEError(errno.EEXIST)
        self.attach(target, name_new, node)
        node.ctime = time.time_ns()
        return self.attributes(node)

    def handle(self, node, ctx=None):
        fh = self.next_fh
        self.next_fh += 1
        self.handles[fh] = node.ino
        if ctx is not None:
            self.openers[fh] = ctx.pid
        return fh

    async def open(self, ino, flags, ctx):
        self.alive()
        node = self.node(ino)
        if flags & os.O_TRUNC:
            node.data = bytearray()
            node.mtime = node.ctime = time.time_ns()
        # keep_cache: an open by another process must not drop the pages a process has mapped (SQLite's -shm is
        # shared memory through mmap; dropping its pages under a writer would corrupt the WAL index, which no disk
        # does). Only this file system changes its files, and a cut remounts, which drops every cache.
        return pyfuse3.FileInfo(fh=self.handle(node, ctx), keep_cache=True)

    async def create(self, parent, name, mode, flags, ctx):
        self.alive()
        node = self.make(parent, name, stat.S_IFREG | (mode & 0o7777), ctx)
        return pyfuse3.FileInfo(fh=self.handle(node, ctx), keep_cache=True), self.attributes(node)

    async def read(self, fh, offset, size):
        self.alive()
        return bytes(self.nodes[self.handles[fh]].data[offset:offset + size])

    async def write(self, fh, offset, buffer):
        self.alive()
        node = self.nodes[self.handles[fh]]
        if offset > len(node.data):
            node.data.extend(bytes(offset - len(node.data)))
        node.data[offset:offset + len(buffer)] = buffer
        node.mtime = node.ctime = time.time_ns()
        self.last_write = (node.ino, offset, bytes(buffer))
        return len(buffer)

    async def flush(self, fh):
        self.alive()

    async def release(self, fh):
        self.handles.pop(fh, None)
        self.openers.pop(fh, None)

    async def fsync(self, fh, datasync):
        self.alive()
        node = self.nodes[self.handles[fh]]
        dies = self.syncing(node, "file", fh)
        node.durable_data = bytes(node.data)
        node.durable_meta = (node.mode, node.uid, node.gid, node.mtime)
        if self.last_write and self.last_write[0] == node.ino:
            self.last_write = None
        self.synced(dies)

    async def opendir(self, ino, ctx):
        self.alive()
        node = self.node(ino)
        if not node.is_dir:
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        return self.handle(node, ctx)

    async def readdir(self, fh, start, token):
        self.alive()
        node = self.nodes[self.handles[fh]]
        names = sorted(node.entries.items())
        for index, (name, ino) in enumerate(names[start:], start + 1):
            if not pyfuse3.readdir_reply(token, name, self.attributes(self.nodes[ino]), index):
                break

    async def releasedir(self, fh):
        self.handles.pop(fh, None)
        self.openers.pop(fh, None)

    async def fsyncdir(self, fh, datasync):
        self.alive()
        node = self.nodes[self.handles[fh]]
        dies = self.syncing(node, "dir", fh)
        node.durable_entries = dict(node.entries)
        node.durable_meta = (node.mode, node.uid, node.gid, node.mtime)
        self.synced(dies)

    async def statfs(self, ctx):
        self.alive()
        data = pyfuse3.StatvfsData()
        used = sum(len(n.data) for n in self.nodes.values()) // 4096
        data.f_bsize = data.f_frsize = 4096
        data.f_blocks = 4 << 20                 # 16 GiB
        data.f_bfree = data.f_bavail = max(0, data.f_blocks - used)
        data.f_files = 1 << 20
        data.f_ffree = data.f_favail = data.f_files - len(self.nodes)
        data.f_namemax = 255
        return data

    async def access(self, ino, mode, ctx):
        self.alive()
        return True

    async def forget(self, inode_list):
        pass

    # --- the cut

    def durable_image(self, tear):
        """The nodes a power cut leaves: from the root, each directory's durable names, each file's durable data."""
        torn = None
        if tear and self.last_write:
            ino, offset, written = self.last_write
            torn = (ino, offset, written[:random.randrange(0, len(written) + 1)])
        kept = {}
        queue = [ROOT]
        while queue:
            ino = queue.pop()
            if ino in kept:
                continue
            old = self.nodes[ino]
            node = Node(ino, old.durable_meta[0], old.durable_meta[1], old.durable_meta[2])
            node.mtime = node.ctime = node.atime = old.durable_meta[3]
            node.durable_meta = old.durable_meta
            if old.is_dir:
                node.entries = dict(old.durable_entries)
                node.durable_entries = dict(old.durable_entries)
                queue.extend(node.entries.values())
            elif stat.S_ISLNK(old.mode):
                node.target = old.target
            else:
                data = bytearray(old.durable_data)
                if torn and torn[0] == ino:
                    offset, prefix = torn[1], torn[2]
                    if offset > len(data):
                        data.extend(bytes(offset - len(data)))
                    data[offset:offset + len(prefix)] = prefix
                node.data = data
                node.durable_data = bytes(data)
            kept[ino] = node
        for node in kept.values():
            for name, child in node.entries.items():
                kept[child].links.add((node.ino, name))
        return kept


def load(image):
    if os.path.exists(image):
        with open(image, "rb") as file:
            state = pickle.load(file)
        return state["nodes"], state["next_ino"]
    root = Node(ROOT, stat.S_IFDIR | 0o755, 0, 0)
    return {ROOT: root}, ROOT + 1


def save(image, nodes, next_ino):
    temporary = image + ".tmp"
    with open(temporary, "wb") as file:
        pickle.dump({"nodes": nodes, "next_ino": next_ino}, file, protocol=pickle.HIGHEST_PROTOCOL)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, image)


# pyfuse3 reads /dev/fuse with a blocking read(2), holding the GIL, once poll(2) said a request is there. A request
# can vanish in between (its process was killed: a power cut kills them all); the read then waits for the next
# request, and the whole trio loop with it, control socket included: a `cut` would wait for ever. A process of its
# own (a thread would wait for the GIL) looks up a name that is not there every second: that next request.
UNSTICK = """
import os, random, sys, time
mountpoint, parent = sys.argv[1], int(sys.argv[2])
while os.getppid() == parent:
    time.sleep(1)
    try:
        os.lstat(os.path.join(mountpoint, ".powercutfs-unstick-%d" % random.randrange(1 << 30)))
    except OSError:
        pass
"""


async def control(fs, args, done):
    """One command per connection on the control socket."""
    listener = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    if os.path.exists(args.control):
        os.unlink(args.control)
    # Bound and listening under another name, then renamed: a client that sees the socket can connect to it (one
    # that came between the bind and the listen was refused, and its `cut` lost).
    pending = args.control + ".binding"
    if os.path.exists(pending):
        os.unlink(pending)
    await listener.bind(pending)
    listener.listen(4)
    os.rename(pending, args.control)
    while True:
        connection, _ = await listener.accept()
        with connection:
            line = (await connection.recv(256)).decode().strip()
            words = line.split()
            if words[:1] == ["die"]:
                fs.dead = True
                await connection.send(b"dead\n")
            elif words[:1] == ["syncfs"]:
                if fs.dead:
                    await connection.send(b"dead\n")
                else:
                    try:
                        fs.sync_everything()
                        await connection.send(b"synced\n")
                    except pyfuse3.FUSEError:
                        await connection.send(b"dead\n")
            elif words[:1] == ["syncdir"] and len(words) == 2:
                # What another process's fsync of one folder made durable the instant before the power went (it
                # works on a dead disk too): the folder's names as they are now.
                node = fs.nodes[pyfuse3.ROOT_INODE]
                for part in filter(None, words[1].split("/")):
                    node = fs.nodes.get(node.entries.get(part.encode(), -1)) if node.is_dir else None
                    if node is None:
                        break
                if node is None or not node.is_dir:
                    await connection.send(b"no such folder\n")
                else:
                    node.durable_entries = dict(node.entries)
                    await connection.send(b"synced\n")
            elif words[:1] == ["arm"] and len(words) == 4 and words[2].isdigit():
                # arm REGEX COUNT before|after: from now on, the power goes at the COUNT-th fsync matching REGEX.
                fs.die_match = re.compile(words[1])
                fs.die_count = int(words[2])
                fs.die_before = words[3] == "before"
                fs.matches = 0
                await connection.send(b"armed\n")
            elif words[:1] == ["stats"]:
                stats = {"fsyncs": fs.fsyncs, "dead": fs.dead, "died_at": fs.died_at}
                await connection.send((json.dumps(stats) + "\n").encode())
            elif words[:1] == ["cut"]:
                fs.dead = True
                save(args.image, fs.durable_image("tear" in words[1:]), fs.next_ino)
                await connection.send(b"cut\n")
                done.set()
                pyfuse3.terminate()
                return
            else:
                await connection.send(b"unknown command\n")


async def serve(fs, args):
    done = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(control, fs, args, done)
        # The handlers never wait on anything: one task serves as fast as several.
        await pyfuse3.main(min_tasks=1, max_tasks=1)
        nursery.cancel_scope.cancel()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mountpoint")
    parser.add_argument("--image", required=True)
    parser.add_argument("--control", required=True)
    parser.add_argument("--fsync-log")
    parser.add_argument("--die-at-fsync", type=int, default=0)
    parser.add_argument("--die-at")
    parser.add_argument("--die-count", type=int, default=1)
    parser.add_argument("--die-before", action="store_true")
    parser.add_argument("--own-pid", type=int, default=0)
    parser.add_argument("--peer")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    random.seed(args.seed)
    nodes, next_ino = load(args.image)
    fs = PowerCutFS(nodes, next_ino, args)
    options = set(pyfuse3.default_options)
    options.update({"fsname=powercutfs", "allow_other"})
    pyfuse3.init(fs, args.mountpoint, options)
    subprocess.Popen([sys.executable, "-c", UNSTICK, args.mountpoint, str(os.getpid())], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        trio.run(serve, fs, args)
    finally:
        pyfuse3.close(unmount=True)


if __name__ == "__main__":
    sys.exit(main())
