# Medians (and ranges) over rounds of the out-of-place time in us, from the tables perf/netns_net_bench.sh printed:
#   python3 table.py DIR [TOOLS]
# DIR holds rN-SET-TOOL.txt files (README.md); TOOLS, comma-separated, the columns (default base,new[,mpi] as found
# for the set).
# Ratios: new/base, and new/mpi where Open MPI ran.
import collections, glob, os, re, statistics as st, sys

d = collections.defaultdict(list)
for f in glob.glob(os.path.join(sys.argv[1], "r*-*.txt")):
    m = re.match(r"r(\d+)-(\w+)-(\w+)\.txt$", os.path.basename(f))
    if not m:
        continue
    group, tool = m.group(2), m.group(3)
    for line in open(f):
        if not line.startswith("| all"):
            continue
        c = [x.strip() for x in line.split("|")[1:-1]]
        if c[2] == "0":
            continue
        d[(group, c[0], int(c[2]), tool)].append(float(c[3]) * 1000)
for group in sorted({k[0] for k in d}):
    found = {k[3] for k in d if k[0] == group}
    tools = sys.argv[2].split(",") if len(sys.argv) > 2 else [t for t in ("base", "new", "mpi") if t in found]
    print(f"\n{group}\n")
    ratios = [f"new/{t}" for t in ("base", "mpi") if "new" in tools and t in tools]
    print("| collective | size (B) | " + " | ".join(tools + ratios) + " |")
    print("|---|---|" + "---|" * (len(tools) + len(ratios)))
    for key in sorted({k[1:3] for k in d if k[0] == group}):
        v = {t: d[(group,) + key + (t,)] for t in tools}
        med = {t: st.median(x) for t, x in v.items() if x}
        cells = [f"{st.median(x):.0f} ({min(x):.0f}-{max(x):.0f})" if x else "-" for x in v.values()]
        cells += [f"{med['new'] / med[r.split('/')[1]]:.2f}" for r in ratios]
        print(f"| {key[0]} | {key[1]} | " + " | ".join(cells) + " |")
