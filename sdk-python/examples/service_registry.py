"""Service registry: each instance of "web" registers itself with an ephemeral,
sequential node that lives as long as its session; a client follows the list of
instances with a ChildrenWatch. When an instance stops (or dies, and its session
expires) its node goes and the watchers hear it. Run: python service_registry.py (a
server on 127.0.0.1:7181, or CONCORD_HOSTS)."""

import os
import queue

import concord

HOSTS = os.environ.get("CONCORD_HOSTS", "127.0.0.1:7181")
SERVICE = "/examples/services/web"

watcher = concord.Client(HOSTS)
watcher.start()
watcher.ensure_path(SERVICE)
lists: "queue.Queue[list[str]]" = queue.Queue()


@watcher.ChildrenWatch(SERVICE)
def on_instances(children):
    print(f"  web instances: {children}")
    lists.put(children)


def wait_for(count: int) -> list[str]:
    while True:
        children = lists.get(timeout=5)
        if len(children) == count:
            return children


wait_for(0)
instances = []
for port in (8080, 8081, 8082):
    c = concord.Client(HOSTS, session_timeout=5.0)  # one session per instance
    c.start()
    c.create(f"{SERVICE}/i-", f"10.0.0.7:{port}".encode(), ephemeral=True, sequence=True)
    instances.append(c)
names = wait_for(3)
for name in names:
    data, _ = watcher.get(f"{SERVICE}/{name}")
    print(f"  {name} -> {data.decode()}")

instances[0].close()      # its session closes: its registration goes at once
print("after one instance stopped:", wait_for(2))
on_instances.close()
for c in instances[1:]:
    c.close()
watcher.delete("/examples/services", recursive=True)
watcher.close()
