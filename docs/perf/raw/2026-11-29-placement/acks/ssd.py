# Per connection, what `ss -tin` counted between two snapshots: segments out and in, those with data, and the
# rest (bare ACKs); connections with fewer than 100 segments left out. python3 ssd.py A B
import re,sys
def parse(f):
    d={}; lines=open(f).read().splitlines()
    for i,l in enumerate(lines):
        if l.startswith('ESTAB'):
            f2=l.split(); key=(f2[3],f2[4]); info=lines[i+1]
            g=lambda k: int(re.search(r'\b'+k+r':(\d+)',info).group(1)) if re.search(r'\b'+k+r':(\d+)',info) else 0
            d[key]=dict(so=g('segs_out'),si=g('segs_in'),dso=g('data_segs_out'),dsi=g('data_segs_in'),bs=g('bytes_sent'))
    return d
a=parse(sys.argv[1]); b=parse(sys.argv[2])
for k in b:
    if k in a:
        x={kk:b[k][kk]-a[k][kk] for kk in b[k]}
        if x['so']+x['si']>100: print(k, 'out',x['so'],'data_out',x['dso'],'ack_out',x['so']-x['dso'],'in',x['si'],'data_in',x['dsi'],'ack_in',x['si']-x['dsi'], 'B/seg', round(x['bs']/max(1,x['dso']),1))
