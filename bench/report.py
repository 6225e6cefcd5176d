#!/usr/bin/env python3
"""Turns the JSON lines written by concord-bench into docs/benchmarks.md and PNG charts.

Called by bench/peers.sh; needs only the standard library and matplotlib (Debian's
python3-matplotlib). It does not run anything: it only reads results and writes docs.

With --section FILE it writes only that run's section (tables, no charts) to FILE and
splices it into --out between markers, leaving the rest of the page as it is; a later
full run keeps FILE's section in the page it writes.
"""
import argparse
import json
import os
import platform
import subprocess
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

CLOSED_LOOP = [
    ("write", "Write: set 100-byte values on distinct existing keys (one key per client)"),
    ("read", "Read, default (sequential): Concord Get, ZooKeeper getData, etcd serializable get"),
    ("read-linearizable", "Read, linearizable: Concord Get linearizable=true, "
                          "ZooKeeper sync + getData, etcd default get"),
    ("create-ephemeral-seq", "Create ephemeral-sequential under one parent "
                             "(etcd: put with the client's lease under a unique key)"),
]
ORDER = {"concord": 0, "concord-zookeeper": 1, "zookeeper": 2, "etcd": 3}
COLORS = {"concord": "#d62728", "concord-zookeeper": "#ff7f0e", "zookeeper": "#1f77b4",
          "etcd": "#2ca02c"}
# The kept section of the ZooKeeper-port comparison, between these lines in the page.
PORT_SECTION = "zookeeper-port.md"
PORT_BEGIN = "<!-- bench/peers.sh: the ZooKeeper-port comparison begins -->"
PORT_END = "<!-- bench/peers.sh: the ZooKeeper-port comparison ends -->"

