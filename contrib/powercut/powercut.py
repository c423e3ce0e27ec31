"""Power-cut harness for uploadq: the state directory, the spool, the sources of `--mode move` and `reference`, the
local target and the archive live on powercutfs (contrib/powercut/powercutfs.py), which loses at a cut everything
that was not fsynced, names whose directory was not fsynced included. Two of them, as two disks of one machine: the
first holds the state, the move and reference sources and the local target; the second the spool and the archive,
so that the spool's files and the archived copies cross file systems (copied, fsynced, then unlinked). A workload runs (spool drops, enqueues by
copy, move and reference, cancels, uploads to tus, S3 and a local directory, archiving releases, hooks) until the
power goes: at the k-th fsync of a chosen site (right after it, or instead of it) or at a random moment, with the
last unsynced write torn now and then. Then every process is killed, the file system keeps only what was durable,
and the next life boots on it. After the last cut the daemon drains the queue and the invariants are checked:
every acknowledged hand-over in the queue with its SHA-256 and on its server byte for byte, nothing stuck or
failed, one job per content, cancels kept, rejections kept with their reason, spool empty, move sources gone,
reference files moved whole to sent/, every release done, every patch and hook delivered, the metered budget's
ledger between 0 and the metered traffic, and SQLite's integrity_check. The link is metered, so every byte is
counted. Library enqueues (the same intake in a process of the app's own) are cut at each of their fsyncs by
PowerCutTests.libraryEnqueueSurvives.

Run it through contrib/powercut/run.sh (which builds the pieces and starts the servers). Settings (environment):
  CUTS=40        power cuts (each site is cut at least once when CUTS allows; about three in four of the rest at
                 random moments)
  EPOCH=25       after this many cuts the queue is drained and checked, and the delivered and archived files
                 that passed are removed (so the file systems, held in memory, stay small)
  SEED=1         random seed
  UPLOADQ_BINARY the uploadq binary (default: .build/release/uploadq, else .build/debug/uploadq)
  POWERCUT_KEEP  keep the work directory (POWERCUT_KEEP_ON_FAILURE: only when the run fails)

Prints the fsync sites (reached, cut) and the violations; exits 1 when a site was never reached, on a violation,
or when the queue does not drain.
"""
import glob
import hashlib
import json
import os
import random
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "test-servers"))
from harness import stored_sha256, http, sha256_file  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
S3_AUTH = "AWS4-HMAC-SHA256 Credential=AKIDPOWER/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00"

# Every fsync site of uploadq (and SQLite's), as powercutfs sees it: KIND:PATH, PATH relative to the mount. The
# durability table in docs/durability.md names the promise each one keeps.
SITES = [
    ("sqlite-commit", r"^file:state/queue\.sqlite-wal$", "SQLite: a commit (WAL, synchronous=FULL)"),
    ("sqlite-checkpoint", r"^file:state/queue\.sqlite$", "SQLite: a checkpoint into the database"),
    ("sqlite-journal", r"^file:state/queue\.sqlite-journal$", "SQLite: the rollback journal of a new database"),
    ("sqlite-directory", r"^dir:state$", "SQLite: the state directory once the WAL is created; SpaceReserve"),
    ("blob-copy", r"^file:state/blobs/\.[^/]*\.tmp$", "BlobStore.commit: one intake copy's data"),
    ("blob-batch", r"^syncfs:$", "BlobStore.commit: a batch of intake copies (syncfs)"),
    ("blob-sidecar", r"^file:state/blobs/[^./][^/]*\.uploadq\.json$",
     "BlobStore.adoptSidecar: a spool sidecar copied beside its blob across disks"),
    ("blobs-directory", r"^dir:state/blobs$", "BlobStore.commit, adopt; FileReleaser: names in blobs/"),
    ("spool-directory", r"^dir:spool$", "BlobStore.adopt, Intake.syncMoved, SpoolWatcher: a spool name gone"),
    ("rejected-reason", r"^file:spool/\.rejected/.*\.reason\.txt$", "SpoolEntries.write: a rejection's reason"),
    ("rejected-directory", r"^dir:spool/\.rejected$", "SpoolWatcher: a rejected file's name and its reason"),
    ("move-source-directory", r"^dir:incoming$", "BlobStore.adopt: enqueue --mode move's source name gone"),
    ("target-data", r"^file:delivered/", "LocalDirectoryUploader: the delivered copy, chunk by chunk"),
    ("target-directory", r"^dir:delivered(/.*)?$", "LocalDirectoryUploader: the delivered name"),
    ("archive-data", r"^file:archive/(.*/)?\.uploadq-archive-[^/]*\.tmp$",
     "FileReleaser.copyDurably: an archived copy across disks"),
    ("archive-directory", r"^dir:archive(/.*)?$", "FileReleaser: an archived copy's name (and its new folders)"),
    ("reference-directory", r"^dir:refs$", "FileReleaser: a reference file moved away after its upload"),
    ("sent-directory", r"^dir:sent$", "FileReleaser: a reference file's new name under move:DIR"),
    ("cancelled-directory", r"^dir:state/cancelled$", "CancelledFiles: a cancelled job's file kept"),
    ("top-directory", r"^dir:$",
     "createDirectoryDurably: a folder made (or first seen) at the top of a disk: the state directory, the spool"),
    ("space-reserve", r"^file:state/space\.reserve\.tmp$", "SpaceReserve: the reserve's blocks"),
    ("metrics", r"^file:metrics/", "PrometheusText: the metrics file (no promise: rewritten every interval)"),
]


