"""Soak harness for uploadq: a month of a field device in well under an hour. Photos are dropped into the spool in
bursts for three destinations (a local folder, tus and S3 through a fault proxy) while the link flaps between
unmetered, metered and offline, the proxy answers 503 for a while and resets a few connections, the daemon is
killed with SIGKILL, the small tmpfs holding its state is filled up by another writer, and the wall clock steps
back an hour. Then every photo is checked on its server, and the state directory, the daemon's memory and
descriptors, the bytes sent on a metered link and the database before and after a prune are reported.

Run it through contrib/soak/run.sh (which starts the servers; it mounts a tmpfs, so it runs as root). Settings
(environment; SHORT=1 picks the short defaults, in brackets, that CI runs):
  PHOTOS=20000 [400]     photos, sizes log-uniform between MIN_KIB=50 [50] and MAX_KIB=8192 [1024]
  DURATION=1500 [60]     seconds over which photos are dropped (bursts of BURST_MIN=20 [10] to BURST_MAX=300
                         [60] files, in the first 85 %) and the faults below happen
  KILLS=30 [4]           SIGKILLs of the daemon, spread over DURATION, each followed by a restart
  LINK_SECONDS=20 [5]    how often the link is set by hand (`uploadq link`): mostly unmetered or auto
  LINK_GRACE=2 [2]       seconds after a switch to metered/offline in which a transfer may still finish its chunk
  METERED_SLACK_KIB=256 [256]  what may go over a metered/offline link after that grace, in all
  WINDOWS=3 [2]          503 windows of WINDOW_SECONDS=10 [3] on both proxies
  PORTALS=3 [1]          captive-portal windows of WINDOW_SECONDS on both proxies (a 200 login page, a redirect to
                         another origin, a 511, in turn): nothing may be uploaded through them, nothing fail for them
  FILLS=2 [2]            times the tmpfs is filled to the last byte by a filler file, held FILL_SECONDS=15 [4]
  STATE_MIB=1024 [256]   the tmpfs holding state_dir; MIN_FREE="64MiB" ["32MiB"] is [limits] min_free_space
  BANDWIDTH_MIB=64 [8]   the daemon's unmetered send cap (0: none), so kills and link switches land mid-transfer
  TUS_CHUNK_KIB=2048 [256]  the tus chunk size (smaller in the short run, so its photos take several PATCHes)
  CLOCK_STEP=-3600       seconds the wall clock steps at 40 % of DURATION (every later daemon keeps it)
  FINISH_SECONDS=1800 [300]  how long the last daemon may take to empty the queue and the spool
  SAMPLE_SECONDS=5 [2]   how often the state size, the daemon's RSS and open descriptors are sampled
  SEED=1                 random seed (sizes, bursts, destinations, fault moments)
  SOAK_KEEP=1            keep the work directory (and a copy of the state) for a look afterwards
  UPLOADQ_BINARY         the uploadq binary (default: .build/release/uploadq, else .build/debug/uploadq)

Exits 1 unless no photo is lost, duplicated or corrupt, nothing is left in the spool or in blobs/, the daemon never
died by itself, nothing but a chunk in flight went over a metered or offline link, no S3 secret leaked, and the
daemon's RSS and descriptors stayed flat (last-quarter median at most 1.5x + 32 MiB, and + 20 descriptors, of the
first quarter's). Every summary line starts with `soak: `. The harness's own events (kills, link switches, windows,
fills, the clock step) are written into the daemon's log as `soak: [T s] ...` lines; a failed run prints the log's
tail, and for a duplicate tus upload the job's log lines and proxy requests.
"""
import base64
import errno
import glob
import hashlib
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse
import xml.etree.ElementTree as ElementTree

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "test-servers"))
from harness import stored_sha256, http, start_proxy, add_rule, clear_rules, proxy_stats, proxy_bytes, authority, sha256_file  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
S3_AUTH = "AWS4-HMAC-SHA256 Credential=AKIDSOAK/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00"
S3_NAMESPACE = "{http://s3.amazonaws.com/doc/2006-03-01/}"
BASE_RULE = {"action": "reset", "after_bytes": 128 << 10, "probability": 0.03, "times": -1}
RESTRICTED = ("metered", "offline")
MIB = 2 ** 20


def s3_keys(endpoint, bucket):
    """Every object key in the bucket (ListObjectsV2, paged)."""
    keys, token = [], None
    while True:
        query = "list-type=2&max-keys=1000" + (f"&continuation-token={urllib.parse.quote(token, safe='')}" if token else "")
        _, body = http("GET", f"{endpoint}/{bucket}?{query}", headers={"Authorization": S3_AUTH})
        tree = ElementTree.fromstring(body)
        keys += [c.findtext(f"{S3_NAMESPACE}Key") for c in tree.findall(f"{S3_NAMESPACE}Contents")]
        token = tree.findtext(f"{S3_NAMESPACE}NextContinuationToken")
        if tree.findtext(f"{S3_NAMESPACE}IsTruncated") != "true" or not token:
            return keys


