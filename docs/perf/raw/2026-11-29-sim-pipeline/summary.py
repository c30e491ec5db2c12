#!/usr/bin/env python3
"""Runs perf/sim_check.py on bench outputs with and without the pipeline term; counts predictions within 15%.
Usage: summary.py CHORUS_SIM OUT DIR...  (run from the repository root)
Writes each run's two tables to OUT (the run's path with / as _, then -nofifo.md or -fifo.md) and prints the counts."""
import os, re, subprocess, sys
from collections import defaultdict

def bands(size):
    if size < 256 << 10: return "< 256 KB"
    if size < 1 << 20: return "256-512 KB"
    if size < 8 << 20: return "1-4 MB"
    return "8 MB and up"

def main():
    sim, outdir, dirs = sys.argv[1], sys.argv[2], sys.argv[3:]
    os.makedirs(outdir, exist_ok=True)
    counts = defaultdict(lambda: [0, 0, []])
    for fifo in ("0", "16,131072"):
        for d in dirs:
            env = dict(os.environ, FIFO=fifo)
            out = subprocess.run(["perf/sim_check.py", d, sim], env=env, check=True, capture_output=True,
                                 text=True).stdout
            name = d.replace("docs/perf/raw/", "").strip("/").replace("/", "_")
            with open(os.path.join(outdir, name + ("-fifo.md" if fifo != "0" else "-nofifo.md")), "w") as f:
                f.write(out)
            for line in out.splitlines():
                m = re.match(r"\| (\w+) \| ([^|]+) \| (\w+) \| (\d+) \| [\d.]+ \| [\d.]+ \| ([+-]\d+)% \|", line)
                if not m: continue
                coll, algo, place, size, err = m.group(1), m.group(2).strip(), m.group(3), int(m.group(4)), int(m.group(5))
                fam = "tree" if algo.startswith("tree") else ("rail" if algo == "rail" else "rings and hierarchical")
                c = counts[(fifo, fam, bands(size))]
                c[0] += 1; c[1] += abs(err) <= 15; c[2].append(err)
    print("| family | sizes | without the pipeline term | with it |")
    print("|---|---|---|---|")
    keys = sorted({(f, b) for (_, f, b) in counts}, key=lambda k: (k[0], ["< 256 KB", "256-512 KB", "1-4 MB", "8 MB and up"].index(k[1])))
    for fam, band in keys:
        cells = []
        for fifo in ("0", "16,131072"):
            n, w, errs = counts[(fifo, fam, band)]
            cells.append(f"{w} of {n} ({min(errs):+d}% to {max(errs):+d}%)" if n else "-")
        print(f"| {fam} | {band} | {cells[0]} | {cells[1]} |")

if __name__ == "__main__":
    main()
