#!/usr/bin/env python3
"""Whether the tuner picked the fastest algorithm, from what perf/netns_ring_bench.sh measured.

Usage: perf/tuner_check.py BENCH_OUT_DIR [BENCH_OUT_DIR...] [--tolerance T (default 0.05)]

For each collective, placement and size, compares the tuner's choice (the bench's NCCL_ALGO-unset run) with the
fastest forced algorithm of the same run (rings host by host, hierarchical, rail for allgather and
reduce-scatter, and trees for allreduce); the choice
counts as the best when its time is within TOLERANCE of the fastest (two runs of one algorithm differ by a few
percent on the 2-core VM). Given several runs of the bench with the same settings, each time is the median over
the runs, which keeps one slow repetition from deciding. Prints a Markdown table and the share of sizes where the
choice was the best."""
import json
import os
import statistics
import sys


def times(outs, name):
    """Per size, the median out-of-place time over the runs that have the file."""
    per = {}
    for out in outs:
        path = f"{out}/{name}"
        if not os.path.exists(path):
            continue
        for row in json.load(open(path))["results"]:
            per.setdefault(row["size"], []).append(row["out_of_place"]["time"])
    return {size: statistics.median(ts) for size, ts in per.items()}


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    args = sys.argv[1:]
    tol = 0.05
    if "--tolerance" in args:
        i = args.index("--tolerance")
        tol = float(args[i + 1])
        del args[i:i + 2]
    outs = args
    print("| collective | placement | size (bytes) | tuner's choice (ms) | fastest forced | fastest (ms) | best? |")
    print("|---|---|---|---|---|---|---|")
    hits = total = 0
    for tool, coll in (("all_reduce_perf", "allreduce"), ("all_gather_perf", "allgather"),
                       ("reduce_scatter_perf", "reduce-scatter")):
        for place in ("host", "cyclic"):
            chosen = times(outs, f"{tool}-{place}-1-default.json")
            forced = {name: times(outs, f"{tool}-{place}-1{suffix}.json")
                      for name, suffix in (("ring", ""), ("hierarchical", "-Hierarchical"), ("rail", "-Rail"),
                                           ("tree", "-Tree"),
                                           ("recursive doubling", "-RecDoubling"))}
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
        runs = f" (medians of {len(outs)} runs)" if len(outs) > 1 else ""
        print(f"\nThe tuner's choice was within {100 * tol:.0f}% of the fastest at {hits} of {total} sizes "
              f"({100 * hits / total:.0f}%){runs}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
