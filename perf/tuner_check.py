#!/usr/bin/env python3
"""Whether the tuner picked the fastest algorithm, from what perf/netns_ring_bench.sh measured.

Usage: perf/tuner_check.py BENCH_OUT_DIR [TOLERANCE (default 0.05)]

For each collective, placement and size, compares the tuner's choice (the bench's NCCL_ALGO-unset run) with the
fastest forced algorithm of the same run (rings host by host, hierarchical, and trees for allreduce); the choice
counts as the best when its time is within TOLERANCE of the fastest (two runs of one algorithm differ by a few
percent on the 2-core VM). Prints a Markdown table and the share of sizes where the choice was the best."""
import json
import os
import sys


def times(path):
    if not os.path.exists(path):
        return {}
    return {row["size"]: row["out_of_place"]["time"] for row in json.load(open(path))["results"]}


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    out = sys.argv[1]
    tol = float(sys.argv[2]) if len(sys.argv) > 2 else 0.05
    print("| collective | placement | size (bytes) | tuner's choice (ms) | fastest forced | fastest (ms) | best? |")
    print("|---|---|---|---|---|---|---|")
    hits = total = 0
    for tool, coll in (("all_reduce_perf", "allreduce"), ("all_gather_perf", "allgather"),
                       ("reduce_scatter_perf", "reduce-scatter")):
        for place in ("host", "cyclic"):
            chosen = times(f"{out}/{tool}-{place}-1-default.json")
            forced = {name: times(f"{out}/{tool}-{place}-1{suffix}.json")
                      for name, suffix in (("ring", ""), ("hierarchical", "-Hierarchical"), ("tree", "-Tree"))}
            for size, t in sorted(chosen.items()):
                cands = [(f[size], name) for name, f in forced.items() if size in f]
                if not cands:
                    continue
                best_t, best = min(cands)
                ok = t <= best_t * (1 + tol)
                hits += ok
                total += 1
                print(f"| {coll} | {place} | {size} | {t / 1e3:.2f} | {best} | {best_t / 1e3:.2f} | "
                      f"{'yes' if ok else 'no'} |")
    if total:
        print(f"\nThe tuner's choice was within {100 * tol:.0f}% of the fastest at {hits} of {total} sizes "
              f"({100 * hits / total:.0f}%).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
