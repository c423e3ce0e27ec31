"""Power-cut harness for uploadq: the state directory, the spool, the sources of `--mode move` and `reference`, the
local target and the archive live on powercutfs (contrib/powercut/powercutfs.py), which loses at a cut everything
that was not fsynced, names whose directory was not fsynced included. A workload runs (spool drops, enqueues by
copy, move and reference, cancels, uploads to tus, S3 and a local directory, archiving releases, hooks) until the
power goes: at the k-th fsync of a chosen site (right after it, or instead of it) or at a random moment, with the
last unsynced write torn now and then. Then every process is killed, the file system keeps only what was durable,
and the next life boots on it. After the last cut the daemon drains the queue and the invariants are checked.

Run it through contrib/powercut/run.sh (which builds the pieces and starts the servers). Settings (environment):
  CUTS=40        power cuts (each site is cut at least once when CUTS allows; the rest at random moments)
  SEED=1         random seed
  UPLOADQ_BINARY the uploadq binary (default: .build/release/uploadq, else .build/debug/uploadq)
  POWERCUT_KEEP  keep the work directory

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
    ("sqlite-directory", r"^dir:state$", "SQLite: the state directory once the WAL is created; SpaceReserve"),
    ("blob-copy", r"^file:state/blobs/\.[^/]*\.tmp$", "BlobStore.commit: one intake copy's data"),
    ("blob-batch", r"^syncfs:$", "BlobStore.commit: a batch of intake copies (syncfs)"),
    ("blob-sidecar", r"^file:state/blobs/[^./][^/]*\.uploadq\.json$", "BlobStore: a spool sidecar kept beside its blob"),
    ("blobs-directory", r"^dir:state/blobs$", "BlobStore.commit, adopt; FileReleaser: names in blobs/"),
    ("spool-directory", r"^dir:spool$", "BlobStore.adopt, SpoolWatcher: a spool file's name gone"),
    ("rejected-directory", r"^dir:spool/\.rejected$", "SpoolWatcher: a rejected file's name and its reason"),
    ("move-source-directory", r"^dir:incoming$", "BlobStore.adopt: enqueue --mode move's source name gone"),
    ("target-data", r"^file:delivered/", "LocalDirectoryUploader: the delivered copy, chunk by chunk"),
    ("target-directory", r"^dir:delivered(/.*)?$", "LocalDirectoryUploader: the delivered name"),
    ("archive-directory", r"^dir:archive(/.*)?$", "FileReleaser: an archived copy's name (and its new folders)"),
    ("reference-directory", r"^dir:refs$", "FileReleaser: a reference file moved away after its upload"),
    ("sent-directory", r"^dir:sent$", "FileReleaser: a reference file's new name under move:DIR"),
    ("cancelled-directory", r"^dir:state/cancelled$", "CancelledFiles: a cancelled job's file kept"),
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
        self.mount = f"{self.work}/mnt"
        self.image = f"{self.work}/image"
        self.socket = f"{self.work}/control.sock"
        self.fsync_log = f"{self.work}/fsyncs.log"
        self.hooks_log = f"{self.work}/hooks.log"
        self.config = f"{self.work}/uploadq.toml"
        self.fs = None
        self.daemon = None
        self.counter = 0
        # What was handed over, and acknowledged: (how, destination, sha256, job id or None).
        self.acknowledged = []
        self.cancelled = []
        self.rejected = []                # names dropped with a sidecar the config does not allow
        self.violations = []
        self.cut_sites = {}
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
dir = "{self.mount}/spool"
destination = "local"
quiet_period = "200ms"
network_quiet_period = "1s"
rescan_interval = "2s"
sidecar_destinations = ["local", "tus", "s3"]
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
archive_dir = "{self.mount}/archive"
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
[destinations.s3]
protocol = "s3"
endpoint = "{self.s3_endpoint}"
bucket = "{self.bucket}"
part_size = "5MiB"
multipart_threshold = "5MiB"
access_key_env = "POWERCUT_ACCESS"
secret_key_env = "POWERCUT_SECRET"
circuit_threshold = 0
[destinations.nowhere]
protocol = "tus"
url = "http://127.0.0.1:9/files/"
circuit_threshold = 0
""")

    def env(self):
        env = dict(os.environ, POWERCUT_ACCESS="AKIDPOWER", POWERCUT_SECRET="power/secret",
                   LD_PRELOAD=self.shim, POWERCUT_CONTROL=self.socket)
        env.pop("UPLOADQ_CONFIG", None)
        return env

    # --- lives

    def mount_fs(self, die_at=None, die_count=1, die_before=False):
        os.makedirs(self.mount, exist_ok=True)
        command = ["/usr/bin/python3", f"{HERE}/powercutfs.py", self.mount, "--image", self.image, "--control",
                   self.socket, "--fsync-log", self.fsync_log, "--seed", str(self.rng.randrange(1 << 30)),
                   "--own-pid", str(os.getpid())]
        if die_at:
            command += ["--die-at", die_at, "--die-count", str(die_count)] + (["--die-before"] if die_before else [])
        self.fs = subprocess.Popen(command, stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 20
        while not (is_mounted(self.mount) and os.path.exists(self.socket)):
            if self.fs.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("powercutfs did not mount; see its log")
            time.sleep(0.05)
        for folder in ("state", "spool", "incoming", "refs", "sent", "staging", "archive", "delivered", "metrics"):
            path = f"{self.mount}/{folder}"
            if not os.path.isdir(path):
                os.mkdir(path)
                self.sync_directory(self.mount)

    def stats(self):
        try:
            return json.loads(control(self.socket, "stats"))
        except (OSError, ValueError):
            return {"dead": True, "died_at": None}

    def start_daemon(self):
        self.daemon = subprocess.Popen([self.binary, "daemon", "--config", self.config], env=self.env(),
                                       stdout=self.log, stderr=self.log)

    def kill_everything(self):
        """The power is gone: every process with a file, a directory or its root on the mount dies at once."""
        if self.daemon and self.daemon.poll() is None:
            self.daemon.kill()
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) in (os.getpid(), self.fs.pid if self.fs else -1):
                continue
            try:
                links = [os.readlink(f"/proc/{pid}/cwd")]
                links += [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
            except OSError:
                continue
            if any(link.startswith(self.mount + "/") or link == self.mount for link in links):
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self.daemon:
            self.daemon.wait()
            self.daemon = None

    def cut(self, tear):
        try:
            control(self.socket, "die")
        except OSError:
            pass
        self.kill_everything()
        answer = control(self.socket, "cut tear" if tear else "cut", timeout=60)
        if answer != "cut":
            raise RuntimeError(f"powercutfs answered {answer!r} to cut")
        self.fs.wait(timeout=60)
        if is_mounted(self.mount):
            subprocess.run(["fusermount3", "-u", "-z", self.mount], check=False)
        self.fs = None

    # --- the workload: each step hands something over and records it once it is acknowledged

    def content(self):
        self.counter += 1
        size = self.rng.choice([0, 1, 700, 40_000, 200_000, 900_000, 6 << 20 if self.rng.random() < 0.1 else 300_000])
        return self.counter, self.rng.randbytes(size)

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
                                  "reference", "cancel"])
        destination = self.rng.choice(["local", "tus", "s3"])
        if action.startswith("spool"):
            name = f"drop-{number}.jpg"
            # The dropper's own contract: its file is handed over once its data and its name in the spool are on
            # disk (written aside, fsynced, renamed in, the spool fsynced).
            self.write_durably(f"{self.mount}/staging/{name}", data)
            if action != "spool":
                if action == "spool-reject":
                    destination = "nowhere"       # not in sidecar_destinations: the file is set aside, kept
                sidecar = json.dumps({"destination": destination}).encode()
                self.write_durably(f"{self.mount}/staging/{name}.uploadq.json", sidecar)
                os.rename(f"{self.mount}/staging/{name}.uploadq.json", f"{self.mount}/spool/{name}.uploadq.json")
            else:
                destination = "local"
            os.rename(f"{self.mount}/staging/{name}", f"{self.mount}/spool/{name}")
            self.sync_directory(f"{self.mount}/spool")
            if action == "spool-reject":
                self.rejected.append((name, digest))
            else:
                self.acknowledged.append(("spool", destination, digest, None))
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
        if action == "copy":
            path = f"{self.work}/src/copy-{number}.bin"
            with open(path, "wb") as handle:
                handle.write(data)
            result = self.cli("enqueue", path, "--destination", destination, "--json")
        elif action == "move":
            path = f"{self.mount}/incoming/move-{number}.bin"
            self.write_durably(path, data)
            self.sync_directory(f"{self.mount}/incoming")
            result = self.cli("enqueue", path, "--mode", "move", "--destination", destination, "--json")
        elif action == "reference":
            path = f"{self.mount}/refs/ref-{number}.bin"
            self.write_durably(path, data)
            self.sync_directory(f"{self.mount}/refs")
            result = self.cli("enqueue", path, "--mode", "reference", "--then", f"move:{self.mount}/sent",
                              "--destination", destination, "--json")
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
            self.acknowledged.append((action, destination, digest, json.loads(result.stdout)[0]["id"]))

    def life(self, index):
        """One life: boot on what the last cut left, work until the power goes."""
        uncovered = [name for name, _, _ in SITES if name not in self.cut_sites and name != "metrics"]
        reached = self.reached()
        targets = [name for name in uncovered if name in reached] or uncovered
        random_cut = self.rng.random() < 0.4 or not targets
        pattern = None
        if not random_cut:
            target = self.rng.choice(targets)
            pattern = dict((name, regex) for name, regex, _ in SITES)[target]
        self.mount_fs(die_at=pattern, die_count=self.rng.randint(1, 3), die_before=self.rng.random() < 0.5)
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
        if died_at:
            kind, _, path = died_at.partition(":")
            name = site_of(kind, path) or f"unknown ({died_at})"
            self.cut_sites[name] = self.cut_sites.get(name, 0) + 1
        self.cut(tear=self.rng.random() < 0.3)

    def reached(self):
        sites = {}
        if os.path.exists(self.fsync_log):
            with open(self.fsync_log) as log:
                for line in log:
                    fields = line.rstrip("\n").split("\t")
                    if len(fields) >= 3:
                        name = site_of(fields[1], fields[2]) or f"unknown ({fields[1]}:{fields[2]})"
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
                spool = [f for f in os.listdir(f"{self.mount}/spool") if not f.startswith(".")]
                if not active and not spool:
                    break
            time.sleep(0.5)
        self.daemon.send_signal(signal.SIGTERM)
        self.daemon.wait(timeout=60)
        self.daemon = None
        return [j for j in json.loads(self.cli("list", "--json", "--limit", "100000").stdout)]

    def check(self, jobs):
        by_sha = {}
        for job in jobs:
            by_sha.setdefault((job["sha256"], job["destination"]), []).append(job)
        by_id = {job["id"]: job for job in jobs}
        cancelled = {job for job, _ in self.cancelled}
        for how, destination, digest, job_id in self.acknowledged:
            if destination == "nowhere":
                continue
            found = by_id.get(job_id) if job_id else next(iter(by_sha.get((digest, destination), [])), None)
            if found is None or found["sha256"] != digest:
                self.violations.append(f"lost: an acknowledged {how} to {destination} ({digest[:12]}, job {job_id})")
                continue
            if found["state"] != "uploaded":
                self.violations.append(f"stuck: job {found['id']} ({how}) is {found['state']}: "
                                       f"{found.get('last_error')}")
                continue
            kind = {"local": "file", "tus": "tus"}.get(destination, "s3")
            stored = stored_sha256(found, kind, self.tus_files, self.s3_endpoint, self.bucket, S3_AUTH)
            if stored != digest:
                self.violations.append(f"{'missing' if stored is None else 'corrupt'} on its server: job "
                                       f"{found['id']} ({how}) {found.get('remote_url')}")
        for job_id, digest in self.cancelled:
            if job_id in by_id:
                self.violations.append(f"an acknowledged cancel came back: job {job_id} is {by_id[job_id]['state']}")
            kept = [p for p in glob.glob(f"{self.mount}/state/cancelled/**", recursive=True) if os.path.isfile(p)]
            if not any(sha256_file(p) == digest for p in kept):
                self.violations.append(f"the file of cancelled job {job_id} is not in cancelled/")
        for job in jobs:
            if job["state"] == "failed" and job["id"] not in cancelled and job["destination"] != "nowhere":
                self.violations.append(f"failed: job {job['id']}: {job.get('last_error')}")
        leftovers = [f for f in os.listdir(f"{self.mount}/spool") if not f.startswith(".")]
        if leftovers:
            self.violations.append(f"left in the spool: {leftovers[:5]}")
        rejected = [p for p in glob.glob(f"{self.mount}/spool/.rejected/*") if not p.endswith(".reason.txt")
                    and not p.endswith(".uploadq.json")]
        kept = {sha256_file(p) for p in rejected if os.path.isfile(p)}
        for name, digest in self.rejected:
            if digest not in kept:
                self.violations.append(f"a rejected drop is not kept in .rejected/: {name}")
        unexpected = [p for p in rejected if os.path.isfile(p) and sha256_file(p) not in {d for _, d in self.rejected}]
        if unexpected:
            reasons = [open(p + ".reason.txt").read().strip()[:200] for p in unexpected
                       if os.path.exists(p + ".reason.txt")]
            self.violations.append(f"rejected from the spool: {len(unexpected)} files: {reasons[:3]}")
        hooked = set(open(self.hooks_log).read().split()) if os.path.exists(self.hooks_log) else set()
        for job in jobs:
            if job["state"] == "uploaded" and job["id"] not in hooked:
                self.violations.append(f"hook never ran for uploaded job {job['id']}")
        local_files = [f for f in glob.glob(f"{self.mount}/delivered/**", recursive=True)
                       if os.path.isfile(f) and not os.path.basename(f).startswith(".")]
        local_jobs = sum(1 for j in jobs if j["destination"] == "local" and j["state"] == "uploaded")
        if len(local_files) != local_jobs:
            self.violations.append(f"the local target holds {len(local_files)} files for {local_jobs} uploaded jobs")
        database = sqlite3.connect(f"file:{self.mount}/state/queue.sqlite?mode=ro", uri=True)
        integrity = database.execute("PRAGMA integrity_check").fetchone()[0]
        database.close()
        if integrity != "ok":
            self.violations.append(f"integrity_check: {integrity}")

    def run(self):
        self.log = open(f"{self.work}/processes.log", "ab")
        self.write_config()
        started = time.monotonic()
        try:
            for index in range(self.cuts):
                self.life(index)
            jobs = self.drain()
            self.check(jobs)
        finally:
            if self.daemon:
                self.kill_everything()
            if self.fs:
                try:
                    self.cut(tear=False)
                except Exception:
                    subprocess.run(["fusermount3", "-u", "-z", self.mount], check=False)
        reached = self.reached()
        elapsed = time.monotonic() - started
        print(f"powercut: {self.cuts} cuts in {elapsed:.0f} s; {len(self.acknowledged)} hand-overs acknowledged, "
              f"{len(self.cancelled)} cancels; {len(jobs)} jobs at the end")
        print(f"{'site':<24}{'reached':>9}{'cut':>6}  where")
        unreached = []
        for name, _, where in SITES:
            print(f"{name:<24}{reached.get(name, 0):>9}{self.cut_sites.get(name, 0):>6}  {where}")
            if not reached.get(name):
                unreached.append(name)
        for name in sorted(set(reached) - {n for n, _, _ in SITES}):
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
    try:
        return harness.run()
    finally:
        if os.environ.get("POWERCUT_KEEP") or os.environ.get("POWERCUT_KEEP_ON_FAILURE"):
            print(f"powercut: kept {harness.work}")
        else:
            shutil.rmtree(harness.work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
