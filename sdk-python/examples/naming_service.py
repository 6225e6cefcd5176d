"""Naming service: sequential creates hand out names that are unique across the
cluster and ordered by creation (the server appends a 10-digit counter of the
parent), here job ids for several workers at once. Run: python naming_service.py (a
server on 127.0.0.1:7181, or CONCORD_HOSTS)."""

import os
import threading

import concord

HOSTS = os.environ.get("CONCORD_HOSTS", "127.0.0.1:7181")
JOBS = "/examples/naming/jobs"

names: list[str] = []
lock = threading.Lock()


def worker(n: int) -> None:
    with concord.Client(HOSTS) as c:
        for _ in range(n):
            path = c.create(f"{JOBS}/job-", b"queued", sequence=True, makepath=True)
            with lock:
                names.append(path.rsplit("/", 1)[1])


threads = [threading.Thread(target=worker, args=(5,)) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()

assert len(set(names)) == 20, "every name is unique"
with concord.Client(HOSTS) as c:
    listed = c.get_children(JOBS)
    print(f"{len(listed)} names, first {listed[0]}, last {listed[-1]}")
    assert sorted(names) == listed
    c.delete("/examples/naming", recursive=True)
