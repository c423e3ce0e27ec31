"""An app backend that mints short-lived upload URLs, for uploadq's tests: it presigns with botocore (the AWS SDK's
own signer) against an S3 endpoint, the way a real app server hands out upload targets.

Usage: mint_backend.py PORT

Each test makes a backend of its own through the control API:

  POST /control/backends   {"s3_endpoint": "http://127.0.0.1:P", "bucket": "b", "method": "PUT" | "POST",
                            "expires": 60, "token": "secret"}   -> {"id": "1", "base": "http://127.0.0.1:PORT/b/1"}
  POST /control/backends/ID/script   answers given before the real ones, in order:
                            [{"status": 500}, {"status": 403, "body": "..."}, {"garbage": true}]
  GET  /control/backends/ID/requests every request: method, path, headers, body (JSON when it is)

Under the base:

  POST {base}/sign          the job as JSON (id, name, size, sha256, content_type, meta) ->
                            {"method", "url", "headers", "fields", "expires_at", "remote_url"}: a presigned PUT
                            (put_object) or POST (a form with policy) for the key "<id>-<name>"

  Uppy Companion's S3 routes, presigned the same way (key "<uuid>-<filename>"):
  GET    {base}/s3/params?filename=&type=&metadata[k]=v    -> {method, url, fields, headers}
  POST   {base}/s3/multipart {filename, type, metadata}    -> {uploadId, key}
  GET    {base}/s3/multipart/UPLOADID/PART?key=K           -> {url, expires}
  GET    {base}/s3/multipart/UPLOADID?key=K                -> [{PartNumber, Size, ETag}]  (404 when gone)
  POST   {base}/s3/multipart/UPLOADID/complete?key=K {parts: [{PartNumber, ETag}]} -> {location}
  DELETE {base}/s3/multipart/UPLOADID?key=K                -> {}

A request without `Authorization: Bearer <token>` (when the backend has one) gets 401.
"""
import json
import sys
import uuid
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import botocore.exceptions
import botocore.session
from botocore.config import Config

LOCK = threading.Lock()
BACKENDS = {}
PORT = 0


class Backend:
    def __init__(self, ident, settings):
        self.ident = ident
        self.settings = settings
        self.script = []
        self.requests = []
        session = botocore.session.get_session()
        self.s3 = session.create_client(
            "s3", endpoint_url=settings["s3_endpoint"], region_name="us-east-1",
            aws_access_key_id="mintkey", aws_secret_access_key="mintsecret",
            config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))

    def mint(self, job):
        bucket = self.settings["bucket"]
        key = f"{job['id']}-{job['name']}"
        expires = int(self.settings.get("expires", 60))
        remote = f"{self.settings['s3_endpoint']}/{bucket}/{urllib.parse.quote(key)}"
        if self.settings.get("method", "PUT") == "POST":
            post = self.s3.generate_presigned_post(bucket, key, ExpiresIn=expires,
                                                   Fields={"Content-Type": job["content_type"]},
                                                   Conditions=[{"Content-Type": job["content_type"]}])
            return {"method": "POST", "url": post["url"], "fields": post["fields"],
                    "expires_at": iso(time.time() + expires), "remote_url": remote}
        url = self.s3.generate_presigned_url("put_object", ExpiresIn=expires,
                                             Params={"Bucket": bucket, "Key": key,
                                                     "ContentType": job["content_type"]})
        return {"method": "PUT", "url": url, "headers": {"Content-Type": job["content_type"]},
                "expires_at": iso(time.time() + expires), "remote_url": remote}


