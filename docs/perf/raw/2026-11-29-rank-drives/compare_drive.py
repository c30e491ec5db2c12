# Drive on against off in one folder: python3 compare_drive.py now SETUP (or first-build SETUP, with before/ runs
# copied beside them): each size's times, and geometric means of the ratios at 8 B - 64 KB.
import sys,re,glob,collections,math,statistics
# usage: ab.py DIR SETUP  -> compare d65536 vs d0 runs
d=collections.defaultdict(list)
base=sys.argv[1]; setup=sys.argv[2]
for f in sorted(glob.glob(f"{base}/{setup}-d*-*.log")):
    m=re.search(r"-d(\w+?)-(\d+)\.log",f); dv=(m.group(1)!='0')
    for line in open(f):
        p=[x.strip() for x in line.strip().strip('|').split('|')]
        if len(p)>=4 and p[2].isdigit() and int(p[2])>0:
            lib=p[1].split(' (')[0].replace('chorus, NCCL_NET=','')
            if lib=='Open MPI': key=('MPI',)
            else: key=(lib, 'drive' if dv else 'off')
            d[(p[0],int(p[2]))+key].append(float(p[3])*1000)
sizes=sorted({(k[0],k[1]) for k in d})
print(f"| collective | size (B) | Socket, drive | Socket, proxy | UCX, drive | UCX, proxy | Open MPI |")
print("|---|---|---|---|---|---|---|")
def cell(v): return '-' if not v else ' / '.join('%.0f'%x for x in v)
gm=collections.defaultdict(list)
for c,s in sizes:
    row=[cell(d.get((c,s,lib,m),[])) for lib in ('Socket','UCX') for m in ('drive','off')]
    row.append(cell(d.get((c,s,'MPI'),[])))
    print(f"| {c} | {s} | "+" | ".join(row)+" |")
    if s<=65536:
        for lib in ('Socket','UCX'):
            a=d.get((c,s,lib,'drive'),[]); b=d.get((c,s,lib,'off'),[]); m=d.get((c,s,'MPI'),[])
            if a and b: gm[lib].append(math.log(statistics.mean(a)/statistics.mean(b)))
            if a and m: gm[lib+' vs MPI'].append(math.log(statistics.mean(a)/statistics.mean(m)))
            if b and m: gm[lib+' proxy vs MPI'].append(math.log(statistics.mean(b)/statistics.mean(m)))
for k,v in gm.items(): print(f"geomean {k} (<=64K, {len(v)} points): {math.exp(sum(v)/len(v)):.3f}")
