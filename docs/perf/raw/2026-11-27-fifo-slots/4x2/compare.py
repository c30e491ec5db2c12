import re,sys,glob,collections,os
d=collections.defaultdict(dict)
for f in sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'r*-*.log'))):
    tag=f.split('/')[-1][:-4]
    for l in open(f):
        c=[x.strip() for x in l.split('|')]
        if len(c)>9 and c[1] in('allreduce','allgather') and c[5].isdigit():
            d[(c[1],c[2],c[3],int(c[5]))][tag]=c[9]
tags=sorted({t for v in d.values() for t in v})
print('| collective | algorithm | placement | size | '+' | '.join(tags)+' |')
for k in sorted(d):
    print('| %s | %s | %s | %d MB | '%(k[0],k[1],k[2],k[3]>>20)+' | '.join(d[k].get(t,'-') for t in tags)+' |')
import statistics
print()
print('| collective | algorithm | placement | size | 8 slots (median of 3) | 16 slots (median of 3) |')
print('|---|---|---|---|---|---|')
up=down=0
for k in sorted(d):
    a=[int(d[k][t][:-1]) for t in tags if t.endswith('-8') and t in d[k]]
    b=[int(d[k][t][:-1]) for t in tags if t.endswith('-default') and t in d[k]]
    ma,mb=statistics.median(a),statistics.median(b)
    up+=mb>ma; down+=mb<ma
    print('| %s | %s | %s | %d MB | %d%% | %d%% |'%(k[0],k[1],k[2],k[3]>>20,ma,mb))
print('higher',up,'lower',down, file=sys.stderr)
