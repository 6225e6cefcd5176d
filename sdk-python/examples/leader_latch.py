"""Leader latch: three candidates (each its own client and session, as three
processes would be) campaign for "scheduler", each announcing its address as its
value; one leads; when it closes, the next in line leads. A fourth client observes
the election and learns where the leader is. Run: python leader_latch.py (a server
on 127.0.0.1:7181, or CONCORD_HOSTS)."""

import os

import concord

HOSTS = os.environ.get("CONCORD_HOSTS", "127.0.0.1:7181")

clients = [concord.Client(HOSTS, session_timeout=5.0) for _ in range(3)]
for c in clients:
    c.start()
latches = [
    c.LeaderLatch("scheduler", id=f"node-{i}", value=f"10.0.0.{i}:8080".encode())
    for i, c in enumerate(clients)
]
for latch in latches:
    latch.add_listener(lambda event, who=latch.id: print(f"  {who} hears {event.value}"))
    latch.start()
    latch.wait(timeout=0.5)  # the first leads at once; the others queue behind it

print("candidates:", [p.id for p in latches[0].get_participants()])
leader = next(latch for latch in latches if latch.has_leadership())
print(f"leader: {leader.id}, fence {leader.fence}")

watcher = concord.Client(HOSTS)                 # not started: observing needs no session
changes = watcher.observe("scheduler")          # the current leader first, then each change
now = changes.next(timeout=5.0).leader
print(f"observer: {now.id} leads at {now.value.decode()}")

leader.close()                                  # resigns: the next in line leads
nxt = latches[latches.index(leader) + 1]
assert nxt.wait(timeout=5.0)
print(f"after {leader.id} closed, leader: {nxt.id}")
now = changes.next(timeout=5.0).leader
print(f"observer: {now.id} leads at {now.value.decode()}")

changes.cancel()
watcher.close()
for latch in latches:
    latch.close()
for c in clients:
    c.close()