def tree_size(path, skip=()):
    """Bytes of the regular files under path (apparent size, as du -sb), and how many there are."""
    total = files = 0
    stack = [path]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.path in skip:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
                    files += 1
            except OSError:
                pass
    return total, files


def spread(count, rng, start=0.0, end=1.0):
    """count moments in [start, end), one in each equal slice, so they spread over the whole span."""
    width = (end - start) / max(1, count)
    return [start + width * (i + rng.uniform(0.1, 0.9)) for i in range(count)]


def stats_text(values, unit=1, fmt="{:.1f}"):
    if not values:
        return "no samples"
    values = [v / unit for v in values]
    return "min " + fmt.format(min(values)) + ", median " + fmt.format(statistics.median(values)) + \
        ", max " + fmt.format(max(values))


def quarters(values):
    """Medians of the first and of the last quarter of the samples (in time order)."""
    if len(values) < 4:
        return None, None
    quarter = len(values) // 4
    return statistics.median(values[:quarter]), statistics.median(values[-quarter:])


def main():
    short = os.environ.get("SHORT", "") not in ("", "0")

    def setting(name, full, short_value=None):
        value = os.environ.get(name)
        if value is None or value == "":
            return short_value if short and short_value is not None else full
        return type(full)(value)

    photos = setting("PHOTOS", 20000, 400)
    min_kib = setting("MIN_KIB", 50, 50)
    max_kib = setting("MAX_KIB", 8192, 1024)
    duration = setting("DURATION", 1500.0, 60.0)
    burst_min = setting("BURST_MIN", 20, 10)
    burst_max = setting("BURST_MAX", 300, 60)
    kills = setting("KILLS", 30, 4)
    link_seconds = setting("LINK_SECONDS", 20.0, 5.0)
    link_grace = setting("LINK_GRACE", 2.0, 2.0)
    metered_slack = setting("METERED_SLACK_KIB", 256, 256) << 10
    windows = setting("WINDOWS", 3, 2)
    window_seconds = setting("WINDOW_SECONDS", 10.0, 3.0)
    portals = setting("PORTALS", 3, 1)
    fills = setting("FILLS", 2, 2)
    fill_seconds = setting("FILL_SECONDS", 15.0, 4.0)
    state_mib = setting("STATE_MIB", 1024, 256)
    min_free = setting("MIN_FREE", "64MiB", "32MiB")
    bandwidth_mib = setting("BANDWIDTH_MIB", 64, 8)
    tus_chunk_kib = setting("TUS_CHUNK_KIB", 2048, 256)
    clock_step = setting("CLOCK_STEP", -3600.0)
    finish_seconds = setting("FINISH_SECONDS", 1800.0, 300.0)
    sample_seconds = setting("SAMPLE_SECONDS", 5.0, 2.0)
    seed = setting("SEED", 1)
    keep = os.environ.get("SOAK_KEEP", "") not in ("", "0")
    rng = random.Random(seed)

    binary = os.environ.get("UPLOADQ_BINARY") or next(
        (p for p in (f"{ROOT}/.build/release/uploadq", f"{ROOT}/.build/debug/uploadq") if os.path.exists(p)), None)
    if not binary:
        sys.exit("soak: no uploadq binary; build it first (swift build)")
    shim = os.environ.get("UPLOADQ_TEST_CLOCKSHIFT", "")
    if not shim or not os.path.isfile(shim):
        sys.exit(f"soak: the clock-step shim {shim or '$UPLOADQ_TEST_CLOCKSHIFT'} is missing; "
                 "run contrib/test-servers/setup.sh and start through contrib/test-servers/run.sh")
    if os.geteuid() != 0:
        sys.exit("soak: mounting the state tmpfs needs root")
    control = os.environ["UPLOADQ_TEST_PROXY_CONTROL"]
    tus_endpoint = os.environ["UPLOADQ_TEST_TUS_ENDPOINT"]
    tus_files = os.environ["UPLOADQ_TEST_TUS_FILES"]
    s3_endpoint = os.environ["UPLOADQ_TEST_S3_ENDPOINT"]

    began = time.monotonic()
    work = tempfile.mkdtemp(prefix="uploadq-soak-")
    state = f"{work}/state"
    spool = f"{work}/spool"
    filler = f"{state}/filler"
    log_path = f"{work}/daemon.log"
    clock_file = f"{work}/clock-offset"
    os.makedirs(state)
    os.makedirs(spool)
    mounted = False
    proxies = []
    daemon = None
    stop = threading.Event()
    threads = []
    failed = True

    def on_term(signum, frame):
        sys.exit(128 + signum)  # runs the finally block: the daemon stops, the tmpfs goes

    signal.signal(signal.SIGTERM, on_term)
    try:
        # A copy of the binary, so a rebuild in the tree during the run changes nothing under the soak.
        shutil.copy2(binary, f"{work}/uploadq")
        subprocess.run([f"{work}/uploadq", "--help"], check=True, capture_output=True)
        source_binary, binary = binary, f"{work}/uploadq"
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={state_mib}m,mode=0700", "uploadq-soak", state],
                       check=True)
        mounted = True
        tus_proxy = start_proxy(control, authority(tus_endpoint))
        s3_proxy = start_proxy(control, authority(s3_endpoint))
        proxies = [tus_proxy, s3_proxy]
        for proxy in proxies:
            add_rule(control, proxy, BASE_RULE)
        bucket = "soak-" + hashlib.sha1(work.encode()).hexdigest()[:10]
        http("PUT", f"{s3_endpoint}/{bucket}")
        config = f"{work}/uploadq.toml"
        with open(config, "w") as handle:
            handle.write(f"""
state_dir = "{state}"
[spool]
dir = "{spool}"
destination = "photos_local"
quiet_period = "300ms"
rescan_interval = "2s"
sidecar_destinations = ["photos_local", "photos_tus", "photos_s3"]
[limits]
concurrency = 4
min_free_space = "{min_free}"
[bandwidth]
unmetered = "{bandwidth_mib}MiB"
[retry]
initial_interval = "300ms"
initial_attempts = 100000
later_interval = "1s"
jitter = 0.2
[retention]
uploaded_copies = "delete"
history = "90d"
[destinations.photos_local]
protocol = "file"
url = "file://delivered"
chunk_size = "1MiB"
[destinations.photos_tus]
protocol = "tus"
url = "http://127.0.0.1:{tus_proxy['port']}/files/"
chunk_size = "{tus_chunk_kib}KiB"
stall_timeout = "3s"
circuit_threshold = 0
[destinations.photos_s3]
protocol = "s3"
endpoint = "http://127.0.0.1:{s3_proxy['port']}"
bucket = "{bucket}"
part_size = "5MiB"
multipart_threshold = "6MiB"
access_key_env = "SOAK_ACCESS"
secret_key_env = "SOAK_SECRET"
stall_timeout = "3s"
circuit_threshold = 0
""")
        secret = "soak/secret-" + hashlib.sha1(work.encode()).hexdigest()[:12]
        env = dict(os.environ, SOAK_ACCESS="AKIDSOAK", SOAK_SECRET=secret)
        env.pop("UPLOADQ_CONFIG", None)
        env.pop("LD_PRELOAD", None)
        daemon_env = dict(env, LD_PRELOAD=shim, CLOCKSHIFT_FILE=clock_file)

        def set_clock(offset):
            with open(clock_file + ".tmp", "w") as handle:
                handle.write(f"{offset:g}\n")
            os.rename(clock_file + ".tmp", clock_file)

        set_clock(0)
        leaks = [0]

        def cli(*args, check=False):
            result = subprocess.run([binary, *args, "--config", config], env=env, capture_output=True, text=True)
            leaks[0] += result.stdout.count(secret) + result.stderr.count(secret)
            if check and result.returncode != 0:
                raise RuntimeError(f"uploadq {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}")
            return result

        # The workload: names, sizes (log-uniform), destinations, and bursts spread over the first 85 %.
        low, high = math.log(max(1, min_kib) * 1024), math.log(max(min_kib, max_kib) * 1024)
        plan = []
        for index in range(photos):
            shape = rng.random()
            destination = "photos_local" if shape < 0.55 else "photos_tus" if shape < 0.85 else "photos_s3"
            size = max(64, int(math.exp(rng.uniform(low, high))))
            plan.append((f"p{index:06d}.jpg", destination, size, rng.getrandbits(64)))
        bursts, taken = [], 0
        while taken < photos:
            size = min(photos - taken, rng.randint(burst_min, max(burst_min, burst_max)))
            bursts.append(plan[taken:taken + size])
            taken += size
        burst_times = [0.0] + sorted(rng.uniform(0, 0.85 * duration) for _ in bursts[1:])
        dropped_bytes = sum(size for _, _, size, _ in plan)
        network_bytes = sum(size for _, d, size, _ in plan if d != "photos_local")
        pool = rng.randbytes(max(16 * MIB, max_kib * 1024 + MIB))
        drop_rng = random.Random(seed * 7919 + 1)
        expected = {}  # name -> (destination, size, sha256), filled as photos land in the spool
        dropper_error = []

        def drop_photo(name, destination, size, unique):
            header = f"SOAK {name} {unique:016x}\n".encode()
            offset = drop_rng.randrange(0, len(pool) - size + 1)
            body = memoryview(pool)[offset:offset + size - len(header)]
            digest = hashlib.sha256(header)
            digest.update(body)
            temporary = f"{spool}/.{name}.tmp"
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(descriptor, header)
                view = body
                while view:
                    view = view[os.write(descriptor, view):]
            finally:
                os.close(descriptor)
            if destination != "photos_local":
                sidecar = f"{spool}/{name}.uploadq.json"
                with open(f"{spool}/.{name}.uploadq.json.tmp", "w") as handle:
                    json.dump({"destination": destination}, handle)
                os.rename(f"{spool}/.{name}.uploadq.json.tmp", sidecar)
            expected[name] = (destination, size, digest.hexdigest())
            os.rename(temporary, f"{spool}/{name}")

        def dropper():
            try:
                for at, burst in zip(burst_times, bursts):
                    while not stop.is_set() and time.monotonic() - started < at:
                        stop.wait(min(0.5, at - (time.monotonic() - started)))
                    for item in burst:
                        if stop.is_set():
                            return
                        drop_photo(*item)
            except BaseException as error:  # reported by the main loop
                dropper_error.append(traceback.format_exc())
                raise error

        # The samples: state size (without the filler), the current daemon's RSS and descriptors.
        current = {"pid": None, "since": 0.0}
        samples = {"state": [], "rss": [], "fds": []}

        def sampler():
            while not stop.wait(sample_seconds):
                samples["state"].append(tree_size(state, skip=(filler,))[0])
                pid = current["pid"]
                if not pid or time.monotonic() - current["since"] < 2:
                    continue  # none, or one still loading: its RSS says nothing yet
                try:
                    with open(f"/proc/{pid}/status") as handle:
                        rss = next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmRSS:"))
                    fds = len(os.listdir(f"/proc/{pid}/fd"))
                except (OSError, StopIteration):
                    continue  # between a kill and its restart
                samples["rss"].append(rss)
                samples["fds"].append(fds)

        log = open(log_path, "ab")
        notes = []   # what happened, for the log
        problems = []
        crashes = []

        def note(text, quiet=False):
            line = f"soak: [{time.monotonic() - started:6.1f}s] {text}"
            notes.append(line)
            # The same line in the daemon's log, with the wall clock's time (unshifted), to read the two together.
            log.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime())} {line}\n".encode())
            log.flush()
            if not quiet:
                print(line, flush=True)

        def start():
            process = subprocess.Popen([binary, "daemon", "--config", config], env=daemon_env, stdout=log,
                                       stderr=log)
            current.update(pid=process.pid, since=time.monotonic())
            return process

        # The timeline of faults, in seconds from the start.
        events = [(t * duration, "kill", None) for t in spread(kills, rng, 0.03, 1.0)]
        events += [(t * duration, "fill", None) for t in spread(fills, rng, 0.1, 0.9)]
        events += [(t * duration, "window", None) for t in spread(windows, rng, 0.05, 0.95)]
        styles = ["html", "redirect", "511"]
        events += [(t * duration, "portal", styles[index % 3])
                   for index, t in enumerate(spread(portals, rng, 0.1, 0.9))]
        events += [(0.4 * duration, "clock", None)]
        # Mostly unmetered or auto (what the routes say), never more than three switches without a restricted one.
        modes = ["unmetered", "auto", "metered", "offline"]
        t, since_restricted = link_seconds, 0
        while t < duration:
            mode = rng.choices(modes, weights=[35, 35, 18, 12])[0]
            if since_restricted >= 3:
                mode = rng.choice(RESTRICTED)
            since_restricted = 0 if mode in RESTRICTED else since_restricted + 1
            events.append((t, "link", mode))
            t += link_seconds
        events.sort(key=lambda event: event[0])

        cli("link", "auto", check=True)
        # What `auto` finds on this machine (unmetered where the default route is on an ethernet device): where it
        # is metered or offline, auto counts as restricted and the finish sets unmetered by hand.
        auto_class = json.loads(cli("link", "--json", check=True).stdout).get("class")
        restricted = set(RESTRICTED) | ({"auto"} if auto_class != "unmetered" else set())
        link = {"mode": "auto", "since": 0.0, "bytes": 0, "grace": False}
        metered = {"grace": 0, "late": 0, "switches": 0, "seconds": 0.0}
        history = []
        offenders = []

        def sent():
            return proxy_bytes(control, tus_proxy) + proxy_bytes(control, s3_proxy)

        def request_counts():
            return [len(proxy_stats(control, proxy)["requests"]) for proxy in proxies]

        def switch_link(mode, now):
            before = sent()  # what went before the switch belongs to the link class that was
            result = cli("link", mode)
            if result.returncode != 0:
                note(f"link {mode} refused ({result.stderr.strip()[:200]}); still {link['mode']}")
                return
            close_link_segment(now, before)
            note(f"link {mode}", quiet=True)
            # What goes while the command runs counts for the new class (for metered: within the grace).
            link.update(mode=mode, since=now, bytes=before, grace=mode in restricted)
            if mode in restricted:
                metered["switches"] += 1
                link["requests"] = request_counts()
            history.append(mode)

        def close_link_segment(now, bytes_now):
            if link["mode"] in restricted:
                late = not link["grace"]
                metered["late" if late else "grace"] += bytes_now - link["bytes"]
                metered["seconds"] += now - link["since"]
                if late and bytes_now > link["bytes"]:
                    # For the report: the requests of this period (and the one in flight when it began).
                    offenders.append((link["mode"], link["since"], now, bytes_now - link["bytes"],
                                      link["requests"], request_counts()))

        print(f"soak: {photos} photos, {dropped_bytes / MIB:.0f} MiB ({network_bytes / MIB:.0f} MiB over the network) "
              f"in {len(bursts)} bursts over {duration:.0f} s; {kills} kills, {fills} fills, {windows} 503 windows, "
              f"{portals} portal windows, "
              f"link every {link_seconds:g} s; state tmpfs {state_mib} MiB (min_free_space {min_free}); "
              f"cap {bandwidth_mib} MiB/s", flush=True)

        started = time.monotonic()
        daemon = start()
        for target in (dropper, sampler):
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            threads.append(thread)
        drop_thread = threads[0]
        window_end = fill_end = None
        window_bytes = [0, 0]  # sent into the 503 answers in all, and the count when the current window began

        def end_window():
            for proxy in proxies:
                clear_rules(control, proxy)
                add_rule(control, proxy, BASE_RULE)
            window_bytes[0] += sent() - window_bytes[1]

        fill_info = []
        survived = 0
        while events or drop_thread.is_alive():
            now = time.monotonic() - started
            if dropper_error:
                raise RuntimeError("the photo dropper failed:\n" + dropper_error[0])
            code = daemon.poll()
            if code is not None:
                crashes.append((now, code))
                note(f"the daemon exited by itself with code {code}; restarting it")
                daemon = start()
            if link["grace"] and now >= link["since"] + link_grace:
                bytes_now = sent()
                metered["grace"] += bytes_now - link["bytes"]
                link.update(bytes=bytes_now, grace=False)
            if window_end is not None and now >= window_end:
                end_window()
                window_end = None
                note("fault window over")
            if fill_end is not None and now >= fill_end:
                status = cli("status", "--json")
                disk = json.loads(status.stdout).get("disk", {}) if status.returncode == 0 else {}
                os.unlink(filler)
                fill_end = None
                fill_info.append(disk.get("intake_paused"))
                note(f"filler removed (intake paused while full: {disk.get('intake_paused')}; "
                     f"{disk.get('reason') or status.stderr.strip()[:160]})")
            if not events or events[0][0] > now:
                time.sleep(0.1)
                continue
            _, kind, argument = events.pop(0)
            if kind in ("window", "portal") and window_end is not None:
                # One fault window at a time: this one comes once the current one is over.
                events.append((window_end + 1, kind, argument))
                events.sort(key=lambda event: event[0])
                continue
            if kind == "kill":
                daemon.send_signal(signal.SIGKILL)
                daemon.wait()
                survived += 1
                note(f"kill -9 of the daemon (pid {daemon.pid}); restarting it")
                daemon = start()
            elif kind == "link":
                switch_link(argument, now)
            elif kind == "window":
                window_bytes[1] = sent()
                for proxy in proxies:
                    clear_rules(control, proxy)
                    add_rule(control, proxy, {"action": "respond", "status": 503, "times": -1})
                window_end = now + window_seconds
                note(f"503 window for {window_seconds:g} s")
            elif kind == "portal":
                window_bytes[1] = sent()
                for proxy in proxies:
                    clear_rules(control, proxy)
                    add_rule(control, proxy, {"action": "portal", "style": argument, "times": -1})
                window_end = now + window_seconds
                note(f"captive portal ({argument}) for {window_seconds:g} s")
            elif kind == "fill" and fill_end is None:
                written = 0
                descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                try:
                    for block in (b"\0" * MIB, b"\0" * 4096, b"\0" * 512):
                        while True:
                            try:
                                written += os.write(descriptor, block)
                            except OSError as error:
                                if error.errno != errno.ENOSPC:
                                    raise
                                break
                finally:
                    os.close(descriptor)
                fill_end = now + fill_seconds
                note(f"tmpfs filled: {written / MIB:.0f} MiB of filler, {shutil.disk_usage(state).free} B free")
            elif kind == "clock":
                set_clock(clock_step)
                note(f"wall clock stepped by {clock_step:+g} s")
        # A window or fill still open at the end is closed before the finish.
        if window_end is not None:
            end_window()
        if fill_end is not None:
            os.unlink(filler)
        drop_seconds = time.monotonic() - started
        final_mode = "auto" if auto_class == "unmetered" else "unmetered"
        switch_link(final_mode, drop_seconds)
        note(f"all {len(expected)} photos dropped, {survived} kills; link {final_mode} (auto finds {auto_class}); "
             "waiting for the queue to empty")

        # The finish: the daemon uploads what is left; the spool and the queue must empty by themselves.
        deadline = time.monotonic() + finish_seconds
        counts = {}
        left = []
        while True:
            code = daemon.poll()
            if code is not None:
                crashes.append((time.monotonic() - started, code))
                note(f"the daemon exited by itself with code {code}; restarting it")
                daemon = start()
            status = cli("status", "--json")
            if status.returncode == 0:
                counts = json.loads(status.stdout)["counts"]
            left = [n for n in os.listdir(spool) if not n.startswith(".")]
            if status.returncode == 0 and not left and not counts.get("pending") and not counts.get("uploading"):
                break
            if time.monotonic() > deadline:
                problems.append(f"not finished after {finish_seconds:.0f} s: states {counts}, "
                                f"{len(left)} files still in the spool")
                break
            time.sleep(1)
        finish_seconds_taken = time.monotonic() - started - drop_seconds
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            problems.append("the daemon did not stop within 60 s of SIGTERM")
            daemon.kill()
            daemon.wait()
        current["pid"] = None
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        elapsed = time.monotonic() - began

        # Every photo, checked on its server (before the prune, which removes uploaded jobs).
        listing = cli("list", "--json", "--limit", "1000000", check=True)
        jobs = json.loads(listing.stdout)
        by_name = {}
        for job in jobs:
            by_name.setdefault(job.get("original_name"), []).append(job)
        lost = corrupt = duplicate = misrouted = 0
        detail_jobs = []  # jobs whose daemon log lines the report shows
        for name, (destination, size, digest) in sorted(expected.items()):
            mine = by_name.get(name, [])
            uploaded = [j for j in mine if j["state"] == "uploaded" and j.get("remote_url")]
            if not uploaded:
                lost += 1
                where = [p for p in (f"{spool}/{name}", f"{spool}/.rejected/{name}") if os.path.exists(p)]
                problems.append(f"not uploaded: {name} ({destination}, {size} B): jobs "
                                f"{[(j['id'], j['state'], j.get('last_error')) for j in mine]}"
                                f"{'; still at ' + ', '.join(where) if where else ''}")
            elif len(uploaded) > 1:
                duplicate += len(uploaded) - 1
                problems.append(f"uploaded {len(uploaded)} times: {name}: {[j['id'] for j in uploaded]}")
            for job in mine:
                if job["destination"] != destination:
                    misrouted += 1
                    problems.append(f"{name} went to {job['destination']}, its sidecar said {destination}: {job['id']}")
                if job.get("sha256") and job["sha256"] != digest:
                    corrupt += 1
                    problems.append(f"the queue's sha256 of {name} is wrong: {job['id']}")
        strangers = [j for j in jobs if j.get("original_name") not in expected]
        for job in strangers[:10]:
            problems.append(f"a job for a file never dropped: {job['id']} {job.get('original_name')} {job['state']}")
        for job in jobs:
            if job["state"] != "uploaded" or job.get("original_name") not in expected:
                continue
            want = expected[job["original_name"]][2]
            kind = {"photos_local": "file", "photos_tus": "tus"}.get(job["destination"], "s3")
            actual = stored_sha256(job, kind, tus_files, s3_endpoint, bucket, S3_AUTH)
            if actual is None:
                lost += 1
                problems.append(f"missing on its server: {job['original_name']} {job['id']} {job['remote_url']}")
            elif actual != want:
                corrupt += 1
                problems.append(f"corrupt: {job['original_name']} {job['id']} {job['remote_url']}")

        # Exactly once: objects on each server against jobs.
        local_files = [f for f in glob.glob(f"{work}/delivered/**", recursive=True)
                       if os.path.isfile(f) and not os.path.basename(f).startswith(".")]
        local_jobs = sum(1 for j in jobs if j["destination"] == "photos_local")
        if len(local_files) > local_jobs:
            duplicate += len(local_files) - local_jobs
            problems.append(f"{len(local_files)} files delivered locally for {local_jobs} jobs")
        objects = s3_keys(s3_endpoint, bucket)
        s3_jobs = sum(1 for j in jobs if j["destination"] == "photos_s3")
        if len(objects) > s3_jobs:
            duplicate += len(objects) - s3_jobs
            problems.append(f"{len(objects)} S3 objects for {s3_jobs} jobs")
        tus_jobs = [j for j in jobs if j["destination"] == "photos_tus" and j.get("remote_url")]
        tus_urls = {j["remote_url"].rstrip("/").rsplit("/", 1)[1] for j in tus_jobs}
        tus_shas = {j["sha256"]: j for j in jobs if j["destination"] == "photos_tus"}
        for info_path in glob.glob(f"{tus_files}/*.info"):
            upload = info_path[:-len(".info")]
            if not os.path.exists(upload) or os.path.basename(upload) in tus_urls:
                continue
            with open(info_path) as handle:
                info = json.load(handle)
            if info.get("size") is not None and info.get("offset") == info.get("size"):
                job = tus_shas.get(sha256_file(upload))
                if job:
                    duplicate += 1
                    problems.append(f"a complete tus upload no job refers to: {os.path.basename(upload)} "
                                    f"(info {json.dumps(info)[:400]}), the content of {job['original_name']} "
                                    f"{job['id']}, uploaded as {job['remote_url']}")
                    detail_jobs.append((job, os.path.basename(upload)))
        _, body = http("GET", f"{s3_endpoint}/{bucket}?uploads", headers={"Authorization": S3_AUTH})
        open_uploads = len(ElementTree.fromstring(body).findall(f"{S3_NAMESPACE}Upload"))

        # Nothing may stay behind in the spool or in blobs/.
        leftovers = sorted(n for n in os.listdir(spool) if not n.startswith("."))
        rejected = sorted(os.listdir(f"{spool}/.rejected")) if os.path.isdir(f"{spool}/.rejected") else []
        for name in leftovers[:10]:
            problems.append(f"left in the spool: {name}")
        for name in rejected[:20]:
            reason = ""
            if name.endswith(".reason.txt"):
                with open(f"{spool}/.rejected/{name}", errors="replace") as handle:
                    reason = ": " + handle.read().strip()[:300]
            problems.append(f"rejected: {name}{reason}")
        blob_bytes, blob_files = tree_size(f"{state}/blobs")
        if blob_files:
            problems.append(f"{blob_files} files ({blob_bytes} B) left in blobs/")
        final_state = tree_size(state, skip=(filler,))[0]

        # The database before and after a prune of everything uploaded.
        def database_bytes():
            return sum(os.path.getsize(f"{state}/queue.sqlite{s}") for s in ("", "-wal")
                       if os.path.exists(f"{state}/queue.sqlite{s}"))

        status_text = cli("status", "--json")
        traffic = json.loads(status_text.stdout).get("traffic", {}).get("by_class") if status_text.returncode == 0 \
            else None
        database_before = database_bytes()
        prune = cli("prune", "--older-than", "1s", "--json", check=True)
        pruned = json.loads(prune.stdout)
        database_after = database_bytes()

        # The S3 secret must not show anywhere a person or a log collector looks.
        for command in (["status"], ["status", "--prometheus"], ["link", "--json"],
                        *[["show", job["id"], "--json"] for job in jobs[:5]], *[["show", job["id"]] for job in jobs[:5]]):
            cli(*command)
        with open(log_path, "rb") as handle:
            daemon_log = handle.read().decode("utf-8", "replace")
        leaks[0] += daemon_log.count(secret)
        clock_seen = "the wall clock stepped" in daemon_log
        paused = daemon_log.count("spool: intake paused")
        disk_full = daemon_log.count("released the space reserve")

        sent_total = sent()
        resent = max(0, sent_total - network_bytes)
        rss_first, rss_last = quarters(samples["rss"])
        fds_first, fds_last = quarters(samples["fds"])
        if crashes:
            problems.append(f"the daemon exited by itself {len(crashes)} time(s): {crashes[:5]}")
        if metered["late"] > metered_slack:
            problems.append(f"{metered['late']} B went over a metered/offline link after the {link_grace:g} s grace "
                            f"(allowed {metered_slack} B)")
        if rss_first and rss_last > 1.5 * rss_first + 32 * MIB:
            problems.append(f"the daemon's RSS grew: {rss_first / MIB:.1f} MiB -> {rss_last / MIB:.1f} MiB")
        if fds_first and fds_last > fds_first + 20:
            problems.append(f"the daemon's open descriptors grew: {fds_first:g} -> {fds_last:g}")
        if leaks[0]:
            problems.append(f"the S3 secret appears {leaks[0]} time(s) in the daemon log or CLI output")

        print(f"soak: wall time {elapsed:.0f} s (drops and faults {drop_seconds:.0f} s, finish {finish_seconds_taken:.0f} s); "
              f"binary {os.path.relpath(source_binary, ROOT) if source_binary.startswith(ROOT) else source_binary}")
        print(f"soak: photos {len(expected)} dropped, {dropped_bytes / MIB:.0f} MiB; jobs {len(jobs)}, states {counts}")
        print(f"soak: lost {lost}, duplicate {duplicate}, corrupt {corrupt}, misrouted {misrouted}; rejected "
              f"{len([n for n in rejected if not n.endswith('.reason.txt')])}, left in spool {len(leftovers)}")
        print(f"soak: kills {survived} survived, daemon crashes {len(crashes)}; re-sent per kill "
              f"{resent / max(1, survived) / MIB:.2f} MiB ({sent_total / MIB:.0f} MiB through the proxies for "
              f"{network_bytes / MIB:.0f} MiB of tus+s3 photos; {window_bytes[0] / MIB:.0f} MiB of it went in the "
              f"503 and portal windows)")
        print(f"soak: bytes sent on a metered link: {metered['grace'] + metered['late']} B "
              f"({metered['grace']} B within {link_grace:g} s of a switch, {metered['late']} B later) over "
              f"{metered['switches']} metered/offline periods, {metered['seconds']:.0f} s; daemon's count by class "
              f"{traffic}")
        print(f"soak: link switches {len(history)}: " + ", ".join(f"{m} {history.count(m)}" for m in modes))
        print(f"soak: state dir {stats_text(samples['state'], MIB)} MiB ({len(samples['state'])} samples), final "
              f"{final_state / MIB:.1f} MiB, blobs/ {blob_files} files {blob_bytes} B; total dropped "
              f"{dropped_bytes / MIB:.0f} MiB")
        print(f"soak: daemon RSS {stats_text(samples['rss'], MIB)} MiB; first-quarter median "
              f"{(rss_first or 0) / MIB:.1f}, last-quarter median {(rss_last or 0) / MIB:.1f}")
        print(f"soak: daemon fds {stats_text(samples['fds'], 1, '{:.0f}')}; first-quarter median {fds_first or 0:g}, "
              f"last-quarter median {fds_last or 0:g}")
        print(f"soak: database {database_before / MIB:.2f} MiB before prune, {database_after / MIB:.2f} MiB after "
              f"(pruned {pruned.get('jobs')} jobs; prune says {pruned.get('database_bytes_before')} -> "
              f"{pruned.get('database_bytes_after')} B)")
        print(f"soak: fills {len(fill_info)} (intake paused while full: {fill_info}), disk-full events in the log "
              f"{disk_full}, intake pauses {paused}; clock step seen by the daemon: {'yes' if clock_seen else 'no'}")
        print(f"soak: S3 multipart uploads left open: {open_uploads}; secrets leaked: {leaks[0]}")
        if offenders:
            logs = [proxy_stats(control, proxy)["requests"] for proxy in proxies]
            for mode, since, until, count, first, last in offenders[:5]:
                print(f"soak: {count} B went on a {mode} link from {since:.1f} s to {until:.1f} s (after the grace); "
                      f"the requests then (the first one may have begun before):")
                for name, log, begin, end in zip(("tus", "s3"), logs, first, last):
                    for entry in log[max(0, begin - 1):end][:10]:
                        print(f"soak:   {name} {entry['method']} {entry['path']} body {entry['body_bytes']} of "
                              f"{entry['content_length']} B, status {entry['status']}, action {entry['action']}")
        if detail_jobs:
            tus_log = proxy_stats(control, tus_proxy)["requests"]
        for job, orphan in detail_jobs[:3]:
            upload_ids = [orphan] + ([job["remote_url"].rstrip("/").rsplit("/", 1)[1]] if job.get("remote_url") else [])
            print(f"soak: daemon log lines of {job['original_name']} ({job['id']}; uploads {upload_ids}):")
            lines = daemon_log.splitlines()
            mine = [i for i, line in enumerate(lines)
                    if job["id"] in line or job["original_name"] in line or any(u in line for u in upload_ids)]
            for i in range(mine[0], mine[-1] + 1) if mine else ():
                if i in mine or " soak: [" in lines[i]:  # with the harness's own events in between
                    print("soak:   " + lines[i][:400])
            print(f"soak: tus proxy requests for it:")
            encoded = base64.b64encode(job["original_name"].encode()).decode()
            for index, entry in enumerate(tus_log):
                if any(u in entry["path"] for u in upload_ids) or encoded in entry["headers"].get("upload-metadata", ""):
                    print(f"soak:   #{index} {entry['method']} {entry['path']} body {entry['body_bytes']} of "
                          f"{entry['content_length']} B, status {entry['status']}, action {entry['action']}, "
                          f"offset {entry['headers'].get('upload-offset')}")
        if clock_step and not clock_seen:
            problems.append("the daemon never noticed the clock step (no 'the wall clock stepped' in its log)")
        for problem in problems[:40]:
            print("soak: " + problem)
        if len(problems) > 40:
            print(f"soak: ... and {len(problems) - 40} more problems")
        if lost or duplicate or corrupt or misrouted or problems:
            print("soak: FAILED")
            return 1
        failed = False
        print("soak: OK")
        return 0
    except Exception:
        traceback.print_exc()
        print("soak: FAILED (the harness stopped)")
        return 1
    finally:
        stop.set()
        if daemon is not None and daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        for thread in threads:
            thread.join(timeout=30)
        if failed and os.path.exists(log_path):
            print("soak: daemon log tail:")
            with open(log_path, "rb") as handle:
                handle.seek(max(0, os.path.getsize(log_path) - 6000))
                print(handle.read().decode("utf-8", "replace"), flush=True)
        for proxy in proxies:
            try:
                http("DELETE", f"{control}/proxies/{proxy['id']}")
            except Exception:
                pass
        if mounted:
            if keep:
                shutil.copytree(state, f"{work}/state.kept", ignore=shutil.ignore_patterns("filler"),
                                dirs_exist_ok=True)
            subprocess.run(["umount", "-l", state])
        if keep:
            if os.environ.get("UPLOADQ_TEST_TUS_FILES"):
                shutil.copytree(os.environ["UPLOADQ_TEST_TUS_FILES"], f"{work}/tus.kept", dirs_exist_ok=True)
            print(f"soak: kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
