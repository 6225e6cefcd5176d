"""A lock guarding a fenced write: four threads add to one counter, each under the
lock "counter", writing with the lock's fence (the server refuses the write with
FencedError if the hold is gone, say because the session was lost meanwhile).
Run: python locked_counter.py (a server on 127.0.0.1:7181, or CONCORD_HOSTS)."""

import os
import threading

import concord

HOSTS = os.environ.get("CONCORD_HOSTS", "127.0.0.1:7181")

with concord.Client(HOSTS) as c:
    c.ensure_path("/counter")
    c.set("/counter", b"0")

    def add(times: int) -> None:
        lock = c.Lock("counter", identifier=threading.current_thread().name)  # one per thread
        for _ in range(times):
            with lock:
                value, _ = c.get("/counter")
                c.set("/counter", str(int(value) + 1).encode(), fence=lock.fence)

    threads = [threading.Thread(target=add, args=(25,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("counter:", c.get("/counter")[0].decode())  # 100: no update lost

    # After release the fence is refused.
    lock = c.Lock("counter")
    with lock:
        fence = lock.fence
    try:
        c.set("/counter", b"-1", fence=fence)
    except concord.FencedError as e:
        print("stale fence refused:", e.code.name)
