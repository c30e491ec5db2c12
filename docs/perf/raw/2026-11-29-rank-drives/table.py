# The section's tables: python3 table.py SETUP (h2, h4 or x42), run in this folder. "before": before/SETUP-d0-*;
# "now": now/SETUP-ddef-*; Open MPI: every run of both.
import sys,re,glob,collections,statistics
def load(base, setup, pat):
    d=collections.defaultdict(list)
    for f in sorted(glob.glob(f"{base}/{setup}-{pat}-*.log")):
        for line in open(f):
            p=[x.strip() for x in line.strip().strip('|').split('|')]
            if len(p)>=4 and p[2].isdigit() and int(p[2])>0:
                lib=p[1].split(' (')[0].replace('chorus, NCCL_NET=','')
                d[(p[0],int(p[2]),lib)].append(float(p[3])*1000)
    return d
setup=sys.argv[1]
before=load('before',setup,'d0'); after=load('now',setup,'ddef'); mpi=load('now',setup,'d*')
for k,v in load('before',setup,'d*').items():
    if k[2]=='Open MPI': mpi[k]+=v
def c(v): return '-' if not v else '%.0f'%statistics.median(v)
def rng(v): return '-' if not v else ('%.0f-%.0f'%(min(v),max(v)) if len(v)>1 else '%.0f'%v[0])
print("| collective | size (B) | Socket before | Socket now | UCX before | UCX now | Open MPI |")
print("|---|---|---|---|---|---|---|")
win=collections.Counter(); tot=0
for (coll,size) in sorted({(k[0],k[1]) for k in after}):
    if size>65536: continue
    m=mpi[(coll,size,'Open MPI')]
    row=[rng(before[(coll,size,'Socket')]),rng(after[(coll,size,'Socket')]),rng(before[(coll,size,'UCX')]),rng(after[(coll,size,'UCX')]),rng(m)]
    print(f"| {coll} | {size} | "+" | ".join(row)+" |")
    tot+=1
    mm=statistics.median(m)
    for lib in ('Socket','UCX'):
        for when,dd in (('before',before),('now',after)):
            if statistics.median(dd[(coll,size,lib)])<=mm*1.05: win[(lib,when)]+=1
print(f"\npoints within 5% of Open MPI's median or faster (of {tot}):", dict(win))
print("which:")
for (coll,size) in sorted({(k[0],k[1]) for k in after}):
    if size>65536: continue
    mm=statistics.median(mpi[(coll,size,'Open MPI')])
    print(coll,size,['%s:%s'%(lib,'Y' if statistics.median(after[(coll,size,lib)])<=mm*1.05 else 'n') for lib in ('Socket','UCX')], 'mpi med %.0f'%mm, 'sock med %.0f'%statistics.median(after[(coll,size,'Socket')]))
