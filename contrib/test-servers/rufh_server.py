"""A strict server for IETF Resumable Uploads for HTTP (draft-ietf-httpbis-resumable-upload), for uploadq's tests.

Usage: rufh_server.py PORT STORE_DIR

It speaks interop versions 6 (drafts -04/-05), 7 (-06 to -08) and 8 (-09 to -11), one per "server" made through
the control API, so tests with different limits run side by side:

  POST /control/servers             {"interop": 8, "max_append_size": N, "min_append_size": N, "max_size": N,
                                     "max_age": S, "body_cap": N, "send_104": true, "quota_full": false}
                                    -> {"id": "3", "endpoint": "http://127.0.0.1:PORT/s/3/files/"}
  POST /control/servers/ID          changes settings, and one-shot faults:
                                      {"lose_appends": N}      the next N appends are answered as a success but
                                                               nothing is stored (the offset stays)
                                      {"conflict_appends": N}  the next N appends get 409 without being looked at
                                      {"expire_all": true}     every upload of the server is gone (404 from now on)
  GET  /control/servers/ID/requests every request: method, path, headers, body_bytes, status, time
  GET  /control/servers/ID/uploads  every upload: offset, length, complete, sha256, deleted

It checks every header a client sends and answers 400 (with a problem document) where the draft of its version
says a request is malformed: the interop version on every request, `Upload-Complete` as an sf-boolean,
`Upload-Offset`/`Upload-Length` as non-negative sf-integers, `Content-Type: application/partial-upload` on
appends, no upload headers on HEAD and DELETE, append sizes within `Upload-Limit` (413 above `max-append-size`
or `body_cap`), lengths that agree, `Repr-Digest: sha-256` checked on completion. A body cut off mid-way keeps
what arrived, as a resumable server must. `quota_full` answers 507 to creations and appends.
"""
import asyncio
import base64
import hashlib
import json
import os
import re
import sys
import time

PROBLEM = "https://iana.org/assignments/http-problem-types#"
STORE = "."
PORT = 0


class ServerState:
    def __init__(self, ident, settings):
        self.ident = ident
        self.interop = int(settings.get("interop", 6))
        self.settings = {}
        self.uploads = {}
        self.requests = []
        self.next_upload = 1
        self.lose_appends = 0
        self.conflict_appends = 0
        self.update(settings)

    def update(self, settings):
        for key in ("max_append_size", "min_append_size", "max_size", "max_age", "body_cap", "send_104",
                    "quota_full", "interop"):
            if key in settings:
                self.settings[key] = settings[key]
        self.interop = int(self.settings.get("interop", self.interop))
        self.lose_appends += int(settings.get("lose_appends", 0))
        self.conflict_appends += int(settings.get("conflict_appends", 0))
        if settings.get("expire_all"):
            for upload in self.uploads.values():
                upload["expired"] = True

    def limit_field(self, upload=None):
        items = []
        for key, name in (("max_size", "max-size"), ("max_append_size", "max-append-size"),
                          ("min_append_size", "min-append-size")):
            if self.settings.get(key) is not None:
                items.append(f"{name}={int(self.settings[key])}")
        if self.settings.get("max_age") is not None:
            remaining = int(self.settings["max_age"])
            if upload is not None:
                remaining = max(0, int(upload["created"] + self.settings["max_age"] - time.time()))
            items.append(f"{'expires' if self.interop == 6 else 'max-age'}={remaining}")
        if not items:
            return "min-size=0"
        return ", ".join(items)


SERVERS = {}
NEXT_SERVER = [1]


class BadRequest(Exception):
    def __init__(self, status, detail, problem=None, extra=None, headers=None):
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.problem = problem
        self.extra = extra or {}
        self.headers = headers or []


def sf_boolean(value, name):
    if value == "?1":
        return True
    if value == "?0":
        return False
    raise BadRequest(400, f"{name} must be an sf-boolean (?0 or ?1), got {value!r}")


def sf_integer(value, name):
    if value is None or not re.fullmatch(r"[0-9]{1,15}", value):
        raise BadRequest(400, f"{name} must be a non-negative sf-integer, got {value!r}")
    return int(value)


def header(headers, name):
    values = [value for key, value in headers if key.lower() == name.lower()]
    if len(values) > 1:
        raise BadRequest(400, f"{name} sent {len(values)} times")
    return values[0].strip() if values else None


async def read_head(reader):
    data = b""
    while not data.endswith(b"\r\n\r\n"):
        line = await reader.readline()
        if not line:
            return None
        data += line
        if len(data) > 65536:
            return None
    return data.decode("latin-1")


