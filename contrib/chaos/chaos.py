"""Chaos harness for uploadq: a mixed workload to tus, S3 and a local directory while the daemon is killed with
SIGKILL at random moments, the fault proxy resets connections and, now and then, answers as a captive portal for a
few daemon lifetimes (a login page, a redirect, a 511: nothing may count as uploaded through it); then every file
is checked on its server.

Run it through contrib/chaos/run.sh (which starts the servers). Settings (environment):
  KILLS=50      SIGKILLs (each followed by a restart)
  PORTALS=3     captive-portal windows on both proxies, each over two daemon lifetimes
  FILES=100     files, sizes 0 B .. MAX_MIB, spread over the three destinations
  MAX_MIB=64    largest file
  SEED=1        random seed (sizes, kill moments, resets)
  BANDWIDTH_MIB=32  the daemon's send cap, so that kills land mid-transfer
  UPLOADQ_BINARY  the uploadq binary (default: .build/release/uploadq, else .build/debug/uploadq)

Prints kills survived, bytes re-sent per kill, and lost / corrupt / duplicate counts; exits 1 unless all three are 0
and every job is uploaded.
"""
import glob
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "test-servers"))
from harness import stored_sha256, http, start_proxy, add_rule, clear_rules, proxy_bytes, authority, sha256_file  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
S3_AUTH = "AWS4-HMAC-SHA256 Credential=AKIDCHAOS/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00"


