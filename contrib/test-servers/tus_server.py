"""tuspyserver (a FastAPI tus 1.0 router) on uvicorn: the tus server of uploadq's tests.

Usage: tus_server.py PORT FILES_DIR
Uploads land in FILES_DIR/<id> with FILES_DIR/<id>.info beside them. The router is mounted at /files, so the
creation endpoint is http://127.0.0.1:PORT/files/ (OPTIONS answers there, with the trailing slash).
"""
import sys

import uvicorn
from fastapi import FastAPI
from tuspyserver import create_tus_router


def main() -> None:
    port = int(sys.argv[1])
    files_dir = sys.argv[2]
    app = FastAPI()
    app.include_router(create_tus_router(prefix="files", files_dir=files_dir, days_to_keep=2))

    @app.get("/health")
    def health() -> dict:
        return {"ok": True}

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
