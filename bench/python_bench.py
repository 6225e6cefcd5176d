"""Sequential get / set of a small node through one Python client, for bench/python.sh.

    python_bench.py run --system concord|kazoo --hosts H --out FILE [--duration-s 5 --warmup-s 1]
    python_bench.py report FILE

`run` starts one client (concord.Client or kazoo's KazooClient), creates one node per
thread with a 100-byte value, then for each workload (get and set, with 1 and 8 threads
sharing that client) runs every thread in a closed loop -- one call at a time -- for the
warm-up and then the measured window, and appends a JSON line per workload to FILE.
`report` prints ops/s per workload and system and the ratio concord / kazoo.
"""

from __future__ import annotations

import argparse
import json
import threading
import time

VALUE = b"v" * 100
WORKLOADS = [("get", 1), ("set", 1), ("get", 8), ("set", 8)]
ROOT = "/pybench"


def make_client(system: str, hosts: str):
    if system == "concord":
        import concord

        client = concord.Client(hosts)
        client.start(timeout=30)
        return client, client.close
    from kazoo.client import KazooClient

    client = KazooClient(hosts=hosts)
    client.start(timeout=30)

    def close() -> None:
        client.stop()
        client.close()

    return client, close


def run_point(client, op: str, threads: int, warmup: float, duration: float) -> dict:
    paths = [f"{ROOT}/n{i}" for i in range(threads)]
    counts = [0] * threads
    errors = [0] * threads
    start = time.monotonic()
    measure_from = start + warmup
    end = measure_from + duration

    def worker(i: int) -> None:
        path = paths[i]
        call = (lambda: client.get(path)) if op == "get" else (lambda: client.set(path, VALUE))
        n = 0
        while True:  # bounded by the deadline
            now = time.monotonic()
            if now >= end:
                break
            try:
                call()
            except Exception:  # counted, not retried: the point is ops/s of successes
                errors[i] += 1
                continue
            if now >= measure_from:
                n += 1
        counts[i] = n

    ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=warmup + duration + 60)
    return {"ops": sum(counts), "errors": sum(errors), "ops_s": sum(counts) / duration}


def cmd_run(args: argparse.Namespace) -> None:
    client, close = make_client(args.system, args.hosts)
    try:
        for i in range(max(t for _, t in WORKLOADS)):
            path = f"{ROOT}/n{i}"
            if client.exists(path) is None:
                client.create(path, VALUE, makepath=True)
        for op, threads in WORKLOADS:
            r = run_point(client, op, threads, args.warmup_s, args.duration_s)
            r.update(system=args.system, workload=op, threads=threads, duration_s=args.duration_s)
            print(f"{args.system:8} {op} x{threads}: {r['ops_s']:,.0f} ops/s ({r['errors']} errors)", flush=True)
            with open(args.out, "a") as f:
                f.write(json.dumps(r) + "\n")
    finally:
        close()


def cmd_report(args: argparse.Namespace) -> None:
    rows = [json.loads(line) for line in open(args.file) if line.strip()]
    by = {(r["system"], r["workload"], r["threads"]): r for r in rows}
    print("| workload | threads | concord-client ops/s | kazoo ops/s | concord / kazoo |")
    print("|---|---:|---:|---:|---:|")
    for op, threads in WORKLOADS:
        c, k = by.get(("concord", op, threads)), by.get(("kazoo", op, threads))
        cs = f"{c['ops_s']:,.0f}" if c else "-"
        ks = f"{k['ops_s']:,.0f}" if k else "-"
        ratio = f"{c['ops_s'] / k['ops_s']:.2f}" if c and k and k["ops_s"] else "-"
        errs = sum(r["errors"] for r in (c, k) if r)
        note = f" ({errs} errors)" if errs else ""
        print(f"| {op} | {threads} | {cs} | {ks} | {ratio}{note} |")


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--system", choices=["concord", "kazoo"], required=True)
    r.add_argument("--hosts", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--duration-s", type=float, default=5.0)
    r.add_argument("--warmup-s", type=float, default=1.0)
    q = sub.add_parser("report")
    q.add_argument("file")
    a = p.parse_args()
    cmd_run(a) if a.cmd == "run" else cmd_report(a)


if __name__ == "__main__":
    main()
