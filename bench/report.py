#!/usr/bin/env python3
"""Turns the JSON lines written by concord-bench into docs/benchmarks.md and PNG charts.

Called by bench/peers.sh; needs only the standard library and matplotlib (Debian's
python3-matplotlib). It does not run anything: it only reads results and writes docs.
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
ORDER = {"concord": 0, "zookeeper": 1, "etcd": 2}
COLORS = {"concord": "#d62728", "zookeeper": "#1f77b4", "etcd": "#2ca02c"}

INTRO = """# Benchmarks: Concord beside ZooKeeper and etcd

One command measures the three systems on the same machine, in one run, with one
workload definition (`bench/src/workloads.rs`, `lock.rs`, `memory.rs`) driving each
through a small driver trait (`bench/src/drivers/`): Concord over its native gRPC API
(tonic's generated clients, each on its own HTTP/2 connection called directly through
the h2 crate, `drivers/direct.rs`), ZooKeeper with the `zookeeper-client` crate, etcd
with the `etcd-client` crate (tonic's `Channel` over hyper). Every
system gets the same number of client connections (one per simulated client, each
issuing one request at a time), the same 100-byte values, key counts, warm-up and
measured window.

```sh
bench/peers.sh            # full run: 1- and 3-node peers, 10 s per point, 1,000,000 nodes
bench/peers.sh --short    # developer run, about 2 minutes: 1-node, 1 s per point, 10,000 nodes
bench/peers.sh --short --three   # the short run plus the 3-node peer ensembles
bench/peers.sh --failover --systems concord   # one workload alone (or --memory): its results printed, docs untouched
```

The script installs ZooKeeper, etcd (and protoc, matplotlib) from Debian's packages when
missing, builds dist binaries (`concord`, and `concord-bench --features peers`; the
`dist` profile, the shipped one, measures every figure here),
starts every server on 127.0.0.1 in a scratch folder with its default durability
(Concord fsyncs its redb log; ZooKeeper `forceSync=yes` by default; etcd fsyncs its WAL
by default), runs the workloads, stops everything it started (a trap also does this on
failure or Ctrl-C), and writes this page, the charts in `docs/benchmarks/` and the raw
results (`docs/benchmarks/results.jsonl`). Normal workspace builds do not compile the
ZooKeeper and etcd clients: they are behind the `zookeeper` / `etcd` (or `peers`)
features of `concord-bench`.

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
        out.append(f"{pkg} {v or '?'}")
    return ", ".join(out)


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
    if usable:
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
    if not three:
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
    if systems:
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
    a = p.parse_args()
    rows = load(a.results)
    os.makedirs(a.charts, exist_ok=True)
    rel = os.path.relpath(a.charts, os.path.dirname(os.path.abspath(a.out)))
    out = [INTRO, f"## {a.heading}", "",
           f"Command: `{a.command}`", "",
           f"Machine: {machine()}; {versions()}; Concord from this repository. "
           f"Measured window {a.duration_s} s after {a.warmup_s} s of warm-up per point; "
           f"memory with {a.fill_count} nodes; {a.election_rounds} election rounds per "
           f"variant.", ""]
    if a.note:
        out += [a.note, ""]
    out += targets_section(rows)
    for name, title in CLOSED_LOOP:
        sel = [r for r in rows if r["workload"] == name]
        if sel:
            out += closed_loop_section(name, title, sel, a.charts, rel)
    watch = [dict(r, watchers=int(r["workload"].split("-")[1]))
             for r in rows if r["workload"].startswith("watch")
             and r["workload"].split("-")[-1].isdigit()]
    if watch:
        out += watch_section(watch, a.charts, rel)
    locks = [r for r in rows if r["workload"] in ("lock-handoff", "lock")]
    if locks:
        out += lock_section(locks, a.charts, rel)
    elections = [r for r in rows if r["workload"].startswith("election")]
    if elections:
        out += election_section(elections)
    failovers = [r for r in rows if r["workload"] == "failover"]
    if failovers:
        out += failover_section(failovers)
    mem = [r for r in rows if r["workload"] in ("memory", "restart")]
    if mem:
        out += memory_section(mem, a.charts, rel)
    failed = [r for r in rows if r.get("note", "").startswith("failed")]
    if failed:
        out += ["### failed runs", ""] + [f"- {r['system']} {r['nodes']}-node "
                                          f"{r['workload']} x{r['clients']}: {r['note']}"
                                          for r in failed] + [""]
    # Hand-written sections kept across runs (e.g. the group-commit measurement).
    kept = os.path.join(os.path.dirname(os.path.abspath(a.out)), "benchmarks", "single-server.md")
    if os.path.exists(kept):
        with open(kept) as f:
            out += [line for line in f.read().splitlines() if not line.startswith("<!--")]
    with open(a.out, "w") as f:
        f.write("\n".join(out))


if __name__ == "__main__":
    main()
