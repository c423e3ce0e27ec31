"""tuspyserver (a FastAPI tus 1.0 router) on uvicorn: the tus server of uploadq's tests.

Usage: tus_server.py PORT FILES_DIR
Uploads land in FILES_DIR/<id> with FILES_DIR/<id>.info beside them. The router is mounted at /files, so the
creation endpoint is http://127.0.0.1:PORT/files/ (OPTIONS answers there, with the trailing slash).
"""
import sys
from contextlib import contextmanager

import tuspyserver.request
import uvicorn
from fastapi import FastAPI
from tuspyserver import create_tus_router
from tuspyserver.lock import FileLock, LockTimeoutError


@contextmanager
def acquire_upload_lock_at_once(upload_path, locks_dir=None, blocking=True, timeout=0.0):
    """tuspyserver waits for a busy upload lock with time.sleep inside its event loop, which freezes the whole
    server (every test using it) for up to 30 s while the request holding the lock cannot even finish. A busy
    upload is answered at once instead, as tusd does (503 here, through tuspyserver's LockTimeoutError path)."""
    lock = FileLock(upload_path, locks_dir=locks_dir)
    if not lock.acquire(blocking=False):
        raise LockTimeoutError(f"upload {upload_path} is busy with another request")
    try:
        yield lock
    finally:
        lock.release()


tuspyserver.request.acquire_upload_lock = acquire_upload_lock_at_once


def main() -> None:
    port = int(sys.argv[1])
    files_dir = sys.argv[2]
    app = FastAPI()
    app.include_router(create_tus_router(prefix="files", files_dir=files_dir, days_to_keep=2))

    @app.get("/health")
    def health() -> dict:
        return {"ok": True}

    # A long keep-alive: the fault proxy reuses its upstream connections like any client would.
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, timeout_keep_alive=300)


if __name__ == "__main__":
    main()