INTRO = """# Benchmarks: Concord beside ZooKeeper and etcd

One command measures the three systems on the same machine, in one run, with one
workload definition (`bench/src/workloads.rs`, `lock.rs`, `memory.rs`) driving each
through a small driver trait (`bench/src/drivers/`): Concord over its native gRPC API
(tonic's generated clients, each on its own HTTP/2 connection called directly through
the h2 crate, `drivers/direct.rs`), ZooKeeper with the `zookeeper-client` crate, etcd
with the `etcd-client` crate (tonic's `Channel` over hyper). Every
system gets the same number of client connections (one per simulated client, each
issuing one request at a time), the same 100-byte values, key counts, warm-up and
measured window. A fourth system, `concord-zookeeper`, is Concord through its
ZooKeeper-protocol port (`concord --zookeeper-addr`, docs/zookeeper.md) driven by the
same ZooKeeper driver and crate as ZooKeeper itself, so that only the server differs.

```sh
bench/peers.sh            # full run: 1- and 3-node peers, 10 s per point, 1,000,000 nodes
bench/peers.sh --short    # developer run, about 2 minutes: 1-node, 1 s per point, 10,000 nodes
bench/peers.sh --short --three   # the short run plus the 3-node peer ensembles
bench/peers.sh --failover --systems concord   # one workload alone (or --memory): its results printed, docs untouched
bench/peers.sh --short --systems concord-zookeeper,zookeeper   # Concord's ZooKeeper port beside ZooKeeper: its own section
```

The script installs the peers chosen (ZooKeeper, etcd) and protoc and matplotlib from
Debian's packages when missing, builds dist binaries (`concord`, and `concord-bench --features peers`; the
`dist` profile, the shipped one, measures every figure here),
starts every server on 127.0.0.1 in a scratch folder with its default durability
(Concord fsyncs its redb log; ZooKeeper `forceSync=yes` by default; etcd fsyncs its WAL
by default), runs the workloads, stops everything it started (a trap also does this on
failure or Ctrl-C), and writes this page, the charts in `docs/benchmarks/` and the raw
results (`docs/benchmarks/results.jsonl`). Normal workspace builds do not compile the
ZooKeeper and etcd clients: they are behind the `zookeeper` / `etcd` (or `peers`)
features of `concord-bench`.

A run with `concord-zookeeper` and without `concord` is the ZooKeeper-port comparison:
instead of this page's run it writes its own section, "Concord's ZooKeeper port beside
ZooKeeper" (kept in `docs/benchmarks/zookeeper-port.md`, raw results in
`docs/benchmarks/zookeeper-port.jsonl`; a later full run keeps it), with a table of
every point both systems ran and the ratio of Concord's port to ZooKeeper at each.
Concord's port is started as `concord --zookeeper-addr` on the client port + 3
(17194 for one server; scripts/ensemble.sh gives an ensemble's servers theirs), and its
failover rounds find and kill the leader as for `concord`.

What each workload measures:

- **write / read / read-linearizable / create-ephemeral-seq**: closed loop at 1, 16 and
  64 clients; ops/s and latency p50/p99/p99.9/max of successful operations.
- **watch fan-out**: one writer sets one key that 1 or 100 clients watch (Concord Watch
  stream, ZooKeeper persistent watch, etcd watch); the latency is from just before the
  write is sent to the moment the last watcher has its event; rounds run back to back.
- **lock hand-off**: 8 clients contend on one lock (ZooKeeper: ephemeral-sequential +
  predecessor-watch recipe of `zookeeper-client`; etcd: its Lock RPC with a lease;
  Concord: its Lock RPC). Acquisitions per second, hand-off latency (from the holder
  starting its release to the next holder returning from acquire) and a
  mutual-exclusion check (`overlaps`, must be 0).
- **election failover**: two fresh clients per round on a fresh election; A campaigns
  and leads, B campaigns and waits in the server (the bench polls the candidate queue
  until B is in it), then A's session is closed (etcd: its lease revoked) or A resigns;
  the latency is from just before that call to B's Campaign returning as leader
  (Concord: Election service; ZooKeeper: Curator's LeaderLatch recipe of
  `zookeeper-client`, ephemeral-sequential + predecessor watch; etcd: its Election API
  with a lease). One warm-up round, then 50 measured rounds (10 in short mode) per
  variant.
- **memory / restart**: N nodes of 100 bytes are created (64 clients), the server's RSS
  is read from /proc; the server is then stopped and started on the same data, and the
  restart time is from the start command until the last node can be read.
- **CPU**: utime+stime from /proc of the bench process (client) and of every server
  process (summed), over the measured window, in percent of one core.

- **failover** (3-node runs only): on a fresh 3-node ensemble of each system, the
  leader is killed with kill -9; writes are then tried through the ensemble, each on a
  fresh client bounded to 250 ms, until one is acknowledged. The time is from the kill to
  that acknowledgement; 3 rounds in short mode, 10 in a full run.

On 3-node ensembles every system gets the whole endpoint list: ZooKeeper's and etcd's
clients pick servers themselves, and Concord's bench driver spreads its connections
over the servers in turn (followers forward writes to the leader).
"""


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def fmt(v, digits=2):
    if v is None:
        return "-"
    if isinstance(v, float) and v != v:  # NaN
        return "-"
    return f"{v:,.{digits}f}"


def key(r):
    return (r["clients"], ORDER.get(r["system"], 9), r["nodes"])


def versions():
    out = []
    for pkg in ("zookeeper", "etcd-server"):
        try:
            v = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg],
                               capture_output=True, text=True, check=False).stdout
        except OSError:
            v = ""
        if v:  # only the peers installed
            out.append(f"{pkg} {v}")
    return ", ".join(out) or "no peers installed"


def machine():
    cores = os.cpu_count()
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            mem = f"{kb / 1024 / 1024:.0f} GiB"
    except OSError:
        pass
    return f"{cores} cores, {mem} RAM, Linux {platform.release()}"


