"""An HTTP-aware fault-injection proxy for uploadq's tests.

Usage: fault_proxy.py CONTROL_PORT

A control API on 127.0.0.1:CONTROL_PORT creates proxies, each on its own port in front of one upstream, with
its own rules and byte counts, so tests running at the same time do not disturb each other:

  POST   /proxies                {"upstream": "127.0.0.1:8080"}  -> {"id": "1", "port": 40123}
                                 with "enforce_expiry": true, a presigned request (X-Amz-Date and X-Amz-Expires in
                                 its query) that arrives after its expiry is answered 403 AccessDenied "Request has
                                 expired", as S3 does (moto does not check it)
  POST   /proxies/ID/rules       a rule (below), appended         -> {"rules": N}
  DELETE /proxies/ID/rules       drops every rule
  GET    /proxies/ID/stats       bytes and the request log
  DELETE /proxies/ID             closes the proxy

A rule applies to requests whose method and path match (`method`, `path` as a regular expression, `target`
as one matched against the path with its query, all optional) and whose body is at least `min_length` bytes (and longer than `after_bytes` for the actions that
cut a body), after `skip` matches, `times` times (-1: always), each time with `probability` (default 1).
Actions:

  reset    forward `after_bytes` of the request body, then reset both connections (TCP RST)
  stall    forward `after_bytes`, then stop forwarding for `seconds`
  delay    wait `seconds` before forwarding the request
  respond  answer `status` with `headers` and `body` without asking the upstream, then close
  close    read the request head and close the connection without an answer
  rewrite  forward, then change the answer: `set_status`, `set_headers`, `remove_headers`, and `location`
           ("relative" drops scheme and host; "authority:HOST:PORT" points it at another server)
  truncate forward only `after_bytes` of the body (Content-Length rewritten), drop the rest: the upstream
           really stores less than was sent and says so
  hold     forward, and once the upstream has answered wait `seconds` before passing the answer on (the server
           has done the work, the client does not know yet: a window to kill the client in)
  drop     forward, and once the upstream has answered close the connection without passing the answer on
           (the work is done but its answer is lost)
  trickle  forward `after_bytes` of the body, then read the rest `bytes_per_second` bytes a second (default 2): a
           server that never stops but never gets anywhere, too slow to finish and too busy to look stalled
  portal   answer as a captive portal does, without asking the upstream, whatever the method: `style` "html" (the
           default: 200 and a login page), "redirect" (302 to a login page on another origin) or "511" (RFC 6585's
           Network Authentication Required, with a page); use `times: -1` for a portal that stays until the rules
           are dropped

`respond` and `close` read the request body first, as a server would, so the client sees the answer (or the
clean close) instead of a reset. A request for a path that another connection is still sending to (a stalled
PATCH the client gave up on) first cuts that older upstream connection, the way tusd interrupts a previous
request for the same upload, and a request for a path whose upstream connection was just cut waits half a
second: tuspyserver polls its upload lock with time.sleep inside its event loop, so a request that arrives
before it has noticed the cut connection would block the whole server for its 30 s lock timeout.

Every request is logged with its method, path, headers, body length and the SHA-1 of the body bytes received.
"""
import asyncio
import base64
import calendar
import hashlib
import json
import random
import re
import socket
import struct
import sys
import time
import urllib.parse

CHUNK = 256 * 1024


class Rule:
    def __init__(self, spec):
        self.spec = spec
        self.method = spec.get("method")
        self.path = re.compile(spec["path"]) if spec.get("path") else None
        self.target = re.compile(spec["target"]) if spec.get("target") else None
        self.skip = int(spec.get("skip", 0))
        self.times = int(spec.get("times", 1))
        self.min_length = int(spec.get("min_length", 0))
        self.action = spec["action"]
        self.probability = float(spec.get("probability", 1))

    def matches(self, method, target, length):
        path = target.split("?", 1)[0]
        if self.times == 0 or length < self.min_length:
            return False
        if self.action in ("reset", "stall", "truncate", "trickle") and length <= int(self.spec.get("after_bytes", 0)):
            return False  # the body is too short for the cut: the rule would be used up without effect
        if self.method and self.method.upper() != method.upper():
            return False
        if self.path and not self.path.search(path):
            return False
        if self.target and not self.target.search(target):
            return False
        if self.skip > 0:
            self.skip -= 1
            return False
        if self.probability < 1 and random.random() >= self.probability:
            return False
        if self.times > 0:
            self.times -= 1
        return True


