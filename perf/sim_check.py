#!/usr/bin/env python3
"""Sets chorus-sim's predictions beside what perf/netns_ring_bench.sh measured.

Usage: perf/sim_check.py BENCH_OUT_DIR CHORUS_SIM [INTRA (default 2,2)] [INTER_LATENCY_US (default 4)]

Reads the bench's perf-tool JSON and iperf3 goodput, runs chorus-sim for the same cluster (4 hosts x 2 ranks, one
NIC a host whose bandwidth is the measured goodput), collective, algorithm and size, and prints a Markdown table of
measured and predicted time and the error. For a bench run with RAILS=2 (two NICs a host), set RAILS=2 and CHANNELS
to the run's CHORUS_HOST_NCHANNELS: the model then has two NICs a host, each at the slower rail's goodput, with the
host path's channel c on NIC c mod 2 (chorus-sim --nic-per-channel). Rings and trees in rank order with round-robin placement are left out:
the model lays ranks host by host, as chorus's rings, trees and hierarchical schedules do whatever the placement.
FIFO (default 16,131072, the host path's across a net) is passed to chorus-sim --fifo: set it to the run's
CHORUS_FIFO_SLOTS,CHORUS_FIFO_SLOT_BYTES where the run changed them, or to 0 for the model without its pipeline term.
CPU (default 1,4,2,shared) is passed to chorus-sim --cpu, the host CPU term: the namespace hosts' 4 hosts on the
machine's 2 cores, which take every host's messages; 0 for none. The latencies and CPU costs are fitted to the runs of
docs/perf/raw/2026-11-29-sim-refit/ (docs/perf/sim.md, "A refit after the reads that found nothing", and "Shared
cores": 1,4,0.5 before, a host's own half core; 0.5,6,0.5 before that, fitted to docs/perf/raw/2026-11-29-sim-cpu/).
TREE_DUAL_MIN (default 16384) is passed to chorus-sim --tree-dual-min: 0 for runs made before trees below 16 KB ran
one tree. BURST (default 16384, a fresh TCP connection's first window; docs/perf/sim.md) is the inter-host links'
burst, the third field of chorus-sim --inter; 0 for none."""
import json
import os
import subprocess
import sys


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    out, sim = sys.argv[1], sys.argv[2]
    intra = sys.argv[3] if len(sys.argv) > 3 else "2,2"
    inter_lat = sys.argv[4] if len(sys.argv) > 4 else "4"
    rails = int(os.environ.get("RAILS", "1"))
    channels = os.environ.get("CHANNELS", "1")
    goodputs = []
    for name in ("iperf3.json", "iperf3-hy.json")[:rails]:
        d = json.load(open(os.path.join(out, name)))["end"]
        goodputs.append(min(d["sum_sent"]["bits_per_second"], d["sum_sent_bidir_reverse"]["bits_per_second"]) / 8)
    goodput = min(goodputs)
    burst = os.environ.get("BURST", "16384")
    inter = f"{inter_lat},{goodput / 1e9:.6f}" + (f",{burst}" if burst != "0" else "")
    nic_args = ["--nics", str(rails), "--channels", channels] + (["--nic-per-channel"] if rails > 1 else [])
    nic_args += ["--fifo", os.environ.get("FIFO", "16,131072")]
    nic_args += ["--tree-dual-min", os.environ.get("TREE_DUAL_MIN", "16384")]
    cpu = os.environ.get("CPU", "1,4,2,shared")
    if cpu != "0":
        nic_args += ["--cpu", cpu]
    print(f"chorus-sim --hosts 4 --ranks-per-host 2 {' '.join(nic_args)} --intra {intra} --inter {inter}\n")
    print("| collective | algorithm | placement | size (bytes) | measured (ms) | predicted (ms) | error |")
    print("|---|---|---|---|---|---|---|")
    errors = []
    for tool, coll in (("all_reduce_perf", "allreduce"), ("all_gather_perf", "allgather"),
                       ("reduce_scatter_perf", "reducescatter")):
        for place in ("host", "cyclic"):
            for suffix, algo, label in (("1", "ring", "ring"), ("1-Hierarchical", "hierarchical", "hierarchical"),
                                        ("1-Rail", "rail", "rail"), ("0", "ring", "ring, rank order"),
                                        ("1-Tree", "tree", "tree"),
                                        ("0-Tree", "tree", "tree, rank order"),
                                        ("1-RecDoubling", "recdoubling", "recursive doubling")):
                if suffix.startswith("0") and place == "cyclic":
                    continue
                path = os.path.join(out, f"{tool}-{place}-{suffix}.json")
                if not os.path.exists(path):
                    continue
                for row in json.load(open(path))["results"]:
                    size = row["size"]
                    if size == 0:  # nothing moves: no prediction to make
                        continue
                    measured = row["out_of_place"]["time"] / 1e3
                    text = subprocess.run(
                        [sim, "--hosts", "4", "--ranks-per-host", "2"] + nic_args + ["--intra", intra, "--inter",
                         inter, "--coll", coll, "--algo", algo, "-b", str(size), "-e", str(size)],
                        check=True, capture_output=True, text=True).stdout
                    rows = [l.split() for l in text.splitlines() if l and not l.startswith("#")]
                    predicted = float(rows[0][2]) / 1e3
                    err = (predicted - measured) / measured
                    errors.append((size, abs(err)))
                    print(f"| {coll} | {label} | {place} | {size} | {measured:.2f} | {predicted:.2f} | "
                          f"{100 * err:+.0f}% |")
    for lo, label in ((0, "all sizes"), (1 << 20, "1 MB and up")):
        sel = [e for s, e in errors if s >= lo]
        if sel:
            within = sum(1 for e in sel if e <= 0.15)
            print(f"\n{label}: {within} of {len(sel)} predictions within 15%, largest error {100 * max(sel):.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
