import re,sys,statistics as st,collections
d=collections.defaultdict(list)
for f in sys.argv[1:]:
    for line in open(f):
        c=[x.strip() for x in line.split('|')]
        if len(c)<8 or c[1] not in('allreduce','allgather') or c[3] in('0','size (bytes)'): continue
        lib='Socket' if 'Socket' in c[2] else 'UCX' if 'UCX' in c[2] else 'MPI'
        d[(c[1],int(c[3]),lib)].append(float(c[4])*1000)
keys=sorted({(k[0],k[1]) for k in d})
print('| collective | size (B) | Socket | UCX | Open MPI | Socket / Open MPI | UCX / Open MPI |')
print('|---|---|---|---|---|---|---|')
for coll,size in keys:
    m={l:st.median(d[(coll,size,l)]) for l in ('Socket','UCX','MPI')}
    r={l:'%d-%d'%(min(d[(coll,size,l)]),max(d[(coll,size,l)])) for l in ('Socket','UCX','MPI')}
    print('| %s | %d | %d (%s) | %d (%s) | %d (%s) | %.2f | %.2f |'%(coll,size,m['Socket'],r['Socket'],m['UCX'],r['UCX'],m['MPI'],r['MPI'],m['Socket']/m['MPI'],m['UCX']/m['MPI']))
