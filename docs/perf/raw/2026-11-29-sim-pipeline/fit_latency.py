#!/usr/bin/env python3
"""Fits chorus-sim's two latencies a step (within a host, between hosts) to the small sizes of recorded runs.
Usage: fit_latency.py CHORUS_SIM FIT_RUNS... -- CHECK_RUNS...   (run from the repository root)
For every pair on a grid, predicts each (collective, algorithm, size) of at most MAX_BYTES (default 8192) that the
runs measured, and scores the pair by the share of the fit runs' series within 15%; prints the best pair's score on
the fit runs and on the check runs."""
import json, os, subprocess, sys

MAX = int(os.environ.get("MAX_BYTES", "8192"))
TOOLS = (("all_reduce_perf", "allreduce"), ("all_gather_perf", "allgather"), ("reduce_scatter_perf", "reducescatter"))
ALGOS = (("1", "ring"), ("1-Hierarchical", "hierarchical"), ("1-Rail", "rail"), ("1-Tree", "tree"))

def rows(run):
    out = []
    d = json.load(open(os.path.join(run, "iperf3.json")))["end"]
    goodput = min(d["sum_sent"]["bits_per_second"], d["sum_sent_bidir_reverse"]["bits_per_second"]) / 8
    for tool, coll in TOOLS:
        for place in ("host", "cyclic"):
            for suffix, algo in ALGOS:
                path = os.path.join(run, f"{tool}-{place}-{suffix}.json")
                if not os.path.exists(path): continue
                for r in json.load(open(path))["results"]:
                    if 0 < r["size"] <= MAX:
                        out.append((coll, algo, r["size"], goodput, r["out_of_place"]["time"]))
    return out

cache = {}
def predict(sim, coll, algo, size, goodput, ls, li):
    key = (coll, algo, size, round(goodput, -5), ls, li)
    if key not in cache:
        text = subprocess.run([sim, "--hosts", "4", "--ranks-per-host", "2", "--intra", f"{ls},2", "--inter",
                               f"{li},{goodput / 1e9:.6f}", "--coll", coll, "--algo", algo, "-b", str(size), "-e",
                               str(size)], check=True, capture_output=True, text=True).stdout
        cache[key] = float([l.split() for l in text.splitlines() if l and not l.startswith("#")][0][2])
    return cache[key]

def score(sim, data, ls, li):
    errs = [predict(sim, c, a, s, g, ls, li) / t - 1 for c, a, s, g, t in data]
    return sum(abs(e) <= 0.15 for e in errs), len(errs), errs

def main():
    sim = sys.argv[1]
    cut = sys.argv.index("--")
    fit = [r for run in sys.argv[2:cut] for r in rows(run)]
    check = [r for run in sys.argv[cut + 1:] for r in rows(run)]
    best = None
    for ls in (1, 2, 3, 4, 6, 8, 10, 14, 20):
        for li in (4, 6, 8, 10, 12, 15, 18, 22, 26, 30, 40, 60):
            w, n, _ = score(sim, fit, ls, li)
            if best is None or w > best[0]: best = (w, ls, li)
    w, ls, li = best
    for name, data in (("fit", fit), ("check", check)):
        w, n, errs = score(sim, data, ls, li)
        w0, n0, errs0 = score(sim, data, 20, 60)
        errs.sort(); errs0.sort()
        print(f"{name}: intra {ls} us, inter {li} us: {w} of {n} within 15% (median error {100 * errs[len(errs) // 2]:+.0f}%); "
              f"with 20 and 60 us: {w0} of {n0} (median {100 * errs0[len(errs0) // 2]:+.0f}%)")
    return 0

if __name__ == "__main__":
    sys.exit(main())
