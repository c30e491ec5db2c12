#!/usr/bin/env python3
"""chorus-sim's host CPU term over the busiest host's cores against every host's messages over the machine's shared
cores (docs/perf/sim.md, "Shared cores"), on runs of perf/netns_ring_bench.sh (4 hosts x 2 ranks).
Usage: check.py CHORUS_SIM RUN...   (run from the repository root)
For each way, the share of series within 15% of the measured time: every forced algorithm's series of at most 512 KB
by family and size band, and the tuner's own runs (the algorithm each size ran, from rank 0's TUNING log)."""
import json, os, re, statistics, subprocess, sys
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "2026-11-29-sim-cpu"))
import fit_cpu  # rows(), goodput()

WAYS = (("the busiest host's cores (before): --intra 2,2 --inter 4 --cpu 1,4,0.5", "2,2", "4", "1,4,0.5"),
        ("the machine's shared cores (now): --intra 2,2 --inter 4 --cpu 1,4,2,shared", "2,2", "4", "1,4,2,shared"),
        ("the same with the fit's 1 us a step within a host: --intra 1,2", "1,2", "4", "1,4,2,shared"))
cache = {}


def sim(sim_path, coll, g, intra, lat, cpu):
    key = (coll, g, intra, lat, cpu)
    if key not in cache:
        args = [sim_path, "--hosts", "4", "--ranks-per-host", "2", "--intra", intra, "--inter",
                f"{lat},{g / 1e9:.6f},16384", "--cpu", cpu, "--coll", coll, "--algo", "all", "-b", "8", "-e", "524288",
                "-f", "2"]
        table = {}
        for line in subprocess.run(args, check=True, capture_output=True, text=True).stdout.splitlines():
            if line and not line.startswith("#"):
                f = line.split()
                table[(f[1], int(f[0].rstrip("KM")) * {"K": 1 << 10, "M": 1 << 20}.get(f[0][-1], 1))] = float(f[2])
        cache[key] = table
    return cache[key]


def tuned_rows(run):
    """The tuner's own runs: (coll, algorithm it ran, size, goodput, us)."""
    out, g = [], round(fit_cpu.goodput(run), -5)
    for tool, coll in (("all_reduce_perf", "allreduce"), ("all_gather_perf", "allgather")):
        for place in ("host", "cyclic"):
            base = os.path.join(run, f"{tool}-{place}-1-default")
            ran = {}
            for line in open(base + ".0.log"):
                m = re.search(r"tuner: (AllReduce|AllGather) of (\d+) bytes a rank on 8 ranks: (\w+)", line)
                if m:
                    size = int(m.group(2)) * (8 if m.group(1) == "AllGather" else 1)
                    ran[size] = "tree-allreduce" if "as a tree allreduce" in line else m.group(3)
            for r in json.load(open(base + ".json"))["results"]:
                if 0 < r["size"] <= 524288 and r["size"] in ran:
                    out.append((coll, ran[r["size"]], r["size"], g, r["out_of_place"]["time"]))
    return out


def band(size):
    return "8-512 B" if size <= 512 else "1-32 KB" if size <= 32768 else "128-512 KB"


def main():
    sim_path, runs = sys.argv[1], sys.argv[2:]
    forced = [x for r in runs for x in fit_cpu.rows(r)]
    tuned = [x for r in runs for x in tuned_rows(r)]
    for name, intra, lat, cpu in WAYS:
        def err(row):
            return sim(sim_path, row[0], row[3], intra, lat, cpu)[(row[1], row[2])] / row[4] - 1
        fam = defaultdict(list)
        for r in forced:
            fam[(r[1], band(r[2]))].append(err(r))
        te = [err(r) for r in tuned]
        within = sum(abs(e) <= 0.15 for v in fam.values() for e in v)
        print(f"{name}\n  forced series: {within} of {len(forced)} within 15%; the tuner's runs: "
              f"{sum(abs(e) <= 0.15 for e in te)} of {len(te)} (median error {100 * statistics.median(te):+.0f}%)")
        for k in sorted(fam):
            e = fam[k]
            print(f"  {k[0]:13} {k[1]:11} {sum(abs(x) <= 0.15 for x in e):3} of {len(e):3} "
                  f"(median error {100 * statistics.median(e):+.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