class Proxy:
    def __init__(self, ident, upstream, enforce_expiry=False):
        self.ident = ident
        self.enforce_expiry = enforce_expiry
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.rules = []
        self.server = None
        self.port = None
        self.body_bytes = 0          # request body bytes received from clients
        self.forwarded_body_bytes = 0  # of those, sent on to the upstream
        self.requests = []
        self.connections = 0
        self.clients = set()
        self.inflight = {}  # path -> upstream writers still sending a request body for it
        self.cut_at = {}  # path -> loop time its upstream connection was last cut

    def stats(self):
        return {
            "body_bytes": self.body_bytes,
            "forwarded_body_bytes": self.forwarded_body_bytes,
            "connections": self.connections,
            "requests": self.requests,
        }

    def rule_for(self, method, path, length):
        for rule in self.rules:
            if rule.matches(method, path, length):
                return rule
        return None

    async def start(self):
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def close(self):
        self.server.close()
        for writer in list(self.clients):
            abort(writer)

    async def handle(self, reader, writer):
        self.connections += 1
        self.clients.add(writer)
        upstream = None
        try:
            while True:
                head = await read_head(reader)
                if head is None:
                    break
                method, target, headers = parse_request_head(head)
                path = target.split("?", 1)[0]
                length = int(header(headers, "content-length") or 0)
                entry = {"method": method, "path": target, "headers": {k.lower(): v for k, v in headers},
                         "content_length": length, "body_bytes": 0, "status": None, "action": None}
                self.requests.append(entry)
                rule = self.rule_for(method, target, length)
                if rule:
                    entry["action"] = rule.action
                if rule and rule.action == "delay":
                    await asyncio.sleep(float(rule.spec.get("seconds", 1)))
                    rule = None
                if self.enforce_expiry and presigned_expired(target):
                    entry["action"] = "expired"
                    rule = Rule({"action": "respond", "status": 403, "headers": {"Content-Type": "application/xml"},
                                 "body": "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>AccessDenied</Code>"
                                         "<Message>Request has expired</Message></Error>"})
                if rule and rule.action in ("close", "respond", "portal"):
                    await drain(reader, length, entry, self)
                    if rule.action == "respond":
                        await self.respond(writer, rule.spec, entry)
                    elif rule.action == "portal":
                        await self.respond(writer, portal_answer(rule.spec.get("style", "html")), entry,
                                           head=method == "HEAD")
                    abort(writer, reset=False)
                    return
                if method != "POST":
                    await self.interrupt_previous(path)
                if upstream is not None and upstream[0].at_eof():
                    abort(upstream[1], reset=False)  # the server closed an idle keep-alive connection
                    upstream = None
                if upstream is None:
                    upstream = await asyncio.open_connection(*self.upstream)
                up_reader, up_writer = upstream
                if rule and rule.action == "truncate":
                    keep = min(length, int(rule.spec.get("after_bytes", 0)))
                    up_writer.write(replace_length(head, keep))
                else:
                    up_writer.write(head)
                digest = hashlib.sha1()
                if method != "POST":
                    self.inflight.setdefault(path, set()).add(up_writer)
                try:
                    ok = await self.forward_body(reader, up_writer, length, rule, entry, digest)
                finally:
                    self.inflight.get(path, set()).discard(up_writer)
                entry["sha1"] = base64.b64encode(digest.digest()).decode()
                if not ok:
                    self.cut_at[path] = asyncio.get_running_loop().time()
                    abort(writer, reset=True)
                    abort(up_writer, reset=True)
                    return
                keep = await self.forward_response(up_reader, writer, method, rule, entry)
                if not keep:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            pass
        finally:
            self.clients.discard(writer)
            abort(writer, reset=False)
            if upstream is not None:
                abort(upstream[1], reset=False)

    async def interrupt_previous(self, path):
        """Cuts upstream connections still sending a body for `path` and gives the server a moment to notice."""
        previous = self.inflight.pop(path, set())
        for up_writer in previous:
            abort(up_writer, reset=True)
        if previous:
            self.cut_at[path] = asyncio.get_running_loop().time()
        since = asyncio.get_running_loop().time() - self.cut_at.get(path, -10.0)
        if since < 0.5:
            await asyncio.sleep(0.5 - since)

    async def forward_body(self, reader, up_writer, length, rule, entry, digest):
        """Copies the request body; False when a rule cut the connection."""
        cut = None
        if rule and rule.action in ("reset", "stall", "truncate", "trickle"):
            cut = int(rule.spec.get("after_bytes", 0))
        remaining = length
        sent = 0
        while remaining > 0:
            want = min(CHUNK, remaining)
            if cut is not None and sent < cut:
                want = min(want, cut - sent)
            if cut is not None and sent >= cut and rule.action == "trickle":
                entry["trickled"] = True
                want = min(remaining, max(1, int(rule.spec.get("bytes_per_second", 2))))
                await asyncio.sleep(1)
            elif cut is not None and sent >= cut:
                if rule.action == "reset":
                    return False
                if rule.action == "truncate":
                    data = await reader.read(want)
                    if not data:
                        raise ConnectionError("client closed mid-body")
                    remaining -= len(data)
                    self.body_bytes += len(data)
                    entry["body_bytes"] += len(data)
                    digest.update(data)
                    continue
                await asyncio.sleep(float(rule.spec.get("seconds", 40)))
                cut = None
                continue
            data = await reader.read(want)
            if not data:
                raise ConnectionError("client closed mid-body")
            remaining -= len(data)
            sent += len(data)
            self.body_bytes += len(data)
            entry["body_bytes"] += len(data)
            digest.update(data)
            up_writer.write(data)
            await up_writer.drain()
            self.forwarded_body_bytes += len(data)
        if cut is not None and sent >= cut and rule.action == "reset" and length > 0:
            return False
        return True

    async def forward_response(self, up_reader, writer, method, rule, entry):
        """Copies the answer (rewritten if a rule says so); False when the connection must close."""
        while True:
            head = await read_head(up_reader)
            if head is None:
                raise ConnectionError("upstream closed")
            status, headers = parse_response_head(head)
            if 100 <= status < 200:
                continue
            break
        upstream_status = status
        entry["upstream_status"] = status
        if rule and rule.action == "drop":
            return False
        if rule and rule.action == "hold":
            entry["held"] = True
            await asyncio.sleep(float(rule.spec.get("seconds", 30)))
        if rule and rule.action == "rewrite":
            spec = rule.spec
            status = int(spec.get("set_status", status))
            removed = {name.lower() for name in spec.get("remove_headers", [])}
            replaced = {name.lower(): value for name, value in spec.get("set_headers", {}).items()}
            headers = [(k, v) for k, v in headers if k.lower() not in removed and k.lower() not in replaced]
            headers += list(spec.get("set_headers", {}).items())
            if spec.get("location"):
                headers = [(k, rewrite_location(v, spec["location"]) if k.lower() == "location" else v)
                           for k, v in headers]
        no_body = method == "HEAD" or upstream_status in (204, 304)
        if no_body and status != upstream_status and header(headers, "content-length") is None:
            headers.append(("Content-Length", "0"))  # a rewritten status must not make the client wait for a body
        entry["status"] = status
        entry["response_headers"] = {k.lower(): v for k, v in headers}
        writer.write(render_response(status, headers))
        close = (header(headers, "connection") or "").lower() == "close"
        if not no_body:
            length = header(headers, "content-length")
            if length is not None:
                await copy_exact(up_reader, writer, int(length))
            elif (header(headers, "transfer-encoding") or "").lower() == "chunked":
                await copy_chunked(up_reader, writer)
            else:
                while True:
                    data = await up_reader.read(CHUNK)
                    if not data:
                        break
                    writer.write(data)
                close = True
        await writer.drain()
        return not close

    async def respond(self, writer, spec, entry, head=False):
        body = spec.get("body", "").encode()
        headers = list(spec.get("headers", {}).items())
        headers.append(("Content-Length", str(len(body))))
        headers.append(("Connection", "close"))
        status = int(spec.get("status", 503))
        entry["status"] = status
        writer.write(render_response(status, headers) + (b"" if head else body))
        await writer.drain()
        abort(writer, reset=False)