def closed_loop_table(rows):
    lines = ["| system | nodes | clients | ops/s | p50 ms | p99 ms | p99.9 ms | max ms | "
             "client cpu % | server cpu % | errors | notes |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in sorted(rows, key=key):
        lines.append(f"| {r['system']} | {r['nodes']} | {r['clients']} | {fmt(r['ops_s'], 0)} | "
                     f"{fmt(r['p50_ms'])} | {fmt(r['p99_ms'])} | {fmt(r['p999_ms'])} | "
                     f"{fmt(r['max_ms'])} | {fmt(r['client_cpu_pct'], 0)} | "
                     f"{fmt(r['server_cpu_pct'], 0)} | {r['errors']} | {r.get('note', '')} |")
    return "\n".join(lines)


def bar_chart(path, title, groups, series, value, ylabel):
    """groups: x labels; series: {label: {group: row}}; value: row -> number."""
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / max(len(series), 1)
    for i, (label, by_group) in enumerate(series.items()):
        xs = [g + i * width for g in range(len(groups))]
        ys = [value(by_group[g]) if g in by_group and value(by_group[g]) is not None else 0
              for g in groups]
        system = label.split(" ")[0]
        ax.bar(xs, ys, width, label=label, color=COLORS.get(system),
               alpha=1.0 if "1-node" in label else 0.55)
    ax.set_xticks([g + width * (len(series) - 1) / 2 for g in range(len(groups))])
    ax.set_xticklabels([str(g) for g in groups])
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize="small")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def series_of(rows, group_field):
    series = defaultdict(dict)
    for r in sorted(rows, key=key):
        series[f"{r['system']} {r['nodes']}-node"][r[group_field]] = r
    return series


def closed_loop_section(name, title, rows, charts, rel):
    out = [f"### {name}", "", title + ".", "", closed_loop_table(rows), ""]
    if charts is None:
        return out
    groups = sorted({r["clients"] for r in rows})
    for metric, ylabel in (("ops_s", "ops/s"), ("p99_ms", "p99 latency, ms")):
        png = f"{name}-{metric}.png"
        bar_chart(os.path.join(charts, png), f"{name}: {ylabel} by clients", groups,
                  series_of(rows, "clients"), lambda r, m=metric: r.get(m), ylabel)
        out.append(f"![{name} {ylabel}]({rel}/{png})")
    out.append("")
    return out


