"""Config centre: a service reads its settings from one node and follows every
change with a DataWatch, including the node's deletion and re-creation. An admin
(another client, as another process would be) edits the node. Run: python
config_centre.py (a server on 127.0.0.1:7181, or CONCORD_HOSTS)."""

import json
import os
import queue

import concord

HOSTS = os.environ.get("CONCORD_HOSTS", "127.0.0.1:7181")
PATH = "/examples/config-centre/app"

service = concord.Client(HOSTS)
admin = concord.Client(HOSTS)
service.start()
admin.start()
admin.delete("/examples/config-centre", recursive=True)   # a clean start
admin.create(PATH, json.dumps({"pool": 4}).encode(), makepath=True)

seen: "queue.Queue[dict | None]" = queue.Queue()


@service.DataWatch(PATH)
def on_config(data, stat):
    """Runs now and after each change, on the client's callback thread."""
    config = None if data is None else json.loads(data)
    print(f"  config is {config} (version {stat.version if stat else '-'})")
    seen.put(config)
    return config != {"pool": 0}      # returning False stops the watch


assert seen.get(timeout=5) == {"pool": 4}
admin.set(PATH, json.dumps({"pool": 8}).encode())
assert seen.get(timeout=5) == {"pool": 8}
admin.delete(PATH)
assert seen.get(timeout=5) is None                  # gone: (None, None)
admin.create(PATH, json.dumps({"pool": 0}).encode())
assert seen.get(timeout=5) == {"pool": 0}           # and the watch stops here
print("stopped:", on_config.stopped)
admin.delete("/examples/config-centre", recursive=True)
service.close()
admin.close()
