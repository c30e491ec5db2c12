#!/usr/bin/env python3
"""Out-of-place time (us) by placement and size, the algorithm before (CHORUS_ALLGATHER_TREE_MAX_BYTES or
CHORUS_REDUCESCATTER_TREE_MAX_BYTES = 0) against the tree allreduce (= 65536), from runs rN-SETTING of
perf/netns_ring_bench.sh with CONFIGS="default:1". Usage: gather_table.py DIR [TOOL (all_gather_perf)]"""
import glob, json, sys

tool = sys.argv[2] if len(sys.argv) > 2 else "all_gather_perf"
tab = {}
for run in sorted(glob.glob(sys.argv[1] + "/r*-*/")):
    setting = run.rstrip("/").split("-")[-1]
    for place in ("host", "cyclic"):
        for row in json.load(open(f"{run}{tool}-{place}-1-default.json"))["results"]:
            if row["size"] > 0:
                tab.setdefault((place, row["size"]), {}).setdefault(setting, []).append(round(row["out_of_place"]["time"]))
print("| placement | size (B) | before (us) | tree allreduce (us) |")
print("|---|---|---|---|")
for (place, size), v in sorted(tab.items()):
    print(f"| {place} | {size} | {', '.join(map(str, v.get('0', [])))} | {', '.join(map(str, v.get('65536', [])))} |")