def main():
    kills = int(os.environ.get("KILLS", 50))
    portals = int(os.environ.get("PORTALS", 3))
    count = int(os.environ.get("FILES", 100))
    max_mib = int(os.environ.get("MAX_MIB", 64))
    rng = random.Random(int(os.environ.get("SEED", 1)))
    binary = os.environ.get("UPLOADQ_BINARY") or next(
        (p for p in (f"{ROOT}/.build/release/uploadq", f"{ROOT}/.build/debug/uploadq") if os.path.exists(p)), None)
    if not binary:
        sys.exit("chaos: no uploadq binary; build it first (swift build)")
    control = os.environ["UPLOADQ_TEST_PROXY_CONTROL"]
    tus_endpoint = os.environ["UPLOADQ_TEST_TUS_ENDPOINT"]
    tus_files = os.environ["UPLOADQ_TEST_TUS_FILES"]
    s3_endpoint = os.environ["UPLOADQ_TEST_S3_ENDPOINT"]

    work = tempfile.mkdtemp(prefix="uploadq-chaos-")
    try:
        tus_proxy = start_proxy(control, authority(tus_endpoint))
        s3_proxy = start_proxy(control, authority(s3_endpoint))
        for proxy in (tus_proxy, s3_proxy):
            add_rule(control, proxy, {"action": "reset", "after_bytes": 128 << 10, "probability": 0.03, "times": -1})
        bucket = "chaos-" + hashlib.sha1(work.encode()).hexdigest()[:10]
        http("PUT", f"{s3_endpoint}/{bucket}")
        config = f"{work}/uploadq.toml"
        with open(config, "w") as handle:
            handle.write(f"""
state_dir = "state"
[limits]
concurrency = 4
[bandwidth]
unmetered = "{os.environ.get('BANDWIDTH_MIB', '32')}MiB"
[retry]
initial_interval = "300ms"
initial_attempts = 100000
later_interval = "1s"
jitter = 0.2
[destinations.tus]
protocol = "tus"
url = "http://127.0.0.1:{tus_proxy['port']}/files/"
chunk_size = "4MiB"
stall_timeout = "3s"
circuit_threshold = 0
[destinations.s3]
protocol = "s3"
endpoint = "http://127.0.0.1:{s3_proxy['port']}"
bucket = "{bucket}"
part_size = "5MiB"
multipart_threshold = "8MiB"
access_key_env = "CHAOS_ACCESS"
secret_key_env = "CHAOS_SECRET"
stall_timeout = "3s"
circuit_threshold = 0
[destinations.local]
protocol = "file"
url = "file://delivered"
chunk_size = "1MiB"
""")
        env = dict(os.environ, CHAOS_ACCESS="AKIDCHAOS", CHAOS_SECRET="chaos/secret")
        env.pop("UPLOADQ_CONFIG", None)

        # The workload: sizes from 0 B up, a few at the maximum, spread over the destinations.
        destinations = ["tus", "s3", "local"]
        os.makedirs(f"{work}/files")
        expected = {}
        for index in range(count):
            shape = rng.random()
            if index == 0:
                size = 0
            elif shape < 0.5:
                size = rng.randint(1, 512 << 10)
            elif shape < 0.85:
                size = rng.randint(512 << 10, max(512 << 10, (max_mib << 20) // 4))
            else:
                size = rng.randint((max_mib << 20) // 2, max_mib << 20)
            path = f"{work}/files/f{index:03d}.bin"
            with open(path, "wb") as handle:
                remaining = size
                while remaining:
                    block = rng.randbytes(min(remaining, 1 << 20))
                    handle.write(block)
                    remaining -= len(block)
            expected[path] = (destinations[index % 3], size)
        ids = {}
        for destination in destinations:
            paths = [p for p, (d, _) in expected.items() if d == destination]
            out = subprocess.run([binary, "enqueue", *paths, "--destination", destination, "--config", config,
                                  "--json"], env=env, capture_output=True, text=True, check=True)
            for item in json.loads(out.stdout):
                ids[item["path"]] = item["id"]
        jobs = set(ids.values())
        network_bytes = sum(size for p, (d, size) in expected.items() if d != "local")
        print(f"chaos: {len(jobs)} jobs, {sum(s for _, s in expected.values()) / 2**20:.0f} MiB, {kills} kills",
              flush=True)

        log = open(f"{work}/daemon.log", "ab")

        def start():
            return subprocess.Popen([binary, "daemon", "--config", config], env=env, stdout=log, stderr=log)

        survived = 0
        started = time.monotonic()
        styles = ["html", "redirect", "511"]
        portal_starts = sorted(rng.sample(range(max(0, kills - 1)), min(portals, max(0, kills - 1))))
        portal_kills = {start + lifetime for start in portal_starts for lifetime in (0, 1)}
        portal_windows = 0
        for kill in range(kills):
            portal = kill in portal_kills
            if portal and kill - 1 not in portal_kills:
                portal_windows += 1
                for proxy in (tus_proxy, s3_proxy):
                    clear_rules(control, proxy)
                    add_rule(control, proxy, {"action": "portal", "style": styles[portal_windows % 3], "times": -1})
            daemon = start()
            time.sleep(rng.uniform(0.3, 2.0))
            daemon.send_signal(signal.SIGKILL)
            daemon.wait()
            survived += 1
            if portal and kill + 1 not in portal_kills:
                for proxy in (tus_proxy, s3_proxy):
                    clear_rules(control, proxy)
                    add_rule(control, proxy, {"action": "reset", "after_bytes": 128 << 10, "probability": 0.03,
                                              "times": -1})

        daemon = start()
        deadline = time.monotonic() + float(os.environ.get("FINISH_SECONDS", 900))
        counts = {}
        while time.monotonic() < deadline:
            status = subprocess.run([binary, "status", "--json", "--config", config], env=env, capture_output=True,
                                    text=True)
            if status.returncode == 0:
                summary = json.loads(status.stdout)
                counts = summary["counts"]
                # A transient failure is `failed` with a retry ahead: only failures for good end the wait.
                settled_failures = counts.get("failed", 0) and counts.get("failed") == summary["failed_permanent"]
                if counts.get("uploaded") == len(jobs) or settled_failures and not any(
                        counts.get(s) for s in ("pending", "uploading")):
                    break
            time.sleep(0.5)
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
        elapsed = time.monotonic() - started

        listing = subprocess.run([binary, "list", "--json", "--limit", "100000", "--config", config], env=env,
                                 capture_output=True, text=True, check=True)
        by_id = {job["id"]: job for job in json.loads(listing.stdout)}
        lost = corrupt = duplicate = 0
        problems = []
        for path, (destination, size) in expected.items():
            job = by_id.get(ids[path])
            if job is None or job["state"] != "uploaded" or not job.get("remote_url"):
                lost += 1
                problems.append(f"not uploaded: {path} ({job and job['state']}: {job and job.get('last_error')})")
        seen = set()
        for job in by_id.values():
            if job["state"] != "uploaded" or job["id"] in seen:
                continue
            seen.add(job["id"])
            kind = {"local": "file", "tus": "tus"}.get(job["destination"], "s3")
            actual = stored_sha256(job, kind, tus_files, s3_endpoint, bucket, S3_AUTH)
            if actual is None:
                lost += 1
                problems.append(f"missing on its server: {job['id']} {job['remote_url']}")
            elif actual != job["sha256"]:
                corrupt += 1
                problems.append(f"corrupt: {job['id']} {job['remote_url']}")

        # Exactly once: objects on each server against jobs.
        local_files = [f for f in glob.glob(f"{work}/delivered/**", recursive=True)
                       if os.path.isfile(f) and not os.path.basename(f).startswith(".")]
        local_jobs = sum(1 for j in by_id.values() if j["destination"] == "local")
        duplicate += max(0, len(local_files) - local_jobs)
        _, body = http("GET", f"{s3_endpoint}/{bucket}?list-type=2&max-keys=10000", headers={"Authorization": S3_AUTH})
        namespace = "{http://s3.amazonaws.com/doc/2006-03-01/}"
        objects = ElementTree.fromstring(body).findall(f"{namespace}Contents")
        s3_jobs = sum(1 for j in by_id.values() if j["destination"] == "s3")
        duplicate += max(0, len(objects) - s3_jobs)
        tus_urls = {j["remote_url"].rstrip("/").rsplit("/", 1)[1] for j in by_id.values() if j["destination"] == "tus"}
        tus_shas = {j["sha256"] for j in by_id.values() if j["destination"] == "tus"}
        complete_copies = 0
        for info_path in glob.glob(f"{tus_files}/*.info"):
            upload = info_path[:-len(".info")]
            if not os.path.exists(upload):
                continue
            with open(info_path) as handle:
                info = json.load(handle)
            if info.get("size") is not None and info.get("offset") == info.get("size") and \
                    os.path.basename(upload) not in tus_urls and sha256_file(upload) in tus_shas:
                complete_copies += 1
        duplicate += complete_copies
        _, body = http("GET", f"{s3_endpoint}/{bucket}?uploads", headers={"Authorization": S3_AUTH})
        open_uploads = len(ElementTree.fromstring(body).findall(f"{namespace}Upload"))

        # The S3 secret must not show anywhere a person or a log collector looks.
        outputs = [open(f"{work}/daemon.log", "rb").read().decode("utf-8", "replace"), listing.stdout]
        for command in (["status"], ["status", "--json"], ["status", "--prometheus"],
                        *[["show", job_id] for job_id in list(by_id)[:10]]):
            outputs.append(subprocess.run([binary, *command, "--config", config], env=env, capture_output=True,
                                          text=True).stdout)
        leaks = sum(output.count(env["CHAOS_SECRET"]) for output in outputs)
        if leaks:
            problems.append(f"the S3 secret appears {leaks} time(s) in logs or CLI output")

        sent = proxy_bytes(control, tus_proxy) + proxy_bytes(control, s3_proxy)
        resent = max(0, sent - network_bytes)
        print(f"chaos: {survived} kills survived in {elapsed:.0f} s, {portal_windows} captive-portal windows; "
              f"states {counts}")
        print(f"chaos: {sent} bytes through the proxies for {network_bytes} of network files: "
              f"{resent / max(1, survived) / 2**20:.2f} MiB re-sent per kill")
        print(f"chaos: lost {lost}, corrupt {corrupt}, duplicate {duplicate}; "
              f"S3 multipart uploads left open: {open_uploads}; secrets leaked: {leaks}")
        for problem in problems[:20]:
            print("chaos: " + problem)
        if lost or corrupt or duplicate or leaks or counts.get("uploaded") != len(jobs):
            print("chaos: FAILED; daemon log tail:")
            with open(f"{work}/daemon.log", "rb") as handle:
                print(handle.read()[-4000:].decode("utf-8", "replace"))
            return 1
        print("chaos: OK")
        return 0
    finally:
        if os.environ.get("CHAOS_KEEP"):
            print(f"chaos: kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
