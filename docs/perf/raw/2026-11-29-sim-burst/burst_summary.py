#!/usr/bin/env python3
"""perf/sim_check.py with and without a burst on the links between hosts (BURST, chorus-sim --inter LAT,GBPS,BURST),
its other constants its defaults; counts predictions within 15% by family and size band, as ../2026-11-29-sim-cpu/
summary.py does. Usage: burst_summary.py CHORUS_SIM BURST OUT DIR...  (run from the repository root;
TREE_DUAL_MIN passes through to sim_check.py). Writes each run's two tables to OUT (the run's path with / as _, then
-burst0.md or -burstBURST.md) and prints the counts."""
import os, subprocess, sys
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "2026-11-29-sim-cpu"))
from summary import BANDS, tally  # noqa: E402


def main():
    sim, burst, outdir, dirs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    os.makedirs(outdir, exist_ok=True)
    labels = ("0", burst)
    counts = defaultdict(lambda: [0, 0, []])
    for label in labels:
        for d in dirs:
            out = subprocess.run(["perf/sim_check.py", d, sim], env=dict(os.environ, BURST=label), check=True,
                                 capture_output=True, text=True).stdout
            name = d.replace("docs/perf/raw/", "").strip("/").replace("/", "_")
            with open(os.path.join(outdir, f"{name}-burst{label}.md"), "w") as f:
                f.write(out)
            tally(out, label, counts)
    print(f"| family | sizes | no burst | burst of {burst} bytes |")
    print("|---|---|---|---|")
    total = {label: [0, 0] for label in labels}
    for fam in ("rings and hierarchical", "tree", "rail", "recursive doubling"):
        for b in BANDS:
            cells = []
            for label in labels:
                n, w, errs = counts[(label, fam, b)]
                total[label][0] += n; total[label][1] += w
                cells.append(f"{w} of {n} ({min(errs):+d}% to {max(errs):+d}%)" if n else "-")
            if cells != ["-", "-"]:
                print(f"| {fam} | {b} | {cells[0]} | {cells[1]} |")
    print(f"| all | all | {total[labels[0]][1]} of {total[labels[0]][0]} | {total[burst][1]} of {total[burst][0]} |")


if __name__ == "__main__":
    main()
