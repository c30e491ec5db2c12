#!/usr/bin/env python3
"""Runs perf/sim_check.py on bench outputs with the old small-size constants (20 us a step within a host, 60 between,
no host CPU term) and with its defaults (the fit of fit_cpu.py); counts predictions within 15% by family and size.
Usage: summary.py CHORUS_SIM OUT DIR...  (run from the repository root; TREE_DUAL_MIN passes through to sim_check.py)
Writes each run's two tables to OUT (the run's path with / as _, then -old.md or -fit.md) and prints the counts."""
import os, re, subprocess, sys
from collections import defaultdict

BANDS = ["< 256 KB", "256-512 KB", "1-4 MB", "8 MB and up"]


def band(size):
    if size < 256 << 10: return BANDS[0]
    if size < 1 << 20: return BANDS[1]
    if size < 8 << 20: return BANDS[2]
    return BANDS[3]


def family(algo):
    if algo.startswith("tree"): return "tree"
    if algo == "rail": return "rail"
    if algo == "recursive doubling": return "recursive doubling"
    return "rings and hierarchical"


def tally(out, label, counts):
    """Adds sim_check.py's table `out` to counts[(label, family, band)]: series, those within 15%, their errors."""
    for line in out.splitlines():
        m = re.match(r"\| (\w+) \| ([^|]+) \| (\w+) \| (\d+) \| [\d.]+ \| [\d.]+ \| ([+-]\d+)% \|", line)
        if not m: continue
        size, err = int(m.group(4)), int(m.group(5))
        c = counts[(label, family(m.group(2).strip()), band(size))]
        c[0] += 1; c[1] += abs(err) <= 15; c[2].append(err)


def main():
    sim, outdir, dirs = sys.argv[1], sys.argv[2], sys.argv[3:]
    os.makedirs(outdir, exist_ok=True)
    counts = defaultdict(lambda: [0, 0, []])
    # BURST=0: the model as fitted here (sim_check.py's default burst came later, ../2026-11-29-sim-burst/).
    for label, extra, env in (("old", ["20,2", "60"], {"CPU": "0", "BURST": "0"}), ("fit", [], {"BURST": "0"})):
        for d in dirs:
            out = subprocess.run(["perf/sim_check.py", d, sim] + extra, env=dict(os.environ, **env), check=True,
                                 capture_output=True, text=True).stdout
            name = d.replace("docs/perf/raw/", "").replace("/tmp/", "").strip("/").replace("/", "_")
            with open(os.path.join(outdir, f"{name}-{label}.md"), "w") as f:
                f.write(out)
            tally(out, label, counts)
    print("| family | sizes | 20 and 60 us a step, no CPU term | fitted: 2 and 4 us, CPU 0.5 and 6 us a message |")
    print("|---|---|---|---|")
    for fam in ("rings and hierarchical", "tree", "rail", "recursive doubling"):
        for b in BANDS:
            cells = []
            for label in ("old", "fit"):
                n, w, errs = counts[(label, fam, b)]
                cells.append(f"{w} of {n} ({min(errs):+d}% to {max(errs):+d}%)" if n else "-")
            if cells != ["-", "-"]:
                print(f"| {fam} | {b} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
