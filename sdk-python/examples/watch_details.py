"""Watch details: a DataWatch told what changed (kazoo's three-parameter form), a
ChildrenWatch with send_event, a NodeCache and a ChildrenCache, and a cache listener
that falls behind: it is told once how many events it missed, while the cache itself
stays complete. Run: python watch_details.py (a server on 127.0.0.1:7181, or
CONCORD_HOSTS)."""

import os
import threading
import time

import concord

HOSTS = os.environ.get("CONCORD_HOSTS", "127.0.0.1:7181")
ROOT = "/examples/watch-details"
JOBS = 1500  # more than a listener's backlog of 1024

c = concord.Client(HOSTS)
c.start()
c.delete(ROOT, recursive=True)  # a clean start
c.create(f"{ROOT}/jobs", makepath=True)
c.create(f"{ROOT}/status", b"idle")
calls = []  # one entry per watch call, to wait for them below


@c.DataWatch(f"{ROOT}/status")
def on_status(data, stat, event):
    """Three parameters: the event that caused the call comes too (None at first)."""
    cause = "first call" if event is None else f"{event.type.name} {event.path}"
    print(f"  status {data!r} ({cause})")
    calls.append("status")


@c.ChildrenWatch(f"{ROOT}/jobs", send_event=True)
def on_jobs(children, event):
    cause = "first call" if event is None else f"{event.type.name} {event.path}"
    print(f"  jobs {children} ({cause})")
    calls.append("jobs")


def wait_for(what, cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"not within {timeout} s: {what}")
        time.sleep(0.02)


c.set(f"{ROOT}/status", b"busy")
c.create(f"{ROOT}/jobs/first", b"1")
c.delete(f"{ROOT}/jobs/first")
wait_for("the watches' calls", lambda: calls.count("status") == 2 and calls.count("jobs") == 3)
on_jobs.close()  # the burst below would print 1500 lists

with c.NodeCache(f"{ROOT}/status") as status, c.ChildrenCache(f"{ROOT}/jobs") as jobs:
    status.wait_initialized(5)
    jobs.wait_initialized(5)
    print(f"status cache: {status.current().data!r}; jobs cache: {jobs.names()}")

    gate = threading.Event()
    lagged = []

    def slow(event):
        gate.wait(10)  # a listener stuck while the jobs arrive
        if event.type is concord.CacheEventType.LAGGED:
            lagged.append(event.missed)

    jobs.add_listener(slow)
    for start in range(0, JOBS, 750):  # two transactions of 750 creates
        t = c.transaction()
        for i in range(start, start + 750):
            t.create(f"{ROOT}/jobs/job-{i:04}", b"todo")
        t.commit()
    wait_for("the cache to hold every job", lambda: len(jobs) == JOBS)
    print(f"the cache holds {len(jobs)} jobs while its listener is stuck")
    gate.set()
    wait_for("the lag notice", lambda: lagged)
    print(f"the listener was told it missed {lagged[0]} events, and went on")

c.delete(ROOT, recursive=True)
c.close()
