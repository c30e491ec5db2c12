#!/usr/bin/env python3
"""Allgather at 4 KB - 512 KB over 4 namespace hosts x 2 ranks, recursive doubling, rail and hierarchical forced,
both placements: the out-of-place times (us) of the three runs of each set, sorted, and their medians.
Usage: table.py [DIR]   (DIR: this folder, with b1..b3/, 4-64 KB, and c1..c3/, 64-512 KB)"""
import json, os, statistics, sys

d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
algos = ("RecDoubling", "Rail", "Hierarchical")
print("| placement | size (B) | " + " | ".join(f"{a} (us)" for a in algos) + " | fastest (median) |")
print("|---|---|" + "---|" * len(algos) + "---|")
for place in ("host", "cyclic"):
  for run in ("b", "c"):
    t = {a: {} for a in algos}
    for a in algos:
        for i in (1, 2, 3):
            for r in json.load(open(os.path.join(d, f"{run}{i}", f"all_gather_perf-{place}-1-{a}.json")))["results"]:
                t[a].setdefault(r["size"], []).append(r["out_of_place"]["time"])
    for size in sorted(t[algos[0]]):
        med = {a: statistics.median(t[a][size]) for a in algos}
        cells = [f"{med[a]:.0f} ({', '.join(f'{x:.0f}' for x in sorted(t[a][size]))})" for a in algos]
        print(f"| {place} | {size} ({run}) | " + " | ".join(cells) + f" | {min(med, key=med.get)} |")
