# The medians (and ranges) over rounds of the out-of-place allreduce time in us, by placement and library:
# python3 table.py DIR, DIR holding the rN-PLACE folders of perf/netns_net_bench.sh runs (README.md).
import json, sys, os, statistics as st
# medians over rounds of the out-of-place allreduce time, per placement and library, per size
base = sys.argv[1]
places = ["none", "0101", "0011", "0111"]
label = {"none": "the kernel's", "0101": "0 1 0 1", "0011": "0 0 1 1", "0111": "0 1 1 1"}
rows = {}
for d in sorted(os.listdir(base)):
    p = os.path.join(base, d)
    if not os.path.isdir(p): continue
    rnd, place = d.split("-", 1)
    for lib in ("Socket", "MPI"):
        f = os.path.join(p, f"{lib}-allreduce.json")
        if not os.path.exists(f): continue
        for r in json.load(open(f))["results"]:
            rows.setdefault((place, lib, r["size"]), []).append(r["out_of_place"]["time"])
sizes = sorted({k[2] for k in rows})
print("| CPUs of ranks 0-3 | library | " + " | ".join(f"{s} B" for s in sizes) + " |")
print("|---|---|" + "---|" * len(sizes))
for place in places:
    for lib in ("Socket", "MPI"):
        cells = []
        for s in sizes:
            v = rows.get((place, lib, s), [])
            cells.append(f"{st.median(v):.0f} ({min(v):.0f}-{max(v):.0f})" if v else "-")
        print(f"| {label[place]} | {'chorus' if lib=='Socket' else 'Open MPI'} | " + " | ".join(cells) + " |")
