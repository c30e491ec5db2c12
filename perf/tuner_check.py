#!/usr/bin/env python3
"""Whether the tuner picked the fastest algorithm, from what perf/netns_ring_bench.sh measured.

Usage: perf/tuner_check.py BENCH_OUT_DIR [BENCH_OUT_DIR...] [--tolerance T (default 0.05)]

For each collective, placement and size, two comparisons with the fastest forced algorithm of the same runs (rings
host by host, hierarchical, rail for allgather and reduce-scatter, trees for allreduce, recursive doubling):
- the run: the tuner's run (the bench's NCCL_ALGO-unset run) counts as the best when its time is within TOLERANCE
  of the fastest forced run's. Two runs of one algorithm differ by more than that at small sizes on the 2-core VM,
  so this also counts noise;
- the choice: where the bench ran with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING, rank 0's log of the tuner's run
  names the algorithm it picked for each size (the planner's "tuner: ..." line); the choice counts as the best when
  that algorithm's forced time is within TOLERANCE of the fastest forced time. This compares choices, not runs.
Given several runs of the bench with the same settings, each time is the median over the runs, which keeps one slow
repetition from deciding. Prints a Markdown table and the share of sizes where the run and the choice were the
best."""
import json
import os
import re
import statistics
import sys


def times(outs, name):
    """Per size, the median out-of-place time over the runs that have the file."""
    per = {}
    for out in outs:
        path = f"{out}/{name}"
        if not os.path.exists(path):
            continue
        for row in json.load(open(path))["results"]:
            per.setdefault(row["size"], []).append(row["out_of_place"]["time"])
    return {size: statistics.median(ts) for size, ts in per.items()}


# The planner's log line (src/engine/plan.cc) and the forced runs' names for its algorithms.
CHOICE = re.compile(r"tuner: (\w+) of (\d+) bytes a rank on (\d+) ranks: (\w+),")
FORCED = {"Ring": "ring", "Hierarchical": "hierarchical", "Rail": "rail", "Tree": "tree",
          "RecDoubling": "recursive doubling"}


def choices(outs, name):
    """Per size (as the perf tools count it), the algorithm the tuner picked, from rank 0's log of each run (the first
    line for that size: the out-of-place call); a size whose runs disagree maps to None."""
    per = {}
    for out in outs:
        path = f"{out}/{name}"
        if not os.path.exists(path):
            continue
        seen = {}
        for line in open(path, errors="replace"):
            m = CHOICE.search(line)
            if not m:
                continue
            coll, nbytes, nranks, algo = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
            size = nbytes * (nranks if coll in ("AllGather", "ReduceScatter") else 1)
            seen.setdefault(size, algo)
        for size, algo in seen.items():
            per.setdefault(size, set()).add(algo)
    return {size: (algos.pop() if len(algos) == 1 else None) for size, algos in per.items()}


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    args = sys.argv[1:]
    tol = 0.05
    if "--tolerance" in args:
        i = args.index("--tolerance")
        tol = float(args[i + 1])
        del args[i:i + 2]
    outs = args
    print("| collective | placement | size (bytes) | tuner's run (ms) | fastest forced | fastest (ms) | run best? | "
          "tuner's choice | its forced time (ms) | choice best? |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    hits = total = picks = picked = 0
    for tool, coll in (("all_reduce_perf", "allreduce"), ("all_gather_perf", "allgather"),
                       ("reduce_scatter_perf", "reduce-scatter")):
        for place in ("host", "cyclic"):
            chosen = times(outs, f"{tool}-{place}-1-default.json")
            algos = choices(outs, f"{tool}-{place}-1-default.0.log")
            forced = {name: times(outs, f"{tool}-{place}-1{suffix}.json")
                      for name, suffix in (("ring", ""), ("hierarchical", "-Hierarchical"), ("rail", "-Rail"),
                                           ("tree", "-Tree"),
                                           ("recursive doubling", "-RecDoubling"))}
            for size, t in sorted(chosen.items()):
                cands = [(f[size], name) for name, f in forced.items() if size in f]
                if not cands or size == 0:
                    continue
                best_t, best = min(cands)
                ok = t <= best_t * (1 + tol)
                hits += ok
                total += 1
                algo = algos.get(size)
                mine = forced.get(FORCED.get(algo, ""), {}).get(size)
                if mine is not None:
                    good = mine <= best_t * (1 + tol)
                    picks += 1
                    picked += good
                    choice = f"{FORCED[algo]} | {mine / 1e3:.2f} | {'yes' if good else 'no'}"
                else:
                    choice = f"{algo or 'not logged'} | - | -"
                print(f"| {coll} | {place} | {size} | {t / 1e3:.2f} | {best} | {best_t / 1e3:.2f} | "
                      f"{'yes' if ok else 'no'} | {choice} |")
    runs = f" (medians of {len(outs)} runs)" if len(outs) > 1 else ""
    if total:
        print(f"\nThe tuner's run was within {100 * tol:.0f}% of the fastest forced run at {hits} of {total} sizes "
              f"({100 * hits / total:.0f}%){runs}.")
    if picks:
        print(f"The tuner's choice was an algorithm whose forced run was within {100 * tol:.0f}% of the fastest at "
              f"{picked} of {picks} sizes ({100 * picked / picks:.0f}%){runs}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