def response(status, headers, body=b"", method=None):
    """A response head and body; a HEAD gets the head alone (a body would be read as the next response)."""
    reasons = {104: "Upload Resumption Supported", 200: "OK", 201: "Created", 204: "No Content",
               400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 409: "Conflict", 410: "Gone",
               413: "Content Too Large", 415: "Unsupported Media Type", 507: "Insufficient Storage"}
    lines = [f"HTTP/1.1 {status} {reasons.get(status, 'Status')}"]
    if status != 104 and status != 204 and not any(k.lower() == "content-length" for k, _ in headers):
        headers = headers + [("Content-Length", str(len(body)))]
    lines += [f"{key}: {value}" for key, value in headers]
    sent = body if status not in (104, 204) and method != "HEAD" else b""
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + sent


class Connection:
    def __init__(self, reader, writer):
        self.reader = reader
        self.writer = writer

    async def serve(self):
        try:
            while True:
                head = await read_head(self.reader)
                if head is None:
                    return
                lines = head.split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = []
                for line in lines[1:]:
                    if not line:
                        continue
                    name, _, value = line.partition(":")
                    headers.append((name.strip(), value.strip()))
                keep = await self.dispatch(method, target, headers)
                if not keep:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        except Exception as error:  # a bug here must show in the log and as a 500, not as a hang
            print(f"rufh_server: {error!r}", file=sys.stderr, flush=True)
            try:
                self.writer.write(response(500, [("Connection", "close")], repr(error).encode()))
            except Exception:
                pass
        finally:
            try:
                self.writer.close()
            except Exception:
                pass

    async def read_body(self, headers, sink=None):
        """Reads the body by Content-Length; with a sink, hands it over piece by piece and returns the byte
        count even when the connection is cut (what arrived is kept)."""
        length = header(headers, "Content-Length")
        if header(headers, "Transfer-Encoding"):
            raise BadRequest(400, "chunked bodies are not taken here; send Content-Length")
        size = int(length or 0)
        received = 0
        data = bytearray()
        while received < size:
            piece = await self.reader.read(min(1 << 20, size - received))
            if not piece:
                return received, bytes(data), False
            received += len(piece)
            if sink:
                sink(piece)
            else:
                data += piece
        return received, bytes(data), True

    async def dispatch(self, method, target, headers):
        path = target.split("?")[0]
        parts = [part for part in path.split("/") if part]
        if parts and parts[0] == "control":
            received, body, _ = await self.read_body(headers)
            status, answer = control(method, parts[1:], json.loads(body) if body else {})
            data = json.dumps(answer).encode()
            self.writer.write(response(status, [("Content-Type", "application/json")], data))
            await self.writer.drain()
            return True
        if len(parts) >= 3 and parts[0] == "s" and parts[1] in SERVERS and parts[2] == "files":
            server = SERVERS[parts[1]]
            entry = {"method": method, "path": target, "headers": {k.lower(): v for k, v in headers}, "body_bytes": 0,
                     "status": 0, "time": time.time()}
            server.requests.append(entry)
            try:
                status, fields, body = await self.upload_request(server, method, parts[3:], headers, entry)
            except BadRequest as error:
                # What is left of the body is read, so the answer reaches the client instead of a reset.
                if method in ("POST", "PATCH") and entry["body_bytes"] == 0:
                    try:
                        entry["body_bytes"], _, _ = await self.read_body(headers, sink=lambda piece: None)
                    except BadRequest:
                        pass
                status, fields, body = self.problem(server, error)
            entry["status"] = status
            if status is None:
                return False
            self.writer.write(response(status, fields, body, method))
            await self.writer.drain()
            return True
        self.writer.write(response(404, [], b"no such resource", method))
        await self.writer.drain()
        return True

    def problem(self, server, error):
        document = {"title": error.detail}
        if error.problem:
            document["type"] = PROBLEM + error.problem
        document.update(error.extra)
        fields = [("Content-Type", "application/problem+json")] + error.headers
        return error.status, fields, json.dumps(document).encode()

    def common(self, server, headers, method):
        version = header(headers, "Upload-Draft-Interop-Version")
        if version != str(server.interop):
            raise BadRequest(400, f"{method} without Upload-Draft-Interop-Version: {server.interop} "
                                  f"(got {version!r})")

    async def upload_request(self, server, method, rest, headers, entry):
        self.common(server, headers, method)
        endpoint = f"/s/{server.ident}/files/"
        if not rest:
            if method == "OPTIONS":
                fields = [("Upload-Limit", server.limit_field())]
                if server.interop >= 8:
                    fields.append(("Accept-Patch", "application/partial-upload"))
                return 204, fields, b""
            if method == "POST":
                return await self.create(server, headers, entry, endpoint)
            raise BadRequest(405, f"{method} is not allowed on the creation endpoint")
        upload_id = rest[0]
        upload = server.uploads.get(upload_id)
        if upload is None or upload.get("expired") or upload.get("deleted") or self.expired(server, upload):
            raise BadRequest(404, "no such upload (never made, cancelled or expired)")
        if method == "HEAD":
            for name in ("Upload-Offset", "Upload-Complete", "Upload-Length"):
                if header(headers, name) is not None:
                    raise BadRequest(400, f"HEAD must not carry {name}")
            fields = [("Upload-Offset", str(upload["offset"])),
                      ("Upload-Complete", "?1" if upload["complete"] else "?0"),
                      ("Upload-Limit", server.limit_field(upload)), ("Cache-Control", "no-store")]
            if upload["length"] is not None:
                fields.append(("Upload-Length", str(upload["length"])))
            return 204, fields, b""
        if method == "PATCH":
            return await self.append(server, upload, headers, entry)
        if method == "DELETE":
            for name in ("Upload-Offset", "Upload-Complete"):
                if header(headers, name) is not None:
                    raise BadRequest(400, f"DELETE must not carry {name}")
            upload["deleted"] = True
            if os.path.exists(upload["path"]):
                os.unlink(upload["path"])
            return 204, [], b""
        raise BadRequest(405, f"{method} is not allowed on an upload")

    def expired(self, server, upload):
        age = server.settings.get("max_age")
        return age is not None and time.time() > upload["created"] + age

    async def create(self, server, headers, entry, endpoint):
        if header(headers, "Upload-Offset") is not None:
            raise BadRequest(400, "a creation request must not carry Upload-Offset")
        complete_text = header(headers, "Upload-Complete")
        if complete_text is None:
            raise BadRequest(400, "a creation request needs Upload-Complete")
        complete = sf_boolean(complete_text, "Upload-Complete")
        length_text = header(headers, "Upload-Length")
        length = sf_integer(length_text, "Upload-Length") if length_text is not None else None
        content_length = sf_integer(header(headers, "Content-Length") or "0", "Content-Length")
        if complete:
            if length is not None and length != content_length:
                raise BadRequest(400, "Upload-Length and Content-Length disagree on a complete upload",
                                 problem=None if server.interop == 6 else "inconsistent-upload-length")
            length = content_length
        if server.settings.get("quota_full"):
            raise BadRequest(507, "the storage quota is full")
        if length is not None and server.settings.get("max_size") is not None and length > server.settings["max_size"]:
            raise BadRequest(413, f"the upload is larger than max-size {server.settings['max_size']}",
                             headers=[("Upload-Limit", server.limit_field())])
        self.check_append_size(server, content_length, complete, creation=True)
        upload_id = f"u{server.next_upload}"
        server.next_upload += 1
        path = os.path.join(STORE, f"{server.ident}-{upload_id}")
        upload = {"offset": 0, "length": length, "complete": False, "path": path, "created": time.time(),
                  "sha256": None, "deleted": False}
        open(path, "wb").close()
        server.uploads[upload_id] = upload
        location = f"{endpoint}{upload_id}"  # relative: the client resolves it against where it sent the POST
        if server.settings.get("send_104", True):
            interim = [("Location", location), ("Upload-Draft-Interop-Version", str(server.interop))]
            if server.interop >= 8:
                interim.append(("Upload-Limit", server.limit_field(upload)))
            self.writer.write(response(104, interim))
            await self.writer.drain()
        received, ok = self.store(upload, await self.read_body_into(upload, headers))
        entry["body_bytes"] = received
        if not ok:
            return None, [], b""
        if complete:
            return self.finish(server, upload, headers)
        fields = [("Location", location), ("Upload-Limit", server.limit_field(upload))]
        if server.interop == 6:
            fields.append(("Upload-Offset", str(upload["offset"])))
        fields.append(("Upload-Complete", "?0"))
        return 201, fields, b""

    async def read_body_into(self, upload, headers):
        with open(upload["path"], "ab") as handle:
            received, _, complete = await self.read_body(headers, sink=handle.write)
        return received, complete

    def store(self, upload, outcome):
        received, complete = outcome
        upload["offset"] += received
        return received, complete

    def check_append_size(self, server, size, complete, creation=False):
        cap = server.settings.get("body_cap")
        if cap is not None and size > cap:
            raise BadRequest(413, f"request bodies above {cap} bytes are refused",
                             headers=[("Upload-Limit", server.limit_field())])
        maximum = server.settings.get("max_append_size")
        if maximum is not None and size > maximum:
            raise BadRequest(413, f"appends above max-append-size {maximum} are refused",
                             headers=[("Upload-Limit", server.limit_field())])
        minimum = server.settings.get("min_append_size")
        if minimum is not None and size < minimum and not complete and not (creation and size == 0):
            raise BadRequest(400, f"a non-final append of {size} bytes is below min-append-size {minimum}")

    async def append(self, server, upload, headers, entry):
        if header(headers, "Content-Type") != "application/partial-upload":
            raise BadRequest(415, "appends are Content-Type: application/partial-upload")
        offset = sf_integer(header(headers, "Upload-Offset"), "Upload-Offset")
        complete_text = header(headers, "Upload-Complete")
        if complete_text is None:
            if server.interop == 6:
                complete_text = "?1"
            else:
                raise BadRequest(400, "an append needs Upload-Complete")
        complete = sf_boolean(complete_text, "Upload-Complete")
        size = sf_integer(header(headers, "Content-Length") or "0", "Content-Length")
        if upload["complete"]:
            if server.interop >= 8:
                if size == 0:
                    raise BadRequest(410, "the upload is complete", problem="completed-upload")
                raise BadRequest(400, "the upload is complete", problem="inconsistent-upload-length")
            raise BadRequest(400, "the upload is complete", problem="completed-upload")
        if server.conflict_appends > 0 or offset != upload["offset"]:
            if offset == upload["offset"]:
                server.conflict_appends -= 1
            fields = [("Upload-Offset", str(upload["offset"]))]
            if server.interop >= 7:
                fields.append(("Upload-Complete", "?0"))
            raise BadRequest(409, "the offset does not match", problem="mismatching-upload-offset",
                             extra={"expected-offset": upload["offset"], "provided-offset": offset}, headers=fields)
        if server.settings.get("quota_full"):
            raise BadRequest(507, "the storage quota is full")
        if upload["length"] is not None and offset + size > upload["length"]:
            raise BadRequest(400, "the append goes beyond Upload-Length",
                             problem=None if server.interop == 6 else "inconsistent-upload-length")
        if complete and upload["length"] is not None and offset + size != upload["length"]:
            raise BadRequest(400, "the completing append does not end at Upload-Length",
                             problem=None if server.interop == 6 else "inconsistent-upload-length")
        self.check_append_size(server, size, complete)
        if server.lose_appends > 0:
            server.lose_appends -= 1
            received, _, ok = await self.read_body(headers, sink=lambda piece: None)
            entry["body_bytes"] = received
            if not ok:
                return None, [], b""
            return self.intermediate(server, upload)
        received, ok = self.store(upload, await self.read_body_into(upload, headers))
        entry["body_bytes"] = received
        if not ok:
            return None, [], b""
        if complete:
            return self.finish(server, upload, headers)
        return self.intermediate(server, upload)

    def intermediate(self, server, upload):
        if server.interop == 6:
            return 201, [("Upload-Offset", str(upload["offset"]))], b""
        return 204, [("Upload-Complete", "?0")], b""

    def finish(self, server, upload, headers):
        digest = hashlib.sha256()
        with open(upload["path"], "rb") as handle:
            for piece in iter(lambda: handle.read(1 << 20), b""):
                digest.update(piece)
        upload["sha256"] = digest.hexdigest()
        wanted = header(headers, "Repr-Digest")
        if wanted is not None:
            match = re.fullmatch(r"sha-256=:([A-Za-z0-9+/=]+):", wanted)
            if not match:
                raise BadRequest(400, f"Repr-Digest {wanted!r} is not sha-256=:base64:")
            if base64.b64decode(match.group(1)) != digest.digest():
                raise BadRequest(400, "Repr-Digest does not match the uploaded bytes")
        upload["complete"] = True
        upload["length"] = upload["offset"]
        body = json.dumps({"size": upload["offset"], "sha256": upload["sha256"]}).encode()
        fields = [("Content-Type", "application/json")]
        if server.interop >= 7:
            fields.append(("Upload-Complete", "?1"))
        return 200, fields, body


def control(method, parts, body):
    if parts == ["servers"] and method == "POST":
        ident = str(NEXT_SERVER[0])
        NEXT_SERVER[0] += 1
        SERVERS[ident] = ServerState(ident, body)
        return 201, {"id": ident, "endpoint": f"http://127.0.0.1:{PORT}/s/{ident}/files/"}
    if len(parts) >= 2 and parts[0] == "servers" and parts[1] in SERVERS:
        server = SERVERS[parts[1]]
        if len(parts) == 2 and method == "POST":
            server.update(body)
            return 200, {}
        if parts[2:] == ["requests"]:
            return 200, server.requests
        if parts[2:] == ["uploads"]:
            return 200, {key: {k: v for k, v in upload.items() if k != "path"}
                         for key, upload in server.uploads.items()}
    if parts == ["health"]:
        return 200, {"ok": True}
    return 404, {"error": "no such control resource"}


async def main():
    global STORE, PORT
    PORT = int(sys.argv[1])
    STORE = sys.argv[2]
    os.makedirs(STORE, exist_ok=True)

    async def handle(reader, writer):
        await Connection(reader, writer).serve()

    server = await asyncio.start_server(handle, "127.0.0.1", PORT)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