def watch_section(rows, charts, rel):
    out = ["### watch fan-out", "",
           "One writer, W watchers; latency from the write being sent to the last watcher's "
           "event. `rounds/s` is writes per second with every watcher caught up.", "",
           "| system | nodes | watchers | rounds/s | p50 ms | p99 ms | max ms | "
           "server cpu % | errors | notes |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in sorted(rows, key=lambda r: (r["watchers"], ORDER.get(r["system"], 9), r["nodes"])):
        out.append(f"| {r['system']} | {r['nodes']} | {r['watchers']} | {fmt(r['ops_s'], 0)} | "
                   f"{fmt(r['p50_ms'])} | {fmt(r['p99_ms'])} | {fmt(r['max_ms'])} | "
                   f"{fmt(r['server_cpu_pct'], 0)} | {r['errors']} | {r.get('note', '')} |")
    if charts is None:
        return out + [""]
    groups = sorted({r["watchers"] for r in rows})
    png = "watch-p99_ms.png"
    bar_chart(os.path.join(charts, png), "watch fan-out: p99 to the last watcher, ms",
              groups, series_of(rows, "watchers"), lambda r: r.get("p99_ms"), "ms")
    out += ["", f"![watch fan-out p99]({rel}/{png})", ""]
    return out


def lock_section(rows, charts, rel):
    out = ["### lock hand-off", "",
           "Contenders on one lock; acquisitions per second, hand-off latency, overlaps "
           "(two holders at once; must be 0).", "",
           "| system | nodes | clients | acquisitions/s | hand-off p50 ms | p99 ms | max ms | "
           "overlaps | errors | notes |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in sorted(rows, key=key):
        out.append(f"| {r['system']} | {r['nodes']} | {r['clients']} | {fmt(r['ops_s'], 0)} | "
                   f"{fmt(r['p50_ms'])} | {fmt(r['p99_ms'])} | {fmt(r['max_ms'])} | "
                   f"{fmt(r.get('overlaps'), 0)} | {r['errors']} | {r.get('note', '')} |")
    usable = [r for r in rows if not r.get("note")]
    if usable and charts is not None:
        png = "lock-ops_s.png"
        bar_chart(os.path.join(charts, png), "lock hand-offs per second",
                  sorted({r["clients"] for r in usable}), series_of(usable, "clients"),
                  lambda r: r.get("ops_s"), "acquisitions/s")
        out += ["", f"![lock hand-offs]({rel}/{png})"]
    out.append("")
    return out


def election_section(rows):
    out = ["### election failover", "",
           "Time from the leader going (its session closed, or it resigning) to the waiting "
           "candidate's Campaign returning as leader.", "",
           "| system | nodes | leader goes by | rounds ok | p50 ms | p99 ms | max ms | errors | "
           "notes |",
           "|---|---:|---|---:|---:|---:|---:|---:|---|"]
    how = {"election-close": "session close", "election-resign": "resign"}
    for r in sorted(rows, key=lambda r: (r["workload"], ORDER.get(r["system"], 9), r["nodes"])):
        out.append(f"| {r['system']} | {r['nodes']} | {how.get(r['workload'], r['workload'])} | "
                   f"{r['ops']} | {fmt(r['p50_ms'])} | {fmt(r['p99_ms'])} | {fmt(r['max_ms'])} | "
                   f"{r['errors']} | {r.get('note', '')} |")
    out.append("")
    return out


def failover_section(rows):
    by_system = defaultdict(list)
    for r in rows:
        by_system[(r["system"], r["nodes"])].append(r)
    out = ["### failover", "",
           "kill -9 of the leader of a fresh 3-node ensemble (default settings), then writes "
           "through the ensemble, each on a fresh client and bounded to 250 ms, until one is "
           "acknowledged; the time is from the kill to that acknowledgement.", "",
           "| system | nodes | rounds ok | p50 ms | max ms | each ms | notes |",
           "|---|---:|---:|---:|---:|---|---|"]
    for (system, nodes), rs in sorted(by_system.items(), key=lambda kv: ORDER.get(kv[0][0], 9)):
        ms = sorted(r["failover_ms"] for r in rs if r.get("failover_ms") is not None)
        notes = "; ".join(sorted({r.get("note", "") for r in rs if r.get("note")}))
        p50 = ms[len(ms) // 2] if ms else None
        each = ", ".join(fmt(m, 0) for m in ms)
        out.append(f"| {system} | {nodes} | {len(ms)} | {fmt(p50, 0)} | "
                   f"{fmt(ms[-1] if ms else None, 0)} | {each} | {notes} |")
    out.append("")
    return out


# Issue 5's targets, each a ratio on the 3-node ensembles of one run:
# (what, workload, clients, field, the better direction, {peer: threshold}).
TARGETS = [
    ("writes at 64 clients", "write", 64, "ops_s", "higher", {"zookeeper": 1.5, "etcd": 2.5}),
    ("default reads at 64 clients", "read", 64, "ops_s", "higher", {"zookeeper": 1.0}),
    ("create-ephemeral-sequential at 64 clients", "create-ephemeral-seq", 64, "ops_s", "higher",
     {"zookeeper": 1.5}),
    ("watch fan-out p99 to 100 watchers", "watch-100", 1, "p99_ms", "lower", {"zookeeper": 0.5}),
    ("lock hand-offs per second", "lock-handoff", 8, "ops_s", "higher",
     {"zookeeper": 2.0, "etcd": 10.0}),
]
FAILOVER_TARGET_MS = 1000


def targets_section(rows):
    """The targets table, from this run's 3-node rows; empty without them."""
    three = [r for r in rows if r["nodes"] == 3]
    if not any(r["system"] == "concord" for r in three):
        return []

    def value(system, workload, clients, field):
        for r in three:
            if (r["system"], r["workload"], r["clients"]) == (system, workload, clients):
                return r.get(field)
        return None

    unit = {"ops_s": "/s", "p99_ms": " ms"}
    out = ["### against the targets of issue 5 (3-node)", "",
           "Each target is a ratio of Concord to a peer in this run (for latency, lower is "
           "better: Concord's p99 over the peer's).", "",
           "| target | concord | zookeeper | etcd | ratio | met |",
           "|---|---:|---:|---:|---|---|"]
    for what, workload, clients, field, better, wanted in TARGETS:
        vals = {s: value(s, workload, clients, field) for s in ("concord", "zookeeper", "etcd")}
        digits = 0 if field == "ops_s" else 2
        cells = [fmt(v, digits) + unit[field] if v is not None else "-" for v in vals.values()]
        ratios, met = [], True
        for peer, threshold in wanted.items():
            c, p = vals["concord"], vals[peer]
            if not c or not p:
                ratios.append(f"{peer}: -")
                met = False
                continue
            ratio = c / p
            ok = ratio >= threshold if better == "higher" else ratio <= threshold
            met = met and ok
            sign = "≥" if better == "higher" else "≤"
            ratios.append(f"{ratio:.2f}× {peer} (target {sign} {threshold:g}×)")
        out.append(f"| {what} | {' | '.join(cells)} | {'; '.join(ratios)} | "
                   f"{'yes' if met else 'no'} |")
    spans = {}
    for s in ("concord", "zookeeper", "etcd"):
        ms = sorted(r["failover_ms"] for r in three
                    if r["workload"] == "failover" and r["system"] == s
                    and r.get("failover_ms") is not None)
        spans[s] = ms
    if any(spans.values()):
        cells = [f"{fmt(ms[0], 0)}–{fmt(ms[-1], 0)} ms" if ms else "-" for ms in spans.values()]
        ok = bool(spans["concord"]) and spans["concord"][-1] < FAILOVER_TARGET_MS
        out.append(f"| failover after kill -9 of the leader, every round | {' | '.join(cells)} "
                   f"| target < {FAILOVER_TARGET_MS:,} ms | {'yes' if ok else 'no'} |")
    out.append("")
    return out


def port_measures(workload):
    """What one point of `workload` is judged by: [(field, label, higher is better)]."""
    if workload.startswith("watch-"):
        return [("p99_ms", "p99 to the last watcher, ms", False)]
    if workload.startswith("election"):
        return [("p50_ms", "p50 to the new leader, ms", False)]
    if workload == "failover":
        return [("failover_ms", "p50 of the rounds, ms", False)]
    if workload == "memory":
        return [("ops_s", "fill creates/s", True), ("rss_mib", "RSS after fill, MiB", False)]
    if workload == "restart":
        return [("restart_ms", "restart, ms", False)]
    if workload in ("lock-handoff", "lock"):
        return [("ops_s", "acquisitions/s", True)]
    return [("ops_s", "ops/s", True)]


def port_section(rows):
    """Concord's ZooKeeper port against ZooKeeper at every point both ran (same driver)."""
    mine = [r for r in rows if r["system"] == "concord-zookeeper"]
    theirs = [r for r in rows if r["system"] == "zookeeper"]
    if not mine or not theirs:
        return []

    def point(r):
        return (r["workload"], r["nodes"], r["clients"])

    def value(rs, field):
        if field == "failover_ms":  # one row per round: their median
            ms = sorted(r[field] for r in rs if r.get(field) is not None)
            return ms[len(ms) // 2] if ms else None
        v = rs[0].get(field) if rs else None
        return None if v is None or v != v or rs[0].get("note", "").startswith("failed") else v

    by_point = defaultdict(lambda: ([], []))
    for r in mine:
        by_point[point(r)][0].append(r)
    for r in theirs:
        by_point[point(r)][1].append(r)
    workloads = [name for name, _ in CLOSED_LOOP] + [
        "watch-1", "watch-100", "lock-handoff", "lock", "election-close", "election-resign",
        "failover", "memory", "restart"]

    def order(p):
        w = p[0]
        rank = workloads.index(w) if w in workloads else len(workloads)
        return (p[1], rank, w, p[2])

    out = ["### concord-zookeeper against zookeeper, point by point", "",
           "The same ZooKeeper driver (`zookeeper-client`) and workloads against Concord's "
           "ZooKeeper port and against ZooKeeper. The ratio is concord-zookeeper's figure "
           "over ZooKeeper's; ahead means higher for rates, lower for times and memory.", "",
           "| workload | nodes | clients | measure | concord-zookeeper | zookeeper | ratio | "
           "ahead | notes |",
           "|---|---:|---:|---|---:|---:|---:|---|---|"]
    ahead = total = 0
    for p in sorted(by_point, key=order):
        a, b = by_point[p]
        if not a or not b:
            continue
        notes = "; ".join(sorted({r["note"] for r in a + b if r.get("note")}))
        for field, label, higher in port_measures(p[0]):
            va, vb = value(a, field), value(b, field)
            digits = 0 if field in ("ops_s", "rss_mib", "restart_ms", "failover_ms") else 2
            if va is None or not vb:
                ratio, verdict = "-", "failed" if va is None else "-"
            else:
                ratio = f"{va / vb:.2f}×"
                verdict = "yes" if (va > vb if higher else va < vb) else "no"
                ahead += verdict == "yes"
            total += 1
            out.append(f"| {p[0]} | {p[1]} | {p[2]} | {label} | {fmt(va, digits)} | "
                       f"{fmt(vb, digits)} | {ratio} | {verdict} | {notes} |")
    out += ["", f"Ahead of ZooKeeper at {ahead} of {total} points.", ""]
    return out


def memory_section(rows, charts, rel):
    fills = {r["system"]: r for r in rows if r["workload"] == "memory"}
    restarts = {r["system"]: r for r in rows if r["workload"] == "restart"}
    systems = sorted(set(fills) | set(restarts), key=lambda s: ORDER.get(s, 9))
    out = ["### memory and restart", "",
           "| system | nodes created | fill rate (creates/s, 64 clients) | RSS after fill MiB | "
           "restart ms | RSS after restart MiB |",
           "|---|---:|---:|---:|---:|---:|"]
    for s in systems:
        f, r = fills.get(s, {}), restarts.get(s, {})
        out.append(f"| {s} | {fmt(f.get('nodes_count'), 0)} | {fmt(f.get('ops_s'), 0)} | "
                   f"{fmt(f.get('rss_mib'), 0)} | {fmt(r.get('restart_ms'), 0)} | "
                   f"{fmt(r.get('rss_mib'), 0)} |")
    if systems and charts is not None:
        fig, axes = plt.subplots(1, 2, figsize=(8, 3.5))
        for ax, (field, src, title) in zip(axes, (("rss_mib", fills, "RSS after fill, MiB"),
                                                 ("restart_ms", restarts, "restart time, ms"))):
            ys = [src.get(s, {}).get(field) or 0 for s in systems]
            ax.bar(systems, ys, color=[COLORS.get(s) for s in systems])
            ax.set_title(title)
            ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(charts, "memory.png"), dpi=90)
        plt.close(fig)
        out += ["", f"![memory and restart]({rel}/memory.png)"]
    out.append("")
    return out


def results_sections(rows, charts, rel):
    """The tables (and charts, unless charts is None) of one run's rows."""
    out = targets_section(rows) + port_section(rows)
    for name, title in CLOSED_LOOP:
        sel = [r for r in rows if r["workload"] == name]
        if sel:
            out += closed_loop_section(name, title, sel, charts, rel)
    watch = [dict(r, watchers=int(r["workload"].split("-")[1]))
             for r in rows if r["workload"].startswith("watch")
             and r["workload"].split("-")[-1].isdigit()]
    if watch:
        out += watch_section(watch, charts, rel)
    locks = [r for r in rows if r["workload"] in ("lock-handoff", "lock")]
    if locks:
        out += lock_section(locks, charts, rel)
    elections = [r for r in rows if r["workload"].startswith("election")]
    if elections:
        out += election_section(elections)
    failovers = [r for r in rows if r["workload"] == "failover"]
    if failovers:
        out += failover_section(failovers)
    mem = [r for r in rows if r["workload"] in ("memory", "restart")]
    if mem:
        out += memory_section(mem, charts, rel)
    failed = [r for r in rows if r.get("note", "").startswith("failed")]
    if failed:
        out += ["### failed runs", ""] + [f"- {r['system']} {r['nodes']}-node "
                                          f"{r['workload']} x{r['clients']}: {r['note']}"
                                          for r in failed] + [""]
    return out


def kept_port_section(charts):
    """The kept ZooKeeper-port section, between its markers; empty if none was written."""
    path = os.path.join(charts, PORT_SECTION)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [PORT_BEGIN, ""] + f.read().splitlines() + ["", PORT_END, ""]


def splice_port_section(page_path, charts):
    """Puts the kept ZooKeeper-port section into the page: in place of the one between
    the markers, or else before the page's second `## ` heading (after the generated
    run's results, before the hand-written sections), or at the end."""
    lines = kept_port_section(charts)
    with open(page_path) as f:
        text = f.read()
    page = text.splitlines()
    if PORT_BEGIN in page and PORT_END in page:
        at, end = page.index(PORT_BEGIN), page.index(PORT_END) + 1
        if end < len(page) and page[end] == "":
            end += 1
        page[at:end] = lines
    else:
        headings = [i for i, line in enumerate(page) if line.startswith("## ")]
        at = headings[1] if len(headings) > 1 else len(page)
        page[at:at] = lines
    with open(page_path, "w") as f:
        f.write("\n".join(page) + ("\n" if text.endswith("\n") else ""))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--results", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--charts", required=True)
    p.add_argument("--heading", required=True)
    p.add_argument("--command", required=True)
    p.add_argument("--note", default="")
    p.add_argument("--mode", default="full")
    p.add_argument("--duration-s", default="?")
    p.add_argument("--warmup-s", default="?")
    p.add_argument("--fill-count", default="?")
    p.add_argument("--election-rounds", default="?")
    p.add_argument("--section", action="store_true",
                   help=f"write only this run's section to CHARTS/{PORT_SECTION} and "
                        "splice it into --out")
    a = p.parse_args()
    rows = load(a.results)
    os.makedirs(a.charts, exist_ok=True)
    rel = os.path.relpath(a.charts, os.path.dirname(os.path.abspath(a.out)))
    run = [f"## {a.heading}", "",
           f"Command: `{a.command}`", "",
           f"Machine: {machine()}; {versions()}; Concord from this repository. "
           f"Measured window {a.duration_s} s after {a.warmup_s} s of warm-up per point; "
           f"memory with {a.fill_count} nodes; {a.election_rounds} election rounds per "
           f"variant.", ""]
    if a.note:
        run += [a.note, ""]
    if a.section:
        run += results_sections(rows, None, rel)
        with open(os.path.join(a.charts, PORT_SECTION), "w") as f:
            f.write("\n".join(run).rstrip("\n") + "\n")
        splice_port_section(a.out, a.charts)
        return
    out = [INTRO] + run + results_sections(rows, a.charts, rel) + kept_port_section(a.charts)
    # Hand-written sections kept across runs (e.g. the group-commit measurement).
    kept = os.path.join(os.path.dirname(os.path.abspath(a.out)), "benchmarks", "single-server.md")
    if os.path.exists(kept):
        with open(kept) as f:
            out += [line for line in f.read().splitlines() if not line.startswith("<!--")]
    with open(a.out, "w") as f:
        f.write("\n".join(out))


if __name__ == "__main__":
    main()