PORTAL_PAGE = ("<!DOCTYPE html><html><head><title>Hotel Wi-Fi - please log in</title></head><body>"
               "<h1>Welcome</h1><form action=\"http://portal.invalid:8080/login\" method=\"post\">"
               "<input name=\"room\"><button>Connect</button></form></body></html>")


def portal_answer(style):
    """What a captive portal answers to any request, in one of three styles."""
    page = {"Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store"}
    if style == "redirect":
        return {"status": 302, "headers": dict(page, Location="http://portal.invalid:8080/login?continue=1"),
                "body": "<html><body>Redirecting to <a href=\"http://portal.invalid:8080/login\">login</a></body></html>"}
    if style == "511":
        return {"status": 511, "headers": page, "body": PORTAL_PAGE}
    return {"status": 200, "headers": page, "body": PORTAL_PAGE}


def presigned_expired(target):
    """Whether a SigV4 presigned URL (X-Amz-Date, X-Amz-Expires in its query) is past its expiry."""
    query = urllib.parse.parse_qs(target.split("?", 1)[1]) if "?" in target else {}
    date, expires = query.get("X-Amz-Date", [None])[0], query.get("X-Amz-Expires", [None])[0]
    if not date or not expires:
        return False
    signed = calendar.timegm(time.strptime(date, "%Y%m%dT%H%M%SZ"))
    return time.time() > signed + int(expires)


