import json,glob,os,statistics
rows={}
for d in sorted(glob.glob("r*-per*")):
    if not os.path.isdir(d): continue
    for place in ("host","cyclic"):
        f=f"{d}/all_reduce_perf-{place}-1-Tree.json"
        if not os.path.exists(f): continue
        for r in json.load(open(f))["results"]:
            rows.setdefault((place,r["size"]),{}).setdefault(d.split("-")[1],[]).append(r["out_of_place"]["time"]/1e3)
print("| placement | size | per level 0 (ms) | 8 | 4 | median 8 / 0 | median 4 / 0 |")
print("|---|---|---|---|---|---|---|")
for k in sorted(rows, key=lambda k:(k[0]!="host",k[1])):
    v=rows[k]
    f=lambda p: ", ".join(f"{x:.2f}" for x in v.get(p,[]))
    m=lambda p: statistics.median(v[p])
    print(f"| {k[0]} | {k[1]>>10} KB | {f('per0')} | {f('per8')} | {f('per4')} | {m('per8')/m('per0'):.2f} | {m('per4')/m('per0'):.2f} |")
