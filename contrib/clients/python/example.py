"""Enqueue a photo, wait for its upload, and acknowledge its completion: python3 example.py SOCKET PHOTO."""
import sys

from uploadq_client import UploadQueue

socket_path, photo = sys.argv[1], sys.argv[2]
queue = UploadQueue(socket_path)
job = queue.enqueue(photo, meta={"record": "42"}, idempotency_key="example-" + photo)
print("enqueued", job["id"], "(already queued)" if job["deduplicated"] else "")

done = queue.wait(job["id"], timeout=60)
if done["state"] != "uploaded":
    sys.exit(f"not uploaded: {done['state']} {done.get('last_error') or ''}")

for completion in queue.completions(timeout=10):
    if completion["id"] == job["id"]:
        print("uploaded to", completion["remote_url"], "sha256", completion["sha256"])
        queue.acknowledge(completion["id"])
        break
else:
    sys.exit("no completion came")