def site_of(kind, path):
    for name, pattern, _ in SITES:
        if re.search(pattern, f"{kind}:{path}"):
            return name
    return None


def control(path, command, timeout=10.0):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall((command + "\n").encode())
        return sock.recv(4096).decode().strip()


def is_mounted(path):
    with open("/proc/mounts") as mounts:
        return any(line.split()[1] == path for line in mounts)


class Harness:
    def __init__(self):
        self.rng = random.Random(int(os.environ.get("SEED", 1)))
        self.cuts = int(os.environ.get("CUTS", 40))
        self.binary = os.environ.get("UPLOADQ_BINARY") or next(
            (p for p in (f"{ROOT}/.build/release/uploadq", f"{ROOT}/.build/debug/uploadq") if os.path.exists(p)),
            None)
        if not self.binary:
            sys.exit("powercut: no uploadq binary; build it first (swift build)")
        self.shim = os.environ.get("POWERCUT_SHIM", f"{ROOT}/.build/powercut/syncfs-shim.so")
        if not os.path.exists(self.shim):
            sys.exit(f"powercut: {self.shim} is missing; contrib/powercut/run.sh builds it")
        self.work = tempfile.mkdtemp(prefix="uploadq-powercut-")
        self.mount = f"{self.work}/mnt"            # the state, move and reference sources, the local target
        self.second = f"{self.work}/mnt-b"         # the spool and the archive: another disk
        self.image = f"{self.work}/image"
        self.socket = f"{self.work}/control.sock"
        self.second_socket = f"{self.work}/control-b.sock"
        self.fsync_log = f"{self.work}/fsyncs.log"
        self.hooks_log = f"{self.work}/hooks.log"
        self.config = f"{self.work}/uploadq.toml"
        self.fs = []
        self.daemon = None
        self.counter = 0
        # What was handed over, and acknowledged: (how, destination, sha256, job id or None).
        self.acknowledged = []
        self.cancelled = []
        self.rejected = []                # names dropped with a sidecar the config does not allow
        self.dropped = set()              # names of spool drops acknowledged
        self.duplicates_set_aside = 0
        self.random_cuts = 0              # cuts at a random moment (not at a chosen fsync)
        self.patches = {}                 # job id -> the path its patch goes to
        self.verified_at = None           # when the last check ended: what is older was verified
        self.recorder = os.environ["UPLOADQ_TEST_RECORDER_URL"]
        self.session = "powercut-" + hashlib.sha1(self.work.encode()).hexdigest()[:10]
        self.reject_attempts = set()      # contents dropped to be rejected, acknowledged or not
        self.moved = []                   # acknowledged `--mode move` sources: (path, sha256)
        self.references = []              # acknowledged `--mode reference` sources: (path, sha256)
        self.acknowledged_checked = self.cancelled_checked = self.rejected_checked = 0
        self.moved_checked = self.references_checked = 0
        self.jobs_checked = set()
        self.last_jobs = []
        self.violations = []
        self.cut_sites = {}
        self.metered_bytes = 0
        self.checked_cuts = 0             # cuts after which the queue was checked before the daemon ran again
        self.spool_names = {}             # sha256 -> the name of an acknowledged spool drop
        self.tus_files = os.environ["UPLOADQ_TEST_TUS_FILES"]
        self.s3_endpoint = os.environ["UPLOADQ_TEST_S3_ENDPOINT"]
        self.bucket = "powercut-" + hashlib.sha1(self.work.encode()).hexdigest()[:10]

    # --- set-up

    def write_config(self):
        os.makedirs(f"{self.work}/src")
        hook = f"{self.work}/hook.sh"
        with open(hook, "w") as handle:
            handle.write(f'#!/bin/sh\necho "$UPLOADQ_JOB_ID" >> {self.hooks_log}\ncat > /dev/null\n')
        os.chmod(hook, 0o755)
        http("PUT", f"{self.s3_endpoint}/{self.bucket}")
        with open(self.config, "w") as handle:
            handle.write(f"""
state_dir = "{self.mount}/state"
[spool]
dir = "{self.second}/spool"
destination = "local"
quiet_period = "200ms"
network_quiet_period = "1s"
rescan_interval = "2s"
sidecar_destinations = ["local", "tus", "s3"]
[link]
# Every byte counts against a budget (the ledger is written with the traffic it counts: both or neither).
mode = "metered"
metered_budget = "100GiB/day"
[limits]
concurrency = 3
min_free_space = 0
[retry]
initial_interval = "200ms"
initial_attempts = 100000
later_interval = "1s"
jitter = 0.2
[retention]
uploaded_copies = "archive"
archive_dir = "{self.second}/archive"
[metrics]
textfile = "{self.mount}/metrics/uploadq.prom"
interval = "1s"
[hooks]
on_uploaded = ["{hook}"]
timeout = "5s"
[destinations.local]
protocol = "file"
url = "file://{self.mount}/delivered"
name_template = "{{date}}/{{job_id}}-{{name}}"
chunk_size = "64KiB"
[destinations.tus]
protocol = "tus"
url = "{os.environ['UPLOADQ_TEST_TUS_ENDPOINT']}"
chunk_size = "64KiB"
circuit_threshold = 0
on_metered = "allow"
[destinations.s3]
protocol = "s3"
endpoint = "{self.s3_endpoint}"
bucket = "{self.bucket}"
part_size = "5MiB"
multipart_threshold = "5MiB"
access_key_env = "POWERCUT_ACCESS"
secret_key_env = "POWERCUT_SECRET"
circuit_threshold = 0
on_metered = "allow"
[destinations.nowhere]
protocol = "tus"
url = "http://127.0.0.1:9/files/"
circuit_threshold = 0
on_metered = "allow"
""")

    def env(self):
        env = dict(os.environ, POWERCUT_ACCESS="AKIDPOWER", POWERCUT_SECRET="power/secret",
                   LD_PRELOAD=self.shim, POWERCUT_CONTROL=self.socket)
        env.pop("UPLOADQ_CONFIG", None)
        return env

    # --- lives

    def mount_fs(self, die_at=None, die_count=1, die_before=False):
        disks = [(self.mount, self.image, self.socket, self.second_socket,
                  ("state", "incoming", "refs", "sent", "delivered", "metrics")),
                 (self.second, self.image + "-b", self.second_socket, self.socket, ("spool", "staging", "archive"))]
        for mount, image, socket_path, peer, _ in disks:
            os.makedirs(mount, exist_ok=True)
            if os.path.exists(socket_path):
                os.unlink(socket_path)
            command = ["/usr/bin/python3", f"{HERE}/powercutfs.py", mount, "--image", image, "--control",
                       socket_path, "--peer", peer, "--fsync-log", self.fsync_log, "--own-pid", str(os.getpid()),
                       "--seed", str(self.rng.randrange(1 << 30))]
            if die_at:
                command += ["--die-at", die_at, "--die-count", str(die_count)]
                command += ["--die-before"] if die_before else []
            self.fs.append(subprocess.Popen(command, stdout=self.log, stderr=self.log))
        deadline = time.monotonic() + 20
        for mount, _, socket_path, _, folders in disks:
            while not (is_mounted(mount) and os.path.exists(socket_path)):
                if any(fs.poll() is not None for fs in self.fs) or time.monotonic() > deadline:
                    raise RuntimeError("powercutfs did not mount; see its log")
                time.sleep(0.05)
            for folder in folders:
                if not os.path.isdir(f"{mount}/{folder}"):
                    os.mkdir(f"{mount}/{folder}")
                    self.sync_directory(mount)

    def stats(self):
        """Dead when either disk is; where it died, if at an fsync."""
        merged = {"dead": False, "died_at": None}
        for socket_path in (self.socket, self.second_socket):
            try:
                answer = json.loads(control(socket_path, "stats"))
            except (OSError, ValueError):
                answer = {"dead": True, "died_at": None}
            merged["dead"] = merged["dead"] or answer["dead"]
            merged["died_at"] = merged["died_at"] or answer.get("died_at")
        return merged

    def start_daemon(self):
        self.daemon = subprocess.Popen([self.binary, "daemon", "--config", self.config], env=self.env(),
                                       stdout=self.log, stderr=self.log)

    def kill_everything(self):
        """The power is gone: every process with a file, a directory or its root on the mount dies at once."""
        if self.daemon and self.daemon.poll() is None:
            self.daemon.kill()
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) in [os.getpid()] + [fs.pid for fs in self.fs]:
                continue
            try:
                links = [os.readlink(f"/proc/{pid}/cwd")]
                links += [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
            except OSError:
                continue
            if any(link.startswith(mount + "/") or link == mount for link in links
                   for mount in (self.mount, self.second)):
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self.daemon:
            self.daemon.wait()
            self.daemon = None

    def cut(self, tear):
        for socket_path in (self.socket, self.second_socket):
            try:
                control(socket_path, "die")
            except OSError:
                pass
        self.kill_everything()
        for socket_path in (self.socket, self.second_socket):
            answer = control(socket_path, "cut tear" if tear else "cut", timeout=600)
            if answer != "cut":
                raise RuntimeError(f"powercutfs answered {answer!r} to cut")
        for fs in self.fs:
            fs.wait(timeout=60)
        for mount in (self.mount, self.second):
            if is_mounted(mount):
                subprocess.run(["fusermount3", "-u", "-z", mount], check=False)
        self.fs = []

    # --- the workload: each step hands something over and records it once it is acknowledged

    def content(self):
        self.counter += 1
        size = self.rng.choice([0, 1, 700, 40_000, 200_000, 900_000, 6 << 20 if self.rng.random() < 0.05 else 300_000])
        # Each content unique (the queue would take a second one as the first's job): its number at the end.
        return self.counter, self.rng.randbytes(size) + f"#{self.counter}".encode()

    def write_durably(self, path, data):
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(descriptor, view):]
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def sync_directory(self, path):
        descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def cli(self, *arguments):
        return subprocess.run([self.binary, *arguments, "--config", self.config], env=self.env(),
                              capture_output=True, text=True, timeout=60)

    def step(self):
        number, data = self.content()
        digest = hashlib.sha256(data).hexdigest()
        action = self.rng.choice(["spool", "spool", "spool-sidecar", "spool-reject", "copy", "copy", "batch", "move",
                                  "reference", "cancel", "prune"])
        destination = self.rng.choice(["local", "tus", "s3"])
        if action.startswith("spool"):
            name = f"drop-{number}.jpg"
            # The dropper's own contract: its file is handed over once its data and its name in the spool are on
            # disk (written aside, fsynced, renamed in, the spool fsynced).
            self.write_durably(f"{self.second}/staging/{name}", data)
            if action != "spool":
                if action == "spool-reject":
                    destination = "nowhere"       # not in sidecar_destinations: the file is set aside, kept
                    self.reject_attempts.add(digest)
                sidecar = json.dumps({"destination": destination}).encode()
                self.write_durably(f"{self.second}/staging/{name}.uploadq.json", sidecar)
                os.rename(f"{self.second}/staging/{name}.uploadq.json", f"{self.second}/spool/{name}.uploadq.json")
            else:
                destination = "local"
            os.rename(f"{self.second}/staging/{name}", f"{self.second}/spool/{name}")
            self.sync_directory(f"{self.second}/spool")
            self.dropped.add(name)
            if action == "spool-reject":
                self.rejected.append((name, digest))
            else:
                self.acknowledged.append(("spool", destination, digest, None))
                self.spool_names[digest] = name
            return
        if action == "batch":
            # Several files in one call: their copies are made durable together (syncfs).
            paths, digests = [], []
            for extra in range(self.rng.randint(2, 4)):
                path = f"{self.work}/src/batch-{number}-{extra}.bin"
                payload = data + str(extra).encode()
                with open(path, "wb") as handle:
                    handle.write(payload)
                paths.append(path)
                digests.append(hashlib.sha256(payload).hexdigest())
            result = self.cli("enqueue", *paths, "--destination", destination, "--json")
            if result.returncode == 0:
                for item, digest in zip(json.loads(result.stdout), digests):
                    self.acknowledged.append(("batch", destination, digest, item["id"]))
            return
        # Half the enqueues ask for a patch of the app's record once uploaded (the recording server takes it).
        patch = f"{self.recorder}/record/{self.session}/items/{number}" if self.rng.random() < 0.5 else None
        extra = ["--patch-url", patch] if patch else []
        if action == "copy":
            path = f"{self.work}/src/copy-{number}.bin"
            with open(path, "wb") as handle:
                handle.write(data)
            result = self.cli("enqueue", path, "--destination", destination, "--json", *extra)
        elif action == "move":
            path = f"{self.mount}/incoming/move-{number}.bin"
            self.write_durably(path, data)
            self.sync_directory(f"{self.mount}/incoming")
            result = self.cli("enqueue", path, "--mode", "move", "--destination", destination, "--json", *extra)
        elif action == "reference":
            path = f"{self.mount}/refs/ref-{number}.bin"
            self.write_durably(path, data)
            self.sync_directory(f"{self.mount}/refs")
            result = self.cli("enqueue", path, "--mode", "reference", "--then", f"move:{self.mount}/sent",
                              "--destination", destination, "--json", *extra)
        elif action == "prune":
            # Only what an earlier check verified is old enough to go: the history since then is younger.
            if self.verified_at is not None:
                age = max(1, int(time.time() - self.verified_at) + 2)
                self.cli("prune", "--older-than", f"{age}s")
            return
        else:
            path = f"{self.work}/src/cancel-{number}.bin"
            with open(path, "wb") as handle:
                handle.write(data or b"x")
            digest = hashlib.sha256(data or b"x").hexdigest()
            result = self.cli("enqueue", path, "--destination", "nowhere", "--json")
            if result.returncode == 0:
                job = json.loads(result.stdout)[0]["id"]
                self.acknowledged.append(("enqueue", "nowhere", digest, job))
                cancel = self.cli("cancel", job)
                if cancel.returncode == 0:
                    self.cancelled.append((job, digest))
            return
        if result.returncode == 0:
            job_id = json.loads(result.stdout)[0]["id"]
            self.acknowledged.append((action, destination, digest, job_id))
            if action == "move":
                self.moved.append((path, digest))
            elif action == "reference":
                self.references.append((path, digest))
            if patch:
                self.patches[job_id] = urllib.parse.urlparse(patch).path

    def life(self, index):
        """One life: boot on what the last cut left, work until the power goes: at a site not yet cut (the sites
        of a first boot first, before them), or any site, or at a random moment."""
        uncovered = [name for name, _, _ in SITES if name not in self.cut_sites and name != "metrics"]
        reached = self.reached()
        first_boot = ["sqlite-journal", "space-reserve"]
        if index < len(first_boot):
            targets, random_cut, before = [first_boot[index]], False, True
        else:
            targets = [name for name in uncovered if name in reached] or uncovered
            if not targets:
                targets = [name for name, _, _ in SITES if name != "metrics"]
            random_cut = self.rng.random() < (0.4 if uncovered else 0.75)
            before = self.rng.random() < 0.5
        pattern = None
        count = 1
        if not random_cut:
            target = self.rng.choice(targets)
            pattern = dict((name, regex) for name, regex, _ in SITES)[target]
            count = 1 if reached.get(target, 0) < 30 else self.rng.randint(1, 3)
        # Booted on what the cut left, before anything runs: what must already hold is checked; then the power is
        # armed for this life's cut.
        self.mount_fs()
        self.check_after_cut(index)
        if pattern:
            for socket_path in (self.socket, self.second_socket):
                answer = control(socket_path, f"arm {pattern} {count} {'before' if before else 'after'}")
                if answer != "armed":
                    raise RuntimeError(f"powercutfs answered {answer!r} to arm")
        self.start_daemon()
        started = time.monotonic()
        limit = self.rng.uniform(0.3, 3.0) if random_cut else 12.0
        while time.monotonic() - started < limit:
            if self.daemon.poll() is not None and not self.stats()["dead"]:
                self.violations.append(f"life {index}: the daemon exited by itself ({self.daemon.returncode})")
                break
            try:
                self.step()
            except OSError:
                break                         # the file system is dead
            if self.stats()["dead"]:
                break
            time.sleep(self.rng.uniform(0, 0.2))
        died_at = self.stats().get("died_at")
        if not died_at:
            self.random_cuts += 1
        if died_at:
            kind, _, path = died_at.partition(":")
            name = site_of(kind, path) or f"unknown ({died_at})"
            self.cut_sites[name] = self.cut_sites.get(name, 0) + 1
        self.cut(tear=self.rng.random() < 0.3)

    def check_after_cut(self, index):
        """Right after a cut, before the daemon starts: the queue opens with SQLite's integrity_check ok; every
        acknowledged hand-over not yet verified is in the queue with its SHA-256 (a spool drop may still be in the
        spool); no job that still needs its file points at a missing or short one. (The drains check the rest.)"""
        if not os.path.exists(f"{self.mount}/state/queue.sqlite"):
            return
        self.checked_cuts += 1
        listing = self.cli("list", "--json", "--limit", "100000")
        if listing.returncode != 0:
            self.violations.append(f"after cut {index}: the queue does not open: {listing.stderr.strip()[:300]}")
            return
        database = sqlite3.connect(f"{self.mount}/state/queue.sqlite")
        integrity = database.execute("PRAGMA integrity_check").fetchone()[0]
        database.close()
        if integrity != "ok":
            self.violations.append(f"after cut {index}: integrity_check: {integrity}")
        jobs = json.loads(listing.stdout)
        by_id = {job["id"]: job for job in jobs}
        by_content = {(job["sha256"], job["destination"]) for job in jobs}
        cancelled = {job for job, _ in self.cancelled}
        spool = set(os.listdir(f"{self.second}/spool"))
        for how, destination, digest, job_id in self.acknowledged[self.acknowledged_checked:]:
            if job_id in cancelled or job_id in self.jobs_checked or destination == "nowhere":
                continue
            if job_id is not None:
                if by_id.get(job_id, {}).get("sha256") != digest:
                    self.violations.append(f"after cut {index}: acknowledged {how} job {job_id} is "
                                           f"{'gone' if job_id not in by_id else 'another content'}")
            elif (digest, destination) not in by_content and self.spool_names.get(digest) not in spool:
                if not any(job["sha256"] == digest for job in jobs):
                    self.violations.append(f"after cut {index}: an acknowledged spool drop "
                                           f"({self.spool_names.get(digest)}) is neither in the spool nor queued")
        for job in jobs:
            if job["state"] == "uploaded" or job["mode"] == "reference":
                continue
            sizes = []
            for path in (job["file"], job["source_path"]):
                try:
                    sizes.append(os.stat(path).st_size)
                except OSError:
                    pass
            if job["size"] not in sizes:
                self.violations.append(f"after cut {index}: job {job['id']} ({job['state']}) points at "
                                       f"{'a short copy' if sizes else 'no file'}")

    def reached(self):
        sites = {}
        if os.path.exists(self.fsync_log):
            with open(self.fsync_log) as log:
                for line in log:
                    fields = line.rstrip("\n").split("\t")
                    if len(fields) >= 3:
                        own = fields[1].startswith("own-")
                        name = "own" if own else site_of(fields[1], fields[2]) or f"unknown ({fields[1]}:{fields[2]})"
                        sites[name] = sites.get(name, 0) + 1
        return sites

    # --- the end: drain, then the invariants

    def drain(self):
        self.mount_fs()
        self.start_daemon()
        deadline = time.monotonic() + float(os.environ.get("DRAIN_SECONDS", 300))
        jobs = []
        while time.monotonic() < deadline:
            # Jobs for the destination that never answers are the workload's cancels: a cut may have come before
            # the cancel was acknowledged.
            listing = self.cli("list", "--json", "--limit", "100000")
            if listing.returncode == 0:
                jobs = json.loads(listing.stdout)
                for job in jobs:
                    if job["destination"] == "nowhere" and job["state"] in ("pending", "uploading", "failed"):
                        self.cli("cancel", job["id"])
                active = [j for j in jobs if j["state"] in ("pending", "uploading") and j["destination"] != "nowhere"]
                if not active and not self.spool_leftovers() and self.owed_releases()[0] == 0:
                    break
            time.sleep(0.5)
        self.daemon.send_signal(signal.SIGTERM)
        self.daemon.wait(timeout=60)
        self.daemon = None
        return [j for j in json.loads(self.cli("list", "--json", "--limit", "100000").stdout)]

    def owed_releases(self):
        """Uploaded copies still to release, and why the last try failed."""
        status = self.cli("status", "--json")
        if status.returncode != 0:
            return -1, status.stderr.strip()
        releases = json.loads(status.stdout).get("releases", {})
        return releases.get("owed", 0), releases.get("error")

    def spool_leftovers(self):
        """What is still in the spool, but the sidecars of drops never acknowledged (the power went between the
        dropper's two renames: the sidecar is in, its file never came)."""
        names = [f for f in os.listdir(f"{self.second}/spool") if not f.startswith(".")]
        return [f for f in names if not (f.endswith(".uploadq.json") and f[:-len(".uploadq.json")] not in self.dropped
                                         and f[:-len(".uploadq.json")] not in names)]

    def clean(self):
        """After a check: the delivered, archived and moved files that passed go (durably), and with them every
        hand-over checked so far."""
        for folder in (f"{self.mount}/delivered", f"{self.mount}/sent", f"{self.second}/archive",
                       f"{self.second}/spool/.rejected"):
            for directory, _, files in os.walk(folder):
                for name in files:
                    os.unlink(os.path.join(directory, name))
                self.sync_directory(directory)
        self.acknowledged_checked = len(self.acknowledged)
        self.cancelled_checked = len(self.cancelled)
        self.rejected_checked = len(self.rejected)
        self.moved_checked = len(self.moved)
        self.references_checked = len(self.references)
        self.jobs_checked.update(job["id"] for job in self.last_jobs)
        self.verified_at = time.time()

    def check(self, jobs):
        self.last_jobs = jobs
        jobs = [job for job in jobs if job["id"] not in self.jobs_checked]
        by_sha = {}
        for job in self.last_jobs:
            by_sha.setdefault((job["sha256"], job["destination"]), []).append(job)
        by_id = {job["id"]: job for job in self.last_jobs}
        cancelled = {job for job, _ in self.cancelled}
        for how, destination, digest, job_id in self.acknowledged[self.acknowledged_checked:]:
            if destination == "nowhere":
                continue
            found = by_id.get(job_id) if job_id else next(iter(by_sha.get((digest, destination), [])), None)
            if found is None or found["sha256"] != digest:
                self.violations.append(f"lost: an acknowledged {how} to {destination} ({digest[:12]}, job {job_id})")
                continue
            if found["id"] in self.jobs_checked:
                continue                      # verified in an earlier epoch
            if found["state"] != "uploaded":
                self.violations.append(f"stuck: job {found['id']} ({how}) is {found['state']}: "
                                       f"{found.get('last_error')}")
                continue
            kind = {"local": "file", "tus": "tus"}.get(destination, "s3")
            stored = stored_sha256(found, kind, self.tus_files, self.s3_endpoint, self.bucket, S3_AUTH)
            if stored != digest:
                self.violations.append(f"{'missing' if stored is None else 'corrupt'} on its server: job "
                                       f"{found['id']} ({how}) {found.get('remote_url')}")
        for job_id, digest in self.cancelled[self.cancelled_checked:]:
            if job_id in by_id:
                self.violations.append(f"an acknowledged cancel came back: job {job_id} is {by_id[job_id]['state']}")
            kept = [p for p in glob.glob(f"{self.mount}/state/cancelled/**", recursive=True) if os.path.isfile(p)]
            if not any(sha256_file(p) == digest for p in kept):
                self.violations.append(f"the file of cancelled job {job_id} is not in cancelled/")
        for job in jobs:
            if job["state"] == "failed" and job["id"] not in cancelled and job["destination"] != "nowhere":
                self.violations.append(f"failed: job {job['id']}: {job.get('last_error')}")
        owed, error = self.owed_releases()
        if owed:
            self.violations.append(f"{owed} uploaded copies never released: {error}")
        leftovers = self.spool_leftovers()
        if leftovers:
            self.violations.append(f"left in the spool: {leftovers[:5]}")
        rejected = [p for p in glob.glob(f"{self.second}/spool/.rejected/*") if not p.endswith(".reason.txt")
                    and not p.endswith(".uploadq.json")]
        kept = {sha256_file(p) for p in rejected if os.path.isfile(p)}
        for name, digest in self.rejected[self.rejected_checked:]:
            if digest not in kept:
                self.violations.append(f"a rejected drop is not kept in .rejected/: {name}")
        unexpected = [p for p in rejected if os.path.isfile(p) and sha256_file(p) not in self.reject_attempts
                      and ".uploadq.json" not in os.path.basename(p)]
        for path in unexpected:
            reason = open(path + ".reason.txt").read().strip() if os.path.exists(path + ".reason.txt") else "no reason"
            # A cut between committing a spool file's copy and making its original's unlink durable brings the
            # original back; it is set aside as a duplicate of its job. Nothing is lost: counted, not a violation.
            if "same content as job" in reason:
                self.duplicates_set_aside += 1
            else:
                self.violations.append(f"rejected from the spool: {os.path.basename(path)}: {reason[:200]}")
        _, body = http("GET", f"{self.recorder}/control/{self.session}/requests")
        patched = {urllib.parse.urlparse(r["path"]).path for r in json.loads(body) if r["method"] == "PATCH"}
        for job in jobs:
            path = self.patches.get(job["id"])
            if path and job["state"] == "uploaded" and path not in patched:
                self.violations.append(f"the patch of uploaded job {job['id']} never reached {path}")
        hooked = set(open(self.hooks_log).read().split()) if os.path.exists(self.hooks_log) else set()
        for job in jobs:
            if job["state"] == "uploaded" and job["id"] not in hooked:
                self.violations.append(f"hook never ran for uploaded job {job['id']}")
        local_files = [f for f in glob.glob(f"{self.mount}/delivered/**", recursive=True)
                       if os.path.isfile(f) and not os.path.basename(f).startswith(".")]
        local_jobs = sum(1 for j in jobs if j["destination"] == "local" and j["state"] == "uploaded")
        if len(local_files) != local_jobs:
            self.violations.append(f"the local target holds {len(local_files)} files for {local_jobs} uploaded jobs")
        # No file twice: one job per content and destination (the workload's contents are all different).
        for (digest, destination), same in by_sha.items():
            live = [job for job in same if job["id"] not in cancelled and job["destination"] != "nowhere"]
            if len(live) > 1:
                self.violations.append(f"{len(live)} jobs for one content to {destination}: "
                                       f"{[job['id'] for job in live]}")
        # A move's source is gone once acknowledged; one a cut interrupted is gone too once its job exists (the
        # queue took it over), or still there with no job (the hand-over never happened).
        for path, _ in self.moved[self.moved_checked:]:
            if os.path.exists(path):
                self.violations.append(f"an acknowledged move left its source behind: {os.path.basename(path)}")
        contents = {job["sha256"] for job in self.last_jobs}
        for name in os.listdir(f"{self.mount}/incoming"):
            if sha256_file(f"{self.mount}/incoming/{name}") in contents:
                self.violations.append(f"a move's source is still in incoming/ beside its job: {name}")
        # A reference's file is the user's: once uploaded it is under sent/, whole, and no longer under refs/.
        sent = {sha256_file(p) for p in glob.glob(f"{self.mount}/sent/*") if os.path.isfile(p)}
        for path, digest in self.references[self.references_checked:]:
            if os.path.exists(path):
                self.violations.append(f"an uploaded reference was not moved to sent/: {os.path.basename(path)}")
            if digest not in sent:
                self.violations.append(f"a reference's file is not in sent/: {os.path.basename(path)}")
        for name in os.listdir(f"{self.mount}/refs"):
            if sha256_file(f"{self.mount}/refs/{name}") in contents:
                self.violations.append(f"a reference still in refs/ though its job is done: {name}")
        database = sqlite3.connect(f"file:{self.mount}/state/queue.sqlite?mode=ro", uri=True)
        integrity = database.execute("PRAGMA integrity_check").fetchone()[0]
        ledger = database.execute("SELECT used FROM metered_budget").fetchone()
        metered = database.execute("SELECT COALESCE(SUM(bytes), 0) FROM traffic WHERE link_class = 'metered'") \
            .fetchone()[0]
        database.close()
        if integrity != "ok":
            self.violations.append(f"integrity_check: {integrity}")
        # The budget's ledger: never negative, never more than the metered bytes the traffic counted (both are
        # written in one transaction; a new period starts the ledger at 0).
        self.metered_bytes = metered
        if ledger is not None and not 0 <= ledger[0] <= metered:
            self.violations.append(f"the budget ledger says {ledger[0]} bytes, the metered traffic {metered}")

    def run(self):
        self.log = open(f"{self.work}/processes.log", "ab")
        self.write_config()
        started = time.monotonic()
        try:
            epoch = int(os.environ.get("EPOCH", 25))
            for index in range(self.cuts):
                self.life(index)
                if (index + 1) % epoch == 0 and index + 1 < self.cuts:
                    self.check(self.drain())
                    self.clean()
                    self.cut(tear=False)
            jobs = self.drain()
            self.check(jobs)
        finally:
            if self.daemon:
                self.kill_everything()
            if self.fs:
                try:
                    self.cut(tear=False)
                except Exception:
                    for mount in (self.mount, self.second):
                        subprocess.run(["fusermount3", "-u", "-z", mount], check=False)
        reached = self.reached()
        elapsed = time.monotonic() - started
        print(f"powercut: {self.cuts} cuts ({self.cuts - self.random_cuts} at a chosen fsync, {self.random_cuts} at "
              f"random moments) in {elapsed:.0f} s; {len(self.acknowledged)} hand-overs acknowledged, "
              f"{len(self.cancelled)} cancels; {len(jobs)} jobs at the end; "
              f"{self.duplicates_set_aside} spool originals set aside as duplicates after a cut; "
              f"{self.metered_bytes} metered bytes counted; the queue checked right after {self.checked_cuts} cuts")
        if self.metered_bytes == 0:
            self.violations.append("no metered byte was counted: the budget ledger was never exercised")
        print(f"{'site':<24}{'reached':>9}{'cut':>6}  where")
        unreached = []
        for name, _, where in SITES:
            print(f"{name:<24}{reached.get(name, 0):>9}{self.cut_sites.get(name, 0):>6}  {where}")
            if not reached.get(name):
                unreached.append(name)
        for name in sorted(set(reached) - {n for n, _, _ in SITES} - {"own"}):
            print(f"{name:<24}{reached[name]:>9}{self.cut_sites.get(name, 0):>6}  (not in the site list)")
            self.violations.append(f"an fsync the site list does not name: {name}")
        for violation in self.violations[:40]:
            print("powercut: VIOLATION " + violation)
        required = [n for n in unreached if n not in os.environ.get("POWERCUT_OPTIONAL_SITES", "").split(",")]
        if required:
            print("powercut: sites never reached: " + ", ".join(required))
        ok = not self.violations and not required
        print("powercut: OK" if ok else "powercut: FAILED")
        return 0 if ok else 1


def main():
    harness = Harness()
    status = 1
    try:
        status = harness.run()
        return status
    finally:
        if os.environ.get("POWERCUT_KEEP") or (status != 0 and os.environ.get("POWERCUT_KEEP_ON_FAILURE")):
            print(f"powercut: kept {harness.work}")
        else:
            shutil.rmtree(harness.work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
