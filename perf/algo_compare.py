#!/usr/bin/env python3
"""Compares forced algorithms over several runs of perf/netns_ring_bench.sh.

Usage: perf/algo_compare.py TOOL ALGO[,ALGO...] OUT_DIR [OUT_DIR...]

TOOL is a perf tool's name (all_reduce_perf); each ALGO a run's NCCL_ALGO as CONFIGS named it (ring, Tree,
RecDoubling...; ring means CHORUS_RING_BY_HOST=1 with NCCL_ALGO=ring). A series is one run's one placement. For each
size that every algorithm measured in a series, prints the range over the series of each algorithm's time (the mean
of its out-of-place and in-place times) and how many series each algorithm was the fastest in. A summary for
choosing thresholds across noisy runs, not a test.
"""
import collections
import json
import os
import sys


def main(argv):
    if len(argv) < 4:
        print(__doc__)
        return 2
    tool, algos, outs = argv[1], argv[2].split(","), argv[3:]
    times = collections.defaultdict(lambda: collections.defaultdict(list))  # size -> algo -> times (us)
    wins = collections.defaultdict(collections.Counter)
    series = collections.Counter()
    for out in outs:
        for place in ("host", "cyclic"):
            per = {}
            for algo in algos:
                suffix = "" if algo == "ring" else "-" + algo
                path = f"{out}/{tool}-{place}-1{suffix}.json"
                if not os.path.exists(path):
                    continue
                per[algo] = {r["size"]: (r["out_of_place"]["time"] + r["in_place"]["time"]) / 2
                             for r in json.load(open(path))["results"]}
            if len(per) != len(algos):
                continue
            for size in set.intersection(*(set(t) for t in per.values())):
                if size == 0:
                    continue
                series[size] += 1
                wins[size][min(per, key=lambda a: per[a][size])] += 1
                for a in algos:
                    times[size][a].append(per[a][size])
    print("| size | series | " + " | ".join(f"{a} (ms)" for a in algos) + " | fastest, series |")
    print("|---|---|" + "---|" * len(algos) + "---|")
    for size in sorted(times):
        name = f"{size} B" if size < 1024 else f"{size // 1024} KB" if size < 1 << 20 else f"{size >> 20} MB"
        cells = [f"{min(times[size][a]) / 1e3:.2f}-{max(times[size][a]) / 1e3:.2f}" for a in algos]
        best = ", ".join(f"{a} {wins[size][a]}" for a in algos if wins[size][a])
        print(f"| {name} | {series[size]} | " + " | ".join(cells) + f" | {best} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
