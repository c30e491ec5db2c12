#!/usr/bin/env python3
"""Fits chorus-sim's small-size constants to recorded runs of perf/netns_ring_bench.sh (4 hosts x 2 ranks): the
latency a step within a host and between hosts, and the host CPU term's cost a message within a host and between
hosts, with the namespace hosts' 2 cores shared by 4 hosts (0.5 a host).
Usage: fit_cpu.py CHORUS_SIM FIT_RUNS... -- CHECK_RUNS...   (run from the repository root)
Every forced algorithm's series (ring, hierarchical, rail, tree, recursive doubling; both placements) of at most
MAX_BYTES (default 524288) is predicted. The model's terms add up, and the latency term does not depend on the CPU
costs nor the CPU term on the latencies, so each grid is run on its own and the two are summed. Prints the best
quadruple by the share of the fit runs' series within 15%, its score on the check runs, the median error of each, and
the same for the old constants (20 and 60 us a step, no CPU term). BURST (default 0: none) is the inter-host links'
burst in bytes (chorus-sim --inter LAT,GBPS,BURST; docs/cost_model.md)."""
import itertools, json, os, statistics, subprocess, sys

MAX = int(os.environ.get("MAX_BYTES", "524288"))
CORES = os.environ.get("CORES", "0.5")
BURST = os.environ.get("BURST", "0")
TOOLS = (("all_reduce_perf", "allreduce"), ("all_gather_perf", "allgather"), ("reduce_scatter_perf", "reducescatter"))
ALGOS = (("1", "Ring"), ("1-Hierarchical", "Hierarchical"), ("1-Rail", "Rail"), ("1-Tree", "Tree"),
         ("1-RecDoubling", "RecDoubling"))
LAT_INTRA = (0, 1, 2, 3, 4, 6, 8, 10, 14, 20)
LAT_INTER = (0, 2, 4, 6, 8, 10, 12, 15, 18, 22, 26, 30, 40, 60)
CPU_INTRA = (0, 0.5, 1, 1.5, 2, 3, 4, 6)
CPU_INTER = (0, 0.5, 1, 1.5, 2, 3, 4, 6, 8, 10)


def goodput(run):
    d = json.load(open(os.path.join(run, "iperf3.json")))["end"]
    return min(d["sum_sent"]["bits_per_second"], d["sum_sent_bidir_reverse"]["bits_per_second"]) / 8


def rows(run):
    out = []
    g = goodput(run)
    for tool, coll in TOOLS:
        for place in ("host", "cyclic"):
            for suffix, algo in ALGOS:
                path = os.path.join(run, f"{tool}-{place}-{suffix}.json")
                if not os.path.exists(path):
                    continue
                for r in json.load(open(path))["results"]:
                    if 0 < r["size"] <= MAX:
                        out.append((coll, algo, r["size"], round(g, -5), r["out_of_place"]["time"]))
    return out


cache = {}


def sim(sim_path, coll, g, li, lx, ci, cx):
    """{(algo, size): us} for one collective and constants, sizes 8 B - MAX by factors of 2."""
    key = (coll, g, li, lx, ci, cx)
    if key not in cache:
        args = [sim_path, "--hosts", "4", "--ranks-per-host", "2", "--intra", f"{li},2", "--inter",
                f"{lx},{g / 1e9:.6f}" + (f",{BURST}" if BURST != "0" else ""), "--coll", coll, "-b", "8", "-e", str(MAX), "-f", "2"]
        if ci or cx:
            args += ["--cpu", f"{ci},{cx},{CORES}"]
        text = subprocess.run(args, check=True, capture_output=True, text=True).stdout
        table = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                f = line.split()
                mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(f[0][-1], 1)
                table[(f[1], int(f[0].rstrip("KMG")) * mult)] = float(f[2])
        cache[key] = table
    return cache[key]


def predict(sim_path, data, li, lx, ci, cx):
    out = []
    for coll, algo, size, g, t in data:
        lat = sim(sim_path, coll, g, li, lx, 0, 0)[(algo, size)]
        base = sim(sim_path, coll, g, 0, 0, 0, 0)[(algo, size)]
        cpu = sim(sim_path, coll, g, 0, 0, ci, cx)[(algo, size)] - base
        out.append((lat + cpu) / t - 1)
    return out


def score(errs):
    return sum(abs(e) <= 0.15 for e in errs)


def main():
    sim_path = sys.argv[1]
    cut = sys.argv.index("--")
    fit = [r for run in sys.argv[2:cut] for r in rows(run)]
    check = [r for run in sys.argv[cut + 1:] for r in rows(run)]
    best = None
    for li, lx, ci, cx in itertools.product(LAT_INTRA, LAT_INTER, CPU_INTRA, CPU_INTER):
        w = score(predict(sim_path, fit, li, lx, ci, cx))
        if best is None or w > best[0]:
            best = (w, li, lx, ci, cx)
    _, li, lx, ci, cx = best
    print(f"best: latency {li} us within a host, {lx} between; CPU {ci} us a message within, {cx} between, "
          f"{CORES} core(s) a host")
    for name, data in (("fit", fit), ("check", check)):
        if not data:
            continue
        errs = predict(sim_path, data, li, lx, ci, cx)
        old = predict(sim_path, data, 20, 60, 0, 0)
        print(f"{name}: {score(errs)} of {len(errs)} within 15% (median error {100 * statistics.median(errs):+.0f}%); "
              f"with 20 and 60 us and no CPU term: {score(old)} (median {100 * statistics.median(old):+.0f}%)")
        if os.environ.get("DETAIL"):
            for (coll, algo, size, g, t), e in sorted(zip(data, errs), key=lambda x: x[0][:3]):
                print(f"  {coll:13} {algo:13} {size:>7} {t:9.1f} us {100 * e:+5.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
