#!/usr/bin/env python3
"""Whether chorus-sim's cheapest algorithm is the fastest measured, on runs of perf/netns_ring_bench.sh (4 hosts x 2
ranks) that forced each algorithm: for each collective, placement and size, the model's pick among the algorithms the
runs measured, and whether its forced time (median over the runs) is within 5% of the fastest's.
Usage: model_choice.py CHORUS_SIM RUN...   (SIMARGS: chorus-sim's link arguments, default the netns-1g fit with the
runs' goodput rounded: --intra 2,2 --inter 4,0.1163 --cpu 0.5,6,0.5)"""
import json, os, statistics, subprocess, sys

ALG = {"1": "Ring", "1-Hierarchical": "Hierarchical", "1-Rail": "Rail", "1-Tree": "Tree", "1-RecDoubling": "RecDoubling"}


def main():
    sim, runs = sys.argv[1], sys.argv[2:]
    args = os.environ.get("SIMARGS", "--intra 2,2 --inter 4,0.1163 --cpu 0.5,6,0.5").split()
    total = good = 0
    for tool, coll in (("all_reduce_perf", "allreduce"), ("all_gather_perf", "allgather")):
        out = subprocess.run([sim, "--hosts", "4", "--ranks-per-host", "2", "--coll", coll, "-b", "8", "-e", "512K",
                              "-f", "2"] + args, capture_output=True, text=True, check=True).stdout
        pred = {}
        for line in out.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            f = line.split()
            mult = {"K": 1 << 10, "M": 1 << 20}.get(f[0][-1], 1)
            pred[(f[1], int(f[0].rstrip("KM")) * mult)] = float(f[2])
        for place in ("host", "cyclic"):
            meas = {}
            for suffix, algo in ALG.items():
                per = {}
                for r in runs:
                    path = f"{r}/{tool}-{place}-{suffix}.json"
                    if not os.path.exists(path):
                        continue
                    for row in json.load(open(path))["results"]:
                        if row["size"] > 0:
                            per.setdefault(row["size"], []).append(row["out_of_place"]["time"])
                for size, ts in per.items():
                    meas.setdefault(size, {})[algo] = statistics.median(ts)
            for size in sorted(meas):
                m = meas[size]
                best = min(m, key=m.get)
                pick = min(m, key=lambda a: pred.get((a, size), float("inf")))
                ok = m[pick] <= m[best] * 1.05
                total += 1
                good += ok
                print(f"{coll} {place} {size}: model {pick} {m[pick]:.0f} us, fastest {best} {m[best]:.0f} us"
                      f"{'' if ok else '  MISS'}")
    print(f"the model's choice within 5% of the fastest at {good} of {total}")


if __name__ == "__main__":
    main()
