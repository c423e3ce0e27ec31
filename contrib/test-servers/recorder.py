"""A small recording HTTP server for uploadq's tests: keeps every request it gets and answers from a script.

Usage: recorder.py PORT STORE_DIR

Requests to /record/SESSION/... (any method) are recorded: method, path, headers, body size and SHA-256; a
multipart/form-data body is split into its fields and its file part, whose bytes are kept under STORE_DIR.
The answer is the next scripted one for the session, else 201 with `Location: /record/SESSION/objects/N`.

A PUT answered 2xx stores its body, as a DAV server would: under its path and under the Location it was given; asked
for it with `Want-Repr-Digest: sha-256=N` (RFC 9530, N > 0), the answer carries the body's `Repr-Digest`.
A HEAD or GET of a stored path answers 200 with its length (and, for GET, its bytes) without taking a scripted
answer; of any other path, the next scripted answer, else 404.

  POST /control/SESSION/responses   [{"status": 500, "headers": {...}, "body": "..."}, {"close": true}, ...]
  GET  /control/SESSION/requests    the recorded requests, oldest first
"""
import base64
import email.parser
import email.policy
import hashlib
import json
import os
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
REQUESTS = {}
SCRIPTS = {}
STORE = "."
STORED = {}  # path -> file under STORE holding the body a PUT left there


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.dispatch()

    def do_HEAD(self):
        self.dispatch()

    def do_POST(self):
        self.dispatch()

    def do_PUT(self):
        self.dispatch()

    def do_PATCH(self):
        self.dispatch()

    def do_DELETE(self):
        self.dispatch()

    def do_OPTIONS(self):
        self.dispatch()

    def dispatch(self):
        parts = [part for part in self.path.split("?")[0].split("/") if part]
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if len(parts) >= 2 and parts[0] == "control":
            return self.control(parts[1], parts[2:], body)
        if len(parts) >= 2 and parts[0] == "record":
            return self.record(parts[1], body)
        self.answer(404, {}, b"not found")

    def control(self, session, rest, body):
        if rest == ["responses"] and self.command == "POST":
            with LOCK:
                SCRIPTS.setdefault(session, []).extend(json.loads(body))
            return self.answer(200, {"Content-Type": "application/json"}, b"{}")
        if rest == ["requests"] and self.command == "GET":
            with LOCK:
                data = json.dumps(REQUESTS.get(session, [])).encode()
            return self.answer(200, {"Content-Type": "application/json"}, data)
        self.answer(404, {}, b"no such control route")

    def record(self, session, body):
        entry = {
            "method": self.command,
            "path": self.path,
            "headers": {name.lower(): value for name, value in self.headers.items()},
            "body_length": len(body),
            "body_sha256": hashlib.sha256(body).hexdigest(),
        }
        content_type = self.headers.get("Content-Type", "")
        if content_type.startswith("multipart/form-data"):
            entry["form"] = split_form(content_type, body, session)
        elif len(body) <= 65536:
            entry["body"] = body.decode("utf-8", "replace")
        path = self.path.split("?")[0]
        with LOCK:
            log = REQUESTS.setdefault(session, [])
            log.append(entry)
            number = len(log)
            stored = STORED.get(path) if self.command in ("HEAD", "GET") else None
            script = SCRIPTS.get(session) or []
            scripted = script.pop(0) if script and stored is None else None
        if stored is not None:
            with open(stored, "rb") as handle:
                data = handle.read()
            return self.answer(200, {"Content-Type": "application/octet-stream"}, data, length=len(data))
        if scripted and scripted.get("close"):
            self.close_connection = True
            self.connection.close()
            return
        if scripted:
            status = int(scripted.get("status", 200))
            headers = dict(scripted.get("headers", {}))
            if self.command == "PUT" and 200 <= status < 300:
                self.keep(path, headers.get("Location"), body)
                for name, value in self.repr_digest(body).items():
                    headers.setdefault(name, value)  # a scripted one (a lie, say) stands
            return self.answer(status, headers, scripted.get("body", "").encode())
        if self.command in ("HEAD", "GET"):
            return self.answer(404, {"Content-Type": "text/plain"}, b"not stored here")
        location = f"/record/{session}/objects/{number}"
        headers = {"Location": location, "Content-Type": "application/json"}
        if self.command == "PUT":
            self.keep(path, location, body)
            headers.update(self.repr_digest(body))
        self.answer(201, headers, json.dumps({"url": location}).encode())

    def repr_digest(self, body):
        """`Repr-Digest` of a stored body when the request asked for sha-256 with a preference above 0."""
        wanted = self.headers.get("Want-Repr-Digest", "")
        preferences = dict(part.strip().split("=", 1) for part in wanted.split(",") if "=" in part)
        try:
            preference = int(preferences.get("sha-256", "0"))
        except ValueError:
            preference = 0
        if preference <= 0:
            return {}
        return {"Repr-Digest": "sha-256=:" + base64.b64encode(hashlib.sha256(body).digest()).decode() + ":"}

    def keep(self, path, location, body):
        """Keeps a PUT's body under its path and the Location its answer gives."""
        digest = hashlib.sha256(body).hexdigest()
        target = os.path.join(STORE, f"put-{digest}")
        with open(target, "wb") as handle:
            handle.write(body)
        with LOCK:
            STORED[path] = target
            if location:
                STORED[urllib.parse.urlsplit(location).path] = target

    def answer(self, status, headers, body, length=None):
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


def split_form(content_type, body, session):
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body)
    fields, files = {}, []
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        filename = part.get_param("filename", header="content-disposition")
        data = part.get_payload(decode=True) or b""
        if filename is None:
            fields[name] = data.decode("utf-8")
            continue
        digest = hashlib.sha256(data).hexdigest()
        path = os.path.join(STORE, f"{session}-{digest}")
        with open(path, "wb") as handle:
            handle.write(data)
        files.append({"field": name, "filename": filename, "content_type": part.get_content_type(),
                      "size": len(data), "sha256": digest})
    return {"fields": fields, "files": files}


def main():
    global STORE
    STORE = sys.argv[2]
    os.makedirs(STORE, exist_ok=True)
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
