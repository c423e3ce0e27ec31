"""A client of uploadq's control API (docs/api.md) with Python's standard library alone: HTTP/1.1 on the daemon's
Unix socket through http.client. Copy this file into your project; it depends on nothing else.

    from uploadq_client import UploadQueue
    queue = UploadQueue("/run/uploadq/api.sock")
    job = queue.enqueue("/home/me/photo.jpg", meta={"record": "42"}, idempotency_key="photo-42")
    queue.wait(job["id"])
    for completion in queue.completions(timeout=30):
        queue.acknowledge(completion["id"])
    for event in queue.follow(since=0, live=True):   # every event kept, then each as it happens ("following" first)
        print(event["type"], event.get("job"))
"""
import http.client
import json
import socket
import time
import urllib.parse


class UploadQueueError(Exception):
    """A refusal or failure of the API: `status` (HTTP), `code` (stable, e.g. job-not-found) and `message`."""

    def __init__(self, status, code, message):
        super().__init__(f"{code}: {message}")
        self.status, self.code, self.message = status, code, message


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


class UploadQueue:
    """The daemon at `socket_path` (`[api] socket`; by default state_dir/api.sock)."""

    def __init__(self, socket_path, timeout=30.0):
        self.socket_path, self.timeout = socket_path, timeout

    def request(self, method, path, body=None, query=None, headers=None, wait=0.0):
        """One request; the decoded JSON answer (None for 204). Raises UploadQueueError for a 4xx or 5xx. A
        `too-many-requests` (this user's other requests of the kind are being answered) is sent again, a few times,
        after a moment."""
        if query:
            path += "?" + urllib.parse.urlencode(query)
        for attempt in range(5):
            try:
                return self._request_once(method, path, body, headers, wait)
            except UploadQueueError as error:
                if error.code != "too-many-requests" or attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))

    def _request_once(self, method, path, body, headers, wait):
        connection = _UnixConnection(self.socket_path, self.timeout + wait)
        try:
            data = None if body is None else json.dumps(body).encode()
            sent = {"Content-Type": "application/json"} if data is not None else {}
            connection.request(method, path, body=data, headers={**sent, **(headers or {})})
            response = connection.getresponse()
            payload = response.read()
        finally:
            connection.close()
        answer = json.loads(payload) if payload else None
        if response.status >= 400:
            error = (answer or {}).get("error", {})
            raise UploadQueueError(response.status, error.get("code", "unknown"), error.get("message", ""))
        return answer

    def health(self):
        return self.request("GET", "/v1/health")

    def enqueue(self, path, idempotency_key=None, **options):
        """Hands a file over by absolute path; options: destination, meta, patch, priority, on_metered (and mode,
        source_after_upload for the queue's own user). Returns {"id", "deduplicated", "replayed"}."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return self.request("POST", "/v1/jobs", body={"path": path, **options}, headers=headers)

    def job(self, job_id):
        return self.request("GET", f"/v1/jobs/{job_id}")

    def jobs(self, state=None, limit=1000):
        """Jobs newest first, up to `limit`, read page by page (a page holds at most 1,000 and about 1 MiB)."""
        jobs, before = [], None
        while len(jobs) < limit:
            query = {"limit": min(1000, limit - len(jobs)), **({"state": state} if state else {}),
                     **({"before": before} if before else {})}
            page = self.request("GET", "/v1/jobs", query=query)
            jobs += page["jobs"]
            before = page.get("next")
            if not before:
                break
        return jobs

    def spool(self):
        """Spool files left where they are for a reason of their owner's: [{"name", "reason", "message", ...}]."""
        return self.request("GET", "/v1/spool")["held"]

    def wait(self, job_id, states=("uploaded", "failed"), timeout=30.0):
        """The job once it is in one of `states`, or as it is after `timeout` seconds (see its "reached")."""
        return self.request("GET", f"/v1/jobs/{job_id}/wait", query={"state": ",".join(states), "timeout": timeout},
                            wait=timeout)

    def enqueue_batch(self, requests):
        """Hands many files over at once (each a dict with "path" and the options of enqueue): one result per file,
        in order, each {"id", ...} or {"error": {"code", "message"}}."""
        return self.request("POST", "/v1/jobs/batch", body={"jobs": requests})["results"]

    def cancel(self, job_id):
        return self.request("POST", f"/v1/jobs/{job_id}/cancel")

    def retry(self, job_id, hooks=False):
        return self.request("POST", f"/v1/jobs/{job_id}/retry", query={"hooks": "true"} if hooks else None)

    def retry_failed(self):
        """Makes every failed job pending now; the ids it changed."""
        return self.request("POST", "/v1/jobs/retry-failed")["retried"]

    def events(self, since=None, timeout=0.0, limit=1000):
        """The durable events after `since` (None: from now on) and the seq to ask for next: (events, since). With a
        timeout, waits until there is one."""
        query = {"timeout": timeout, "limit": limit, **({"since": since} if since is not None else {})}
        connection = _UnixConnection(self.socket_path, self.timeout + timeout)
        try:
            connection.request("GET", "/v1/events?" + urllib.parse.urlencode(query))
            response = connection.getresponse()
            payload = response.read()
            if response.status >= 400:
                error = json.loads(payload).get("error", {})
                raise UploadQueueError(response.status, error.get("code", "unknown"), error.get("message", ""))
            lines = [json.loads(line) for line in payload.splitlines() if line]
            return lines, int(response.getheader("Uploadq-Seq"))
        finally:
            connection.close()

    def follow(self, since=None, live=False):
        """Yields each event as the daemon logs it: first a "following" line ("from_seq": where it starts), then those
        after `since` (None: from now on); with `live`, also progress, patch, hook and link lines (without a "seq").
        Returns when the stream ends (the daemon stopped, or this reader fell behind: the last event is then
        "dropped"); follow again from the last "seq" seen (or "from_seq" - 1)."""
        query = {"live": "true" if live else "false", **({"since": since} if since is not None else {})}
        connection = _UnixConnection(self.socket_path, None)
        try:
            connection.request("GET", "/v1/events/stream?" + urllib.parse.urlencode(query))
            response = connection.getresponse()
            if response.status >= 400:
                error = json.loads(response.read()).get("error", {})
                raise UploadQueueError(response.status, error.get("code", "unknown"), error.get("message", ""))
            try:
                for line in response:
                    yield json.loads(line)
            except http.client.IncompleteRead:
                return  # the daemon stopped: it closes the connection
        finally:
            connection.close()

    def link(self):
        return self.request("GET", "/v1/link")

    def set_link(self, mode):
        """Sets the link class by hand (auto, metered, unmetered, offline); root and the queue's user only."""
        return self.request("PUT", "/v1/link", body={"mode": mode})

    def completions(self, timeout=0.0, limit=100):
        """Uploaded jobs not acknowledged yet, oldest first; with a timeout, waits until there is one."""
        return self.request("GET", "/v1/completions", query={"timeout": timeout, "limit": limit},
                            wait=timeout)["completions"]

    def acknowledge(self, job_id):
        """The completion was handled: it is not delivered again, also after a restart."""
        self.request("POST", f"/v1/completions/{job_id}/ack")

    def status(self):
        return self.request("GET", "/v1/status")
