#!/usr/bin/env python3
"""The tree allreduce's out-of-place time (us) by placement and size, for each CHORUS_TREE_DUAL_MIN_BYTES setting.
Usage: tree_channels.py DIR   (DIR holds runs rN-SETTING of perf/netns_ring_bench.sh with CONFIGS="Tree:1"; a setting
of 0 runs two trees at every size, 1073741824 one tree at every size here)"""
import glob, json, sys

tab = {}
for run in sorted(glob.glob(sys.argv[1] + "/r*-*/")):
    setting = run.rstrip("/").split("-")[-1]
    for place in ("host", "cyclic"):
        for f in glob.glob(f"{run}/all_reduce_perf-{place}-1-Tree.json"):
            for row in json.load(open(f))["results"]:
                tab.setdefault((place, row["size"]), {}).setdefault(setting, []).append(round(row["out_of_place"]["time"]))
print("| placement | size (B) | two trees (us) | one tree (us) |")
print("|---|---|---|---|")
for (place, size), v in sorted(tab.items()):
    print(f"| {place} | {size} | {', '.join(map(str, v.get('0', [])))} | {', '.join(map(str, v.get('1073741824', [])))} |")
