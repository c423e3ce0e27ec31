"""What the chaos and soak harnesses share: plain HTTP, the fault proxy's control API, and file digests.

Import it with contrib/test-servers on sys.path (both harnesses do).
"""
import hashlib
import json
import os
import urllib.parse
import urllib.request


def http(method, url, body=None, headers=None):
    """One request; returns (status, body). Raises on a 4xx/5xx answer."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, response.read()


def start_proxy(control, upstream):
    """A new fault proxy in front of `upstream` (host:port): {"id": ..., "port": ...}."""
    _, body = http("POST", control + "/proxies", json.dumps({"upstream": upstream}).encode(),
                   {"Content-Type": "application/json"})
    return json.loads(body)


def add_rule(control, proxy, rule):
    """Appends a rule (see fault_proxy.py) to the proxy."""
    http("POST", f"{control}/proxies/{proxy['id']}/rules", json.dumps(rule).encode(), {"Content-Type": "application/json"})


def clear_rules(control, proxy):
    """Drops every rule of the proxy."""
    http("DELETE", f"{control}/proxies/{proxy['id']}/rules")


def proxy_stats(control, proxy):
    """The proxy's byte counts and request log."""
    _, body = http("GET", f"{control}/proxies/{proxy['id']}/stats")
    return json.loads(body)


def proxy_bytes(control, proxy):
    """Request-body bytes the proxy has forwarded."""
    return proxy_stats(control, proxy)["body_bytes"]


def authority(url):
    """host:port of a URL."""
    return url.split("://", 1)[1].split("/", 1)[0]


def sha256_file(path):
    """Hex SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def stored_sha256(job, kind, tus_files, s3_endpoint, bucket, s3_auth):
    """SHA-256 of what the server holds for an uploaded job (kind: "file", "tus" or "s3"), or None when the
    server has nothing there."""
    if kind == "file":
        stored = urllib.parse.unquote(job["remote_url"][len("file://"):])
        return sha256_file(stored) if os.path.exists(stored) else None
    if kind == "tus":
        stored = os.path.join(tus_files, job["remote_url"].rstrip("/").rsplit("/", 1)[1])
        return sha256_file(stored) if os.path.exists(stored) else None
    key = job["remote_url"].split(f"/{bucket}/", 1)[1]
    try:
        _, body = http("GET", f"{s3_endpoint}/{bucket}/{key}", headers={"Authorization": s3_auth})
        return hashlib.sha256(body).hexdigest()
    except Exception:
        return None