async def drain(reader, length, entry, proxy):
    """Reads and drops a request body."""
    while length > 0:
        data = await reader.read(min(CHUNK, length))
        if not data:
            return
        length -= len(data)
        proxy.body_bytes += len(data)
        entry["body_bytes"] += len(data)


def abort(writer, reset=False):
    try:
        if reset:
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        else:
            writer.close()
    except Exception:
        pass


async def read_head(reader):
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as error:
        if not error.partial:
            return None
        raise
    except asyncio.LimitOverrunError:
        raise ConnectionError("head too large")


def parse_request_head(head):
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    return method, target, parse_fields(lines[1:])


def parse_response_head(head):
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    return int(parts[1]), parse_fields(lines[1:])


def parse_fields(lines):
    fields = []
    for line in lines:
        if not line:
            continue
        name, _, value = line.partition(":")
        fields.append((name.strip(), value.strip()))
    return fields


def replace_length(head, length):
    lines = head.decode("latin-1").split("\r\n")
    lines = [f"Content-Length: {length}" if line.lower().startswith("content-length:") else line for line in lines]
    return "\r\n".join(lines).encode("latin-1")


def rewrite_location(value, how):
    scheme, sep, rest = value.partition("://")
    path = "/" + rest.split("/", 1)[1] if sep and "/" in rest else (value if not sep else "/")
    if how == "relative":
        return path
    if how.startswith("authority:"):
        return f"http://{how[len('authority:'):]}{path}"
    return value


def header(fields, name):
    for key, value in fields:
        if key.lower() == name:
            return value
    return None


REASONS = {200: "OK", 201: "Created", 204: "No Content", 302: "Found", 404: "Not Found", 409: "Conflict",
           410: "Gone", 412: "Precondition Failed", 460: "Checksum Mismatch", 500: "Internal Server Error",
           502: "Bad Gateway", 503: "Service Unavailable", 511: "Network Authentication Required"}


def render_response(status, fields):
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}"]
    lines += [f"{name}: {value}" for name, value in fields]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def copy_exact(reader, writer, length):
    while length > 0:
        data = await reader.read(min(CHUNK, length))
        if not data:
            raise ConnectionError("upstream closed mid-body")
        writer.write(data)
        length -= len(data)


async def copy_chunked(reader, writer):
    while True:
        size_line = await reader.readuntil(b"\r\n")
        writer.write(size_line)
        size = int(size_line.split(b";")[0].strip(), 16)
        if size == 0:
            while True:
                line = await reader.readuntil(b"\r\n")
                writer.write(line)
                if line == b"\r\n":
                    return
        await copy_exact(reader, writer, size + 2)


class Control:
    def __init__(self):
        self.proxies = {}
        self.next_id = 1

    async def handle(self, reader, writer):
        try:
            head = await read_head(reader)
            if head is None:
                return
            method, target, headers = parse_request_head(head)
            length = int(header(headers, "content-length") or 0)
            body = await reader.readexactly(length) if length else b""
            status, answer = await self.route(method, target, json.loads(body) if body else None)
            data = json.dumps(answer).encode()
            writer.write(render_response(status, [("Content-Type", "application/json"),
                                                  ("Content-Length", str(len(data))), ("Connection", "close")]) + data)
            await writer.drain()
        except Exception as error:  # a broken control request must not stop the proxy
            data = json.dumps({"error": str(error)}).encode()
            writer.write(render_response(500, [("Content-Length", str(len(data))), ("Connection", "close")]) + data)
        finally:
            writer.close()

    async def route(self, method, target, body):
        parts = [part for part in target.split("?")[0].split("/") if part]
        if parts == ["proxies"] and method == "POST":
            ident = str(self.next_id)
            self.next_id += 1
            proxy = Proxy(ident, body["upstream"], bool(body.get("enforce_expiry")))
            await proxy.start()
            self.proxies[ident] = proxy
            return 201, {"id": ident, "port": proxy.port}
        if len(parts) >= 2 and parts[0] == "proxies" and parts[1] in self.proxies:
            proxy = self.proxies[parts[1]]
            if len(parts) == 2 and method == "DELETE":
                await proxy.close()
                del self.proxies[parts[1]]
                return 200, {}
            if parts[2:] == ["rules"] and method == "POST":
                proxy.rules.append(Rule(body))
                return 200, {"rules": len(proxy.rules)}
            if parts[2:] == ["rules"] and method == "DELETE":
                proxy.rules.clear()
                return 200, {}
            if parts[2:] == ["stats"] and method == "GET":
                return 200, proxy.stats()
        if parts == ["health"]:
            return 200, {"ok": True}
        return 404, {"error": f"no route for {method} {target}"}


async def main():
    control = Control()
    server = await asyncio.start_server(control.handle, "127.0.0.1", int(sys.argv[1]))
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
