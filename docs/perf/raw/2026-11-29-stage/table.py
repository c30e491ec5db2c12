#!/usr/bin/env python3
"""Tables of docs/perf/net.md, "8. One read a small slot", from the runs' .log tables.

python3 table.py stage SETUP   (SETUP: h2, h4, x42): before (old) against the stage (new), Open MPI over all runs
python3 table.py forced H      (H: 2 or 4): the algorithms forced, and Open MPI where it ran
"""
import glob, math, os, re, sys

here = os.path.dirname(os.path.abspath(__file__))


def parse(path):
    d = {}
    for line in open(path):
        m = re.match(r'\| (\w+) \| (.*?) \| (\d+) \| ([\d.]+) \|', line)
        if m and m.group(3) != '0':
            lib = 'MPI' if 'MPI' in m.group(2) else ('UCX' if 'UCX' in m.group(2) else 'Socket')
            d[(m.group(1), lib, int(m.group(3)))] = float(m.group(4)) * 1000  # us
    return d


def rng(xs):
    xs = [round(x) for x in xs]
    return '%d-%d' % (min(xs), max(xs)) if xs else ''


def stage(setup):
    runs = {v: [parse(f) for f in sorted(glob.glob(f'{here}/stage/{setup}-{v}-*.log'))] for v in ('old', 'new')}
    keys = sorted(k for k in runs['old'][0] if k[1] == 'Socket')
    print('| collective | size (B) | Socket before | Socket now | Open MPI |')
    print('|---|---|---|---|---|')
    logs = []
    for k in keys:
        o = [r[k] for r in runs['old'] if k in r]
        n = [r[k] for r in runs['new'] if k in r]
        mpi = [r[(k[0], 'MPI', k[2])] for v in runs for r in runs[v] if (k[0], 'MPI', k[2]) in r]
        logs.append(math.log((sum(n) / len(n)) / (sum(o) / len(o))))
        print(f'| {k[0]} | {k[2]} | {rng(o)} | {rng(n)} | {rng(mpi)} |')
    print(f'\nnow / before, geometric mean of the mean times: {math.exp(sum(logs) / len(logs)):.3f} ({len(logs)} sizes)')


def forced(h):
    algs = ['RecDoubling', 'TwoShot', 'Ring', 'MPI']
    runs = {a: [parse(f) for f in sorted(glob.glob(f'{here}/forced/f{h}-{a}-*.log'))] for a in algs}
    algs = [a for a in algs if runs[a]]
    keys = sorted({(k[0], k[2]) for a in algs for r in runs[a] for k in r})
    print('| collective | size (B) | ' + ' | '.join(algs) + ' |')
    print('|---|---|' + '---|' * len(algs))
    for c, s in keys:
        cells = [rng([v for r in runs[a] for (cc, _, ss), v in r.items() if cc == c and ss == s]) for a in algs]
        print(f'| {c} | {s} | ' + ' | '.join(cells) + ' |')


if __name__ == '__main__':
    {'stage': stage, 'forced': forced}[sys.argv[1]](sys.argv[2])
