#!/usr/bin/env python3
"""Out-of-place times (ms) of each algorithm, one value a run, from the runs' folders given as arguments (prefix:folder
pairs are not needed: each folder holds one round's JSON)."""
import json, os, sys
runs = sys.argv[1:]
names = (("-default", "tuner's choice"), ("", "ring"), ("-Tree", "tree"), ("-Hierarchical", "hierarchical"),
         ("-Rail", "rail"), ("-RecDoubling", "recursive doubling"))
sizes = None
rows = []
for tool, coll in (("all_reduce_perf", "allreduce"), ("all_gather_perf", "allgather"),
                   ("reduce_scatter_perf", "reduce-scatter")):
    for place in ("host", "cyclic"):
        for sfx, name in names:
            per = {}
            for run in runs:
                path = f"{run}/{tool}-{place}-1{sfx}.json"
                if not os.path.exists(path):
                    continue
                for r in json.load(open(path))["results"]:
                    per.setdefault(r["size"], []).append(r["out_of_place"]["time"] / 1e3)
            if per:
                sizes = sorted(per)
                rows.append((coll, place, name, per))
print("| collective | placement | algorithm | " + " | ".join(f"{s >> 10} KB" for s in sizes) + " |")
print("|---|---|---|" + "---|" * len(sizes))
for coll, place, name, per in rows:
    print(f"| {coll} | {place} | {name} | " + " | ".join(", ".join(f"{t:.2f}" for t in per.get(s, [])) for s in sizes) + " |")
