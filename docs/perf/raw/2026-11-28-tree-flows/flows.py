import glob, re, sys, collections
# For each bench (Tree, ring): the last snapshot of each namespace that holds data connections; print per data flow
# (bytes_sent > 100 MB) its busy time and limits.
for cfg in sys.argv[1:]:
    files = sorted(glob.glob(f'/tmp/ss/{cfg}/ss/*.txt'), key=lambda f: float(f.rsplit('-',1)[1][:-4]))
    last = {}
    for f in files:
        ns = f.split('/')[-1].rsplit('-',1)[0]
        txt = open(f).read()
        if 'bytes_sent' in txt: last[ns] = (f, txt)
    print('==', cfg)
    for ns in sorted(last):
        f, txt = last[ns]
        lines = txt.split('\n')
        for i in range(0, len(lines)-1, 2):
            head, info = lines[i], lines[i+1]
            m = re.search(r'bytes_sent:(\d+)', info)
            if not m or int(m.group(1)) < 100e6: continue
            busy = re.search(r'busy:(\d+)ms', info); rw = re.search(r'rwnd_limited:(\d+)ms', info); sb = re.search(r'sndbuf_limited:(\d+)ms', info)
            retr = re.search(r'bytes_retrans:(\d+)', info)
            parts = head.split()
            print(f"{ns} {parts[-2]} -> {parts[-1]} sent {int(m.group(1))/1e9:.2f} GB busy {busy.group(1) if busy else '-'} ms rwnd_lim {rw.group(1) if rw else 0} sndbuf_lim {sb.group(1) if sb else 0} retrans {retr.group(1) if retr else 0}")
