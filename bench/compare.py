"""Compares two sides of alternating benchmark rounds (bench/tls.sh, bench/ab.sh).

    python3 bench/compare.py LABEL_A A.jsonl LABEL_B B.jsonl

Each file holds concord-bench's results (one JSON object per run); runs are grouped by
(workload, clients). Prints a Markdown table: every run's ops/s and the median of each
side, the ratio of the medians (B / A), the median p50 latency, and the CPU spent per
op by the bench client and by the server(s), each side's median. CPU per op is the
steadier figure where client and server share the machine's cores.
"""
import json
import statistics
import sys
from collections import defaultdict


def load(path):
    runs = defaultdict(list)
    for line in open(path):
        r = json.loads(line)
        runs[(r["workload"], r["clients"])].append(r)
    return runs


def per_op_us(r, key):  # CPU percent of one core -> µs per op
    pct = r.get(key)
    if pct is None or not r["ops_s"]:
        return float("nan")
    return pct / 100 * 1e6 / r["ops_s"]


def main():
    label_a, path_a, label_b, path_b = sys.argv[1:5]
    a_runs, b_runs = load(path_a), load(path_b)
    print(f"| workload | clients | {label_a} ops/s (median; every run) "
          f"| {label_b} ops/s (median; every run) | {label_b} / {label_a} "
          f"| p50 ms {label_a} → {label_b} "
          f"| client CPU µs/op {label_a} → {label_b} "
          f"| server CPU µs/op {label_a} → {label_b} |")
    print("|---|---:|---:|---:|---:|---|---|---|")
    for key in a_runs:
        a, b = a_runs[key], b_runs.get(key, [])
        if not b:
            continue
        med = lambda rs, f: statistics.median(f(r) for r in rs)
        ops = lambda r: r["ops_s"]
        runs = lambda rs: ", ".join(f"{r['ops_s']:,.0f}" for r in rs)
        ma, mb = med(a, ops), med(b, ops)
        p50 = lambda rs: med(rs, lambda r: r["p50_ms"])
        client = lambda rs: med(rs, lambda r: per_op_us(r, "client_cpu_pct"))
        server = lambda rs: med(rs, lambda r: per_op_us(r, "server_cpu_pct"))
        print(f"| {key[0]} | {key[1]} | {ma:,.0f} ({runs(a)}) | {mb:,.0f} ({runs(b)}) "
              f"| {mb / ma:.2f} | {p50(a):.2f} → {p50(b):.2f} "
              f"| {client(a):.1f} → {client(b):.1f} | {server(a):.1f} → {server(b):.1f} |")


if __name__ == "__main__":
    main()