def iso(seconds):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.dispatch()

    def do_POST(self):
        self.dispatch()

    def do_DELETE(self):
        self.dispatch()

    def answer(self, status, body, content_type="application/json"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def dispatch(self):
        parts = [part for part in self.path.split("?")[0].split("/") if part]
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        try:
            if parts and parts[0] == "control":
                return self.control(parts[1:], body)
            if len(parts) >= 3 and parts[0] == "b" and parts[1] in BACKENDS:
                return self.backend(BACKENDS[parts[1]], parts[2:], body)
            self.answer(404, {"error": "no such resource"})
        except Exception as error:  # a bug must show as a 500 with its text, not as a hang
            print(f"mint_backend: {error!r}", file=sys.stderr, flush=True)
            self.answer(500, {"error": repr(error)})

    def control(self, parts, body):
        settings = json.loads(body) if body else {}
        with LOCK:
            if parts == ["backends"] and self.command == "POST":
                ident = str(len(BACKENDS) + 1)
                BACKENDS[ident] = Backend(ident, settings)
                return self.answer(201, {"id": ident, "base": f"http://127.0.0.1:{PORT}/b/{ident}"})
            if parts == ["health"]:
                return self.answer(200, {"ok": True})
            if len(parts) == 3 and parts[0] == "backends" and parts[1] in BACKENDS:
                backend = BACKENDS[parts[1]]
                if parts[2] == "script" and self.command == "POST":
                    backend.script.extend(settings)
                    return self.answer(200, {"script": len(backend.script)})
                if parts[2] == "requests":
                    return self.answer(200, backend.requests)
        self.answer(404, {"error": "no such control resource"})

    def backend(self, backend, parts, body):
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        with LOCK:
            backend.requests.append({"method": self.command, "path": self.path,
                                     "headers": {k.lower(): v for k, v in self.headers.items()},
                                     "json": parsed})
            scripted = backend.script.pop(0) if backend.script else None
        token = backend.settings.get("token")
        if token and self.headers.get("Authorization") != f"Bearer {token}":
            return self.answer(401, {"error": "a bearer token is required"})
        if scripted is not None:
            if scripted.get("garbage"):
                return self.answer(200, b"<html>not json {", content_type="application/json")
            return self.answer(int(scripted.get("status", 500)), scripted.get("body", {"error": "scripted"}))
        if parts[:1] == ["s3"]:
            return self.companion(backend, parts[1:], parsed)
        if parts == ["sign"] and self.command == "POST":
            if not isinstance(parsed, dict) or not {"id", "name", "size", "content_type"} <= parsed.keys():
                return self.answer(400, {"error": "the body must be the job as JSON (id, name, size, content_type)"})
            return self.answer(200, backend.mint(parsed))
        self.answer(404, {"error": f"no route for {self.command} {self.path}"})


    def companion(self, backend, parts, body):
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        s3, bucket = backend.s3, backend.settings["bucket"]
        expires = int(backend.settings.get("expires", 60))
        key = query.get("key", [None])[0]
        if parts == ["params"] and self.command == "GET":
            filename = query.get("filename", ["file"])[0]
            content_type = query.get("type", ["application/octet-stream"])[0]
            target = backend.mint({"id": str(uuid.uuid4()), "name": filename, "content_type": content_type})
            target.pop("expires_at", None)
            target.pop("remote_url", None)
            return self.answer(200, target)
        if parts == ["multipart"] and self.command == "POST":
            if not isinstance(body, dict) or "filename" not in body:
                return self.answer(400, {"error": "filename is required"})
            new_key = f"{uuid.uuid4()}-{body['filename']}"
            created = s3.create_multipart_upload(Bucket=bucket, Key=new_key,
                                                 ContentType=body.get("type") or "application/octet-stream")
            return self.answer(200, {"uploadId": created["UploadId"], "key": new_key})
        if len(parts) == 3 and parts[0] == "multipart" and parts[2] == "complete" and self.command == "POST":
            listed = body.get("parts") if isinstance(body, dict) else None
            if not key or not isinstance(listed, list):
                return self.answer(400, {"error": "key and parts are required"})
            try:
                done = s3.complete_multipart_upload(
                    Bucket=bucket, Key=key, UploadId=parts[1],
                    MultipartUpload={"Parts": [{"PartNumber": p["PartNumber"], "ETag": p["ETag"]} for p in listed]})
            except botocore.exceptions.ClientError as error:
                return self.answer(400, {"error": str(error)})
            return self.answer(200, {"location": done.get("Location")})
        if len(parts) == 3 and parts[0] == "multipart" and self.command == "GET":
            if not key or not parts[2].isdigit():
                return self.answer(400, {"error": "key and a part number are required"})
            url = s3.generate_presigned_url("upload_part", ExpiresIn=expires,
                                            Params={"Bucket": bucket, "Key": key, "UploadId": parts[1],
                                                    "PartNumber": int(parts[2])})
            return self.answer(200, {"url": url, "expires": expires})
        if len(parts) == 2 and parts[0] == "multipart" and self.command == "GET":
            if not key:
                return self.answer(400, {"error": "key is required"})
            try:
                listed = s3.list_parts(Bucket=bucket, Key=key, UploadId=parts[1]).get("Parts", [])
            except s3.exceptions.NoSuchUpload:
                return self.answer(404, {"error": "no such upload"})
            return self.answer(200, [{"PartNumber": p["PartNumber"], "Size": p["Size"], "ETag": p["ETag"]}
                                     for p in listed])
        if len(parts) == 2 and parts[0] == "multipart" and self.command == "DELETE":
            if not key:
                return self.answer(400, {"error": "key is required"})
            s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=parts[1])
            return self.answer(200, {})
        self.answer(404, {"error": f"no route for {self.command} {self.path}"})


def main():
    global PORT
    PORT = int(sys.argv[1])
    server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
    server.serve_forever()


if __name__ == "__main__":
    main()
