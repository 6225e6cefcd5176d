"""Slots of a shared resource: a Semaphore of 4 leases ("render-slots"). Small jobs
take one slot; a big job takes three at once with acquire_many, all or nothing, so
two big jobs never each hold half of what they need. A SemaphoreMutex (not
re-entrant) then guards a hand-over: one thread takes it, another releases it.
Run: python batch_slots.py (a server on 127.0.0.1:7181, or CONCORD_HOSTS)."""

import os
import threading

import concord

HOSTS = os.environ.get("CONCORD_HOSTS", "127.0.0.1:7181")

with concord.Client(HOSTS) as c:
    slots = c.Semaphore("render-slots", identifier="example", max_leases=4)
    small = [slots.acquire_lease() for _ in range(2)]     # two small jobs run
    print("holders:", slots.lease_holders())

    # Three slots asked, two free: none is kept after the timeout.
    print("big job now:", slots.acquire_many(3, timeout=0.5))
    print("still held:", len(slots.lease_holders()))       # 2: the small jobs'

    for lease in small:                                   # the small jobs end
        slots.return_lease(lease)
    big = slots.acquire_many(3, timeout=5)
    assert big is not None
    print("big job runs on", len(big), "slots, tokens", [lease.token for lease in big])
    for lease in big:
        slots.return_lease(lease)

    # Not re-entrant: a second acquire through the holder waits like anyone's.
    gate = c.SemaphoreMutex("hand-over")
    assert gate.acquire()
    try:
        gate.acquire(timeout=0.3)
    except concord.LockTimeout:
        print("again while held: not within 0.3 s")       # LockTimeout, as kazoo's
    threading.Thread(target=gate.release).start()         # released elsewhere...
    print("after the hand-over:", gate.acquire(timeout=5))  # ...so this one gets it
    gate.release()
