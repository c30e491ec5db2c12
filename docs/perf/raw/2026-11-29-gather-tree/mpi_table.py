#!/usr/bin/env python3
"""chorus over Socket against Open MPI with yielding, 4 hosts x 2 ranks, from perf/netns_net_bench.sh's tables.
Usage: mpi_table.py DIR   (DIR holds x42-N.txt, host by host, and c42-N.txt, round-robin)"""
import glob, re, statistics, sys

tab = {}
for f in sorted(glob.glob(sys.argv[1] + "/*42-*.txt")):
    place = "host" if "/x42" in f else "cyclic"
    for line in open(f):
        m = re.match(r"\| (all\w+) \| ([^|]+) \| (\d+) \| ([\d.]+) \|", line)
        if m and int(m.group(3)) > 0:
            lib = "chorus" if "chorus" in m.group(2) else "mpi"
            tab.setdefault((m.group(1), place, int(m.group(3))), {}).setdefault(lib, []).append(float(m.group(4)) * 1000)
print("| collective | placement | size (B) | chorus Socket (us) | Open MPI, yielding (us) | ratio of medians |")
print("|---|---|---|---|---|---|")
even = 0
for k in sorted(tab):
    c, m = tab[k]["chorus"], tab[k]["mpi"]
    r = statistics.median(c) / statistics.median(m)
    even += r <= 1.05
    print(f"| {k[0]} | {k[1]} | {k[2]} | {min(c):.0f}-{max(c):.0f} | {min(m):.0f}-{max(m):.0f} | {r:.2f}x |")
print(f"\nchorus's median within 5% of Open MPI's or below at {even} of {len(tab)} points")
